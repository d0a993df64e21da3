"""From the environment (DS_BUILD_*, DS_ACCELERATOR, arch lists) to a frozen build Plan.

``make_plan`` is a pure function of an environment mapping and a probed
``Toolchain``: it returns the decision *and the reasons* (ops to build with
their archs and flags, ops skipped and why, errors), and never touches
``os.environ``. Tests call it with tables of environments and fake hosts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from op_builder import settings
from op_builder.builder import OpBuilder
from op_builder.context import (
    Accelerator,
    BuildContext,
    OpFlags,
    resolve_accelerator,
    resolve_context,
    visible_gpu_capabilities,
)
from op_builder.cross import resolve_cross
from op_builder.env import env_flag
from op_builder.errors import BadInputError, UserFacingError
from op_builder.registry import ALL_OPS
from op_builder.suggest import did_you_mean
from op_builder.toolchain import Toolchain, probe


@dataclass(frozen=True)
class Problem:
    """One error or skip reason, with an optional hint for the user."""

    message: str
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class PlannedOp:
    name: str
    target: str
    archs: tuple[str, ...]
    flags: OpFlags


@dataclass(frozen=True)
class SkippedOp:
    name: str
    reason: str


@dataclass(frozen=True)
class Plan:
    accelerator: Accelerator
    ops: tuple[PlannedOp, ...]
    skipped: tuple[SkippedOp, ...]
    errors: tuple[Problem, ...]
    warnings: tuple[str, ...]
    context: BuildContext | None

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "accelerator": self.accelerator,
            "cuda_archs": [str(a) for a in self.context.cuda_archs] if self.context else [],
            "rocm_archs": list(self.context.rocm_archs) if self.context else [],
            "ops": [
                {"name": op.name, "target": op.target, "archs": list(op.archs), "flags": op.flags.to_json()}
                for op in self.ops
            ],
            "skipped": [{"name": s.name, "reason": s.reason} for s in self.skipped],
            "errors": [e.to_json() for e in self.errors],
            "warnings": list(self.warnings),
        }


def requested_ops(env: Mapping[str, str]) -> tuple[bool, dict[str, bool]]:
    """(DS_BUILD_OPS, {op: explicit DS_BUILD_<OP> value}). Unknown names raise."""
    explicit: dict[str, bool] = {}
    by_variable = {b.build_variable: name for name, b in ALL_OPS.items()}
    for variable in sorted(env):
        if not variable.startswith(settings.BUILD_PREFIX) or variable in settings.BUILD_SETTINGS:
            continue
        op = by_variable.get(variable)
        if op is None:
            suggestion = did_you_mean(variable, [*by_variable, *settings.BUILD_SETTINGS])
            raise BadInputError(
                f"unknown build variable {variable}",
                hint=(suggestion + " " if suggestion else "") + "(python -m op_builder report lists the ops)",
            )
        value = env_flag(env, variable)
        explicit[op] = bool(value)
    return bool(env_flag(env, settings.BUILD_OPS.name)), explicit


def make_plan(
    env: Mapping[str, str],
    toolchain: Toolchain,
    native: Callable[[], Sequence[str]] | None = None,
) -> Plan:
    """Which ops to build, each with its own archs and flags, and every error."""
    try:
        build_all, explicit = requested_ops(env)
        ctx = resolve_context(env, toolchain, native)
    except UserFacingError as exc:
        accelerator: Accelerator = "cpu"
        with contextlib.suppress(UserFacingError):
            accelerator = resolve_accelerator(env, toolchain)
        return Plan(accelerator, (), (), (Problem(exc.message, exc.hint),), (), None)

    ops: list[PlannedOp] = []
    skipped: list[SkippedOp] = []
    errors: list[Problem] = []
    for name, builder in ALL_OPS.items():
        wanted = explicit.get(name, build_all)
        if not wanted:
            continue
        reason = builder.incompatibility(ctx)
        if reason is None:
            ops.append(_planned(builder, ctx))
        elif name in explicit:
            errors.append(
                Problem(
                    f"{builder.build_variable}=1 but {name} cannot be built: {reason}",
                    hint=f"unset {builder.build_variable} to skip it",
                )
            )
        else:
            skipped.append(SkippedOp(name, reason))
    return Plan(ctx.accelerator, tuple(ops), tuple(skipped), tuple(errors), ctx.warnings, ctx)


def _planned(builder: OpBuilder, ctx: BuildContext) -> PlannedOp:
    return PlannedOp(builder.name, builder.target, builder.archs_for(ctx), builder.flags(ctx))


def probe_host(env: Mapping[str, str]) -> Toolchain:
    """Probe this host once, every op's system libraries included."""
    libraries = tuple(spec for b in ALL_OPS.values() for spec in b.system_library_specs())
    return probe(env, libraries, resolve_cross(env))


def plan_from_environment(env: Mapping[str, str] | None = None) -> Plan:
    """Probe this host and plan against ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    return make_plan(env, probe_host(env), native=visible_gpu_capabilities)
