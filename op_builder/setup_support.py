"""What ``setup.py`` needs: the planned extensions and a build_ext that writes the manifest.

Kept apart from ``setup.py`` so the logic is importable and testable. Nothing
here imports torch unless at least one op is selected, so a plain
``pip wheel .`` (no DS_BUILD_* set) needs no torch and yields a pure wheel whose
ops compile just in time.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from op_builder import manifest
from op_builder.errors import UserFacingError
from op_builder.paths import MANIFEST_RELPATH
from op_builder.plan import Plan, plan_from_environment, requested_ops
from op_builder.registry import ALL_OPS


def _say(message: str) -> None:
    print(f"op_builder: {message}", file=sys.stderr, flush=True)


def _say_error(message: str, hint: str | None) -> None:
    _say(f"error: {message}" + (f" (hint: {hint})" if hint else ""))


def _print_plan(plan: Plan) -> None:
    for warning in plan.warnings:
        _say(f"warning: {warning}")
    for op in plan.ops:
        archs = ";".join(op.archs) if op.archs else "host CPU"
        _say(f"will build {op.name} ({archs})")
    if plan.skipped:
        # Loud on purpose: DS_BUILD_OPS=1 skipping ops silently is how images ship without them.
        _say(f"SKIPPED {len(plan.skipped)} op(s) that cannot be built for {plan.accelerator}:")
        for skipped in plan.skipped:
            _say(f"  - {skipped.name}: {skipped.reason}")
    for error in plan.errors:
        _say_error(error.message, error.hint)


def planned_extensions(env: Mapping[str, str]) -> tuple[list[Any], dict[str, Any]]:
    """(ext_modules, cmdclass) for setup(); exits with the plan's errors when it has any."""
    try:
        build_all, explicit = requested_ops(env)
    except UserFacingError as exc:  # a garbled or unknown DS_BUILD_* name
        _say_error(exc.message, exc.hint)
        raise SystemExit(1) from None
    if not build_all and not any(explicit.values()):
        return [], {}
    plan = plan_from_environment(env)
    _print_plan(plan)
    if not plan.ok or plan.context is None:
        raise SystemExit(1)
    if not plan.ops:
        _say("no op selected can be built; the wheel will compile ops just in time")
        return [], {}
    ctx = plan.context
    extensions = [ALL_OPS[op.name].extension(ctx) for op in plan.ops]
    return extensions, {"build_ext": _manifest_build_ext(plan)}


def _manifest_build_ext(plan: Plan) -> type:
    # Deferred: a wheel with no op selected is built without torch.
    from torch.utils.cpp_extension import BuildExtension

    class ManifestBuildExt(BuildExtension):
        """torch's BuildExtension, announcing each op and recording what was built."""

        def build_extension(self, ext: Any) -> None:
            name = ext.name.rsplit(".", 1)[-1]
            _say(f"building op {name}")
            try:
                super().build_extension(ext)
            except BaseException:
                _say(f"op {name} FAILED to build")
                raise
            _say(f"built op {name}")

        def run(self) -> None:
            super().run()
            import torch  # deferred like BuildExtension above

            ctx = plan.context
            assert ctx is not None
            toolkit = ctx.toolchain.cuda.version if ctx.accelerator == "cuda" and ctx.toolchain.cuda else None
            hip = ctx.toolchain.rocm.version if ctx.accelerator == "rocm" and ctx.toolchain.rocm else None
            built = manifest.Manifest(
                torch=torch.__version__,
                cuda=toolkit,
                hip=hip,
                accelerator=ctx.accelerator,
                python=platform.python_version(),
                ops={
                    op.name: manifest.InstalledOp(
                        op.name, op.flags.module, op.target, op.archs, op.flags.to_json()
                    )
                    for op in plan.ops
                },
            )
            target = Path(self.build_lib) / MANIFEST_RELPATH
            manifest.write(built, target)
            if self.inplace:
                manifest.write(built, manifest.manifest_path())
            _say(f"wrote {target} ({len(plan.ops)} op(s))")

    return ManifestBuildExt
