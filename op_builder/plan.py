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

from op_builder import archs as arch_lib
from op_builder.builder import Accelerator, BuildContext, OpBuilder, OpFlags, cxx_standard
from op_builder.errors import BadInputError, UserFacingError
from op_builder.registry import ALL_OPS
from op_builder.suggest import did_you_mean
from op_builder.toolchain import Toolchain, check_cuda_versions

BUILD_PREFIX = "DS_BUILD_"
# DS_BUILD_* names that are settings, not ops.
_SETTINGS = frozenset({"DS_BUILD_OPS"})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


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


def env_flag(env: Mapping[str, str], name: str) -> bool | None:
    """True/False for a set boolean variable, None when unset; BadInputError when garbled."""
    if name not in env:
        return None
    value = env[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadInputError(f"{name}={env[name]!r} is not a boolean", hint=f"use {name}=1 or {name}=0")


def resolve_accelerator(env: Mapping[str, str], toolchain: Toolchain) -> Accelerator:
    """DS_ACCELERATOR when set; else what the installed torch was built for."""
    named = env.get("DS_ACCELERATOR", "").strip().lower()
    if named:
        if named not in ("cpu", "cuda", "rocm"):
            raise BadInputError(
                f"DS_ACCELERATOR={named!r} is not a known target",
                hint="use cuda, rocm or cpu",
            )
        return named  # type: ignore[return-value]
    torch = toolchain.torch
    if torch is not None and torch.hip:
        return "rocm"
    if torch is not None and torch.cuda:
        return "cuda"
    return "cpu"


def resolve_context(
    env: Mapping[str, str],
    toolchain: Toolchain,
    native: Callable[[], Sequence[str]] | None = None,
) -> BuildContext:
    """Read the build-wide settings once. Raises BadInputError on bad input."""
    accelerator = resolve_accelerator(env, toolchain)
    warnings: list[str] = []
    cuda_archs: tuple[arch_lib.CudaArch, ...] = ()
    rocm_archs: tuple[str, ...] = ()
    if accelerator == "cuda":
        text = env.get("TORCH_CUDA_ARCH_LIST", "").strip()
        if text:
            cuda_archs = arch_lib.parse_cuda_arch_list(text, native)
            if toolchain.cuda is not None:
                arch_lib.validate_for_toolkit(cuda_archs, toolchain.cuda.version)
        elif toolchain.cuda is not None:
            cuda_archs = arch_lib.default_cuda_archs(toolchain.cuda.version)
        torch = toolchain.torch
        if toolchain.cuda is not None and torch is not None and torch.cuda:
            warning = check_cuda_versions(toolchain.cuda.version, torch.cuda, env)
            if warning:
                warnings.append(warning)
        elif torch is not None and not torch.cuda:
            warnings.append(
                f"torch {torch.version} is not a CUDA build: GPU ops can be planned, "
                "but their bindings compile only against a CUDA build of torch"
            )
    elif accelerator == "rocm":
        text = env.get("PYTORCH_ROCM_ARCH", "").strip()
        rocm_archs = arch_lib.parse_rocm_arch_list(text) if text else arch_lib.DEFAULT_ROCM_ARCHS
    threads = env.get("DS_NVCC_THREADS", "2").strip()
    if not threads.isdigit() or int(threads) < 1:
        raise BadInputError(f"DS_NVCC_THREADS={threads!r} is not a positive integer", hint="for example 2")
    return BuildContext(
        accelerator=accelerator,
        toolchain=toolchain,
        cuda_archs=cuda_archs,
        rocm_archs=rocm_archs,
        cpu_native=bool(env_flag(env, "DS_CPU_NATIVE")),
        nvcc_threads=int(threads),
        cxx_std=cxx_standard(toolchain.torch.version if toolchain.torch else None),
        warnings=tuple(warnings),
    )


def requested_ops(env: Mapping[str, str]) -> tuple[bool, dict[str, bool]]:
    """(DS_BUILD_OPS, {op: explicit DS_BUILD_<OP> value}). Unknown names raise."""
    explicit: dict[str, bool] = {}
    by_variable = {b.build_variable: name for name, b in ALL_OPS.items()}
    for variable in sorted(env):
        if not variable.startswith(BUILD_PREFIX) or variable in _SETTINGS:
            continue
        op = by_variable.get(variable)
        if op is None:
            suggestion = did_you_mean(variable, [*by_variable, *_SETTINGS])
            raise BadInputError(
                f"unknown build variable {variable}",
                hint=(suggestion + " " if suggestion else "") + "(python -m op_builder report lists the ops)",
            )
        value = env_flag(env, variable)
        explicit[op] = bool(value)
    return bool(env_flag(env, "DS_BUILD_OPS")), explicit


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
    from op_builder.toolchain import probe

    libraries = tuple(
        (lib.name, lib.header, lib.symbol) for b in ALL_OPS.values() for lib in b.system_libraries
    )
    return probe(env, libraries)


def plan_from_environment(env: Mapping[str, str] | None = None) -> Plan:
    """Probe this host and plan against ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    return make_plan(env, probe_host(env), native=visible_gpu_capabilities)


def visible_gpu_capabilities() -> list[str]:
    """Compute capabilities of visible CUDA GPUs, for the 'native' arch list."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return sorted(
        {"{}.{}".format(*torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())}
    )
