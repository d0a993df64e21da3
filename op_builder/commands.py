"""The handlers of ``python -m op_builder``'s commands: each takes the parsed arguments and the
environment, prints its result (a table, or JSON with ``--json``) and returns the exit code.
Errors are raised (``UserFacingError``) for ``__main__.main`` to report.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from op_builder import archs as arch_lib
from op_builder import binary, settings
from op_builder.context import resolve_context, visible_gpu_capabilities
from op_builder.cross import native_platform
from op_builder.errors import BadInputError
from op_builder.manifest import read_installed
from op_builder.plan import make_plan, probe_host
from op_builder.preflight import run_preflight
from op_builder.registry import ALL_OPS, check_op_names, get_builder, origin_of
from op_builder.report import SelfTestResult
from op_builder.toolchain import CudaToolkit, Toolchain, probe_cuda
from op_builder.verify import verify_ops


def emit(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _toolchain(env: Mapping[str, str], cuda_override: str | None) -> Toolchain:
    found = probe_host(env)
    if cuda_override is None:
        return found
    _check_version(cuda_override)
    # Plan for another toolkit than the one here (e.g. the image's CUDA 12.1).
    home = found.cuda.home if found.cuda else "(not installed here)"
    nvcc = found.cuda.nvcc if found.cuda else "nvcc"
    return replace(found, cuda=CudaToolkit(home=home, nvcc=nvcc, version=cuda_override))


def _check_version(text: str) -> None:
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise BadInputError(
            f"--cuda {text!r} is not a CUDA version", hint="use MAJOR.MINOR, e.g. --cuda 12.1"
        )
    reason = arch_lib.unknown_cuda_release(text)
    if reason is not None:
        raise BadInputError(
            f"--cuda {text}: {reason}", hint=f"known CUDA releases: {arch_lib.KNOWN_CUDA_RELEASES}"
        )


# ------------------------------------------------------------------ report


def cmd_report(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    toolchain = _toolchain(env, args.cuda)
    ctx = resolve_context(env, toolchain)
    manifest = read_installed()
    installed = manifest.ops if manifest else {}
    ops = []
    here = toolchain.torch.version if toolchain.torch else None
    for name, builder in ALL_OPS.items():
        reason = builder.incompatibility(ctx)
        # What the installed module is, else what a build here would make: one module for every
        # torch from a stable target on, or one for this torch alone.
        entry = installed.get(name)
        target = entry.stable_abi if entry is not None else builder.stable_target(ctx)
        torch_release = manifest.torch if entry is not None and manifest is not None else here
        ops.append(
            {
                "name": name,
                "target": builder.target,
                "origin": origin_of(name).to_json(),
                "installed": name in installed,
                "compatible": reason is None,
                "reason": reason,
                "archs": list(installed[name].archs) if name in installed else list(builder.archs_for(ctx)),
                "build_packages": list(builder.build_packages()),
                "runtime_packages": list(builder.all_runtime_packages()),
                "abi": {"kind": "stable", "torch": f">={target}"}
                if target is not None
                else {"kind": "torch", "torch": torch_release},
            }
        )
    cross = toolchain.cross
    here = native_platform()
    data = {
        # The platform the ops are built for; a cross build says on which it runs.
        "platform": cross.platform if cross is not None else here,
        "build_platform": cross.build_platform if cross is not None else here,
        "accelerator": ctx.accelerator,
        "torch": toolchain.torch.version if toolchain.torch else None,
        "torch_cuda": toolchain.torch.cuda if toolchain.torch else None,
        "torch_hip": toolchain.torch.hip if toolchain.torch else None,
        "cuda_toolkit": toolchain.cuda.version if toolchain.cuda else None,
        "rocm_toolkit": toolchain.rocm.version if toolchain.rocm else None,
        "cxx": f"{toolchain.cxx.path} {toolchain.cxx.version}" if toolchain.cxx else None,
        "ninja": toolchain.ninja,
        "manifest": manifest.to_json() if manifest else None,
        "warnings": list(ctx.warnings),
        "ops": ops,
    }
    if args.json:
        emit(data)
        return 0
    if cross is not None:
        print(f"{'platform':13} {cross.platform} (cross build on {cross.build_platform})")
    for key in ("accelerator", "torch", "cuda_toolkit", "rocm_toolkit", "cxx", "ninja"):
        print(f"{key:13} {data[key] or '-'}")
    for warning in ctx.warnings:
        print(f"warning: {warning}")
    print()
    rows: list[list[str]] = [
        [
            str(op["name"]),
            str(op["target"]),
            origin_of(str(op["name"])).describe(),
            "yes" if op["installed"] else "no",
            _abi_text(op["abi"]),
            "yes" if op["compatible"] else "no",
            str(op["reason"] or ""),
        ]
        for op in ops
    ]
    print(_table(rows, ["op", "target", "from", "installed", "module", "compatible", "why not"]))
    return 0


def _abi_text(abi: Any) -> str:
    """ "stable: torch >=2.10" (one module for every torch from 2.10) or "torch 2.13.0" (for it alone)."""
    if abi["kind"] == "stable":
        return f"stable: torch {abi['torch']}"
    return f"torch {abi['torch'] or '?'} only"


# ------------------------------------------------------------------ verify


def cmd_verify(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    names: list[str] = list(dict.fromkeys(args.ops))  # an op named twice is verified once
    check_op_names(names)  # a typo is bad input (exit 2), not a failed verification
    manifest = read_installed()
    if not names:
        names = sorted(manifest.ops) if manifest else []
    report = verify_ops(
        names,
        env,
        manifest,
        selftest=args.selftest,
        device=args.device,
        require_gpu=args.require_gpu,
    )
    if args.json:
        emit(report.to_json())
    else:
        rows = [
            [
                r.name,
                r.source or "-",
                _selftest_cell(r.selftest),
                "-" if r.binary is None else ("ok" if r.binary.ok else "DIFFERS"),
                f"{r.seconds:.3f}",
                "; ".join(r.problems()),
            ]
            for r in report.ops
        ]
        print(_table(rows, ["op", "loaded from", "self-test", "device code", "seconds", "problem"]))
    if not report.ops:
        print("error: no ops are installed ahead of time, and none were named", file=sys.stderr)
    return 0 if report.ok else 1


def _selftest_cell(test: SelfTestResult | None) -> str:
    if test is None:
        return "-"
    if test.skipped:
        return "skipped"
    return f"pass ({test.isa})" if test.ok and test.isa else ("pass" if test.ok else "FAIL")


# ------------------------------------------------------------------ selftest


def cmd_selftest(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    # Deferred: the harness imports torch (and each test its op's front); the other commands must not.
    from op_builder import selftest as selftests

    names: list[str] = list(dict.fromkeys(args.ops))  # an op named twice is tested once
    check_op_names(names)  # a typo is bad input (exit 2), not a failed self-test
    if not names:
        manifest = read_installed()
        installed = manifest.ops if manifest else {}
        names = [name for name in ALL_OPS if name in installed] or list(ALL_OPS)
    if args.isa != "auto":
        try:
            selftests.force_isa(args.isa, names, env)
        except selftests.UnsupportedIsa as exc:
            raise BadInputError(
                f"--isa {args.isa}: {exc}", hint=f"use --isa {exc.supported} (or a lower level), or auto"
            ) from None
    # --device cuda without a GPU: every op reported skipped (so the run fails), the CPU ops too,
    # whose pass on the CPU would otherwise make the exit code claim a GPU run that never happened.
    report = selftests.run_selftests(
        names, selftests.resolve_device(args.device), env, gpu_required=args.device == "cuda"
    )
    if args.json:
        emit(report.to_json())
    else:
        rows = [
            [
                r.name,
                "skipped" if r.skipped else ("pass" if r.ok else "FAIL"),
                r.device,
                r.isa or "-",
                "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}",
                "-" if r.tolerance is None else f"{r.tolerance:.3g}",
                f"{r.seconds:.3f}",
                r.skipped or r.error or "",
            ]
            for r in report.ops
        ]
        print(_table(rows, ["op", "result", "device", "isa", "max err", "tolerance", "seconds", "why"]))
    return 0 if report.ok else 1


# ------------------------------------------------------------------ flags / plan


def cmd_flags(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    builder = get_builder(args.op)
    ctx = resolve_context(env, _toolchain(env, args.cuda))
    flags = builder.flags(ctx)
    reason = builder.incompatibility(ctx)
    data = {**flags.to_json(), "accelerator": ctx.accelerator, "buildable": reason is None, "reason": reason}
    if args.json:
        emit(data)
        return 0
    print(f"op        {flags.name} -> {flags.module} ({ctx.accelerator})")
    print(f"from      {origin_of(args.op).describe()}")
    if reason:
        print(f"note      not buildable here: {reason}")
    print(f"archs     {';'.join(flags.archs) or '-'}")
    print("sources   " + "\n          ".join(flags.sources))
    print(f"cxx       {' '.join(flags.cxx)}")
    if flags.device_compiler:
        print(f"{flags.device_compiler:9} {' '.join(flags.device)}")
    print(f"link      {' '.join([*flags.ldflags, *(f'-l{x}' for x in flags.libraries)]) or '-'}")
    return 0


def cmd_plan(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    plan = make_plan(env, _toolchain(env, args.cuda), native=visible_gpu_capabilities)
    if args.json:
        emit(plan.to_json())
        return 0 if plan.ok else 2
    print(f"target: {plan.accelerator}")
    for warning in plan.warnings:
        print(f"warning: {warning}")
    if plan.ops:
        rows = [[op.name, op.target, ";".join(op.archs) or "-"] for op in plan.ops]
        print(_table(rows, ["op", "target", "archs"]))
    else:
        print("no ops selected (set DS_BUILD_OPS=1 or DS_BUILD_<OP>=1)")
    for skipped in plan.skipped:
        print(f"skipped {skipped.name}: {skipped.reason}")
    for error in plan.errors:
        print(f"error: {error.message}" + (f"\n  hint: {error.hint}" if error.hint else ""), file=sys.stderr)
    return 0 if plan.ok else 2


def cmd_archs(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    if args.cuda is not None:
        _check_version(args.cuda)
        version: str | None = args.cuda
    else:
        found = probe_cuda(env)
        version = found.version if found else None
    text = args.list if args.list is not None else env.get(settings.CUDA_ARCH_LIST.name, "").strip()
    if text:
        parsed = arch_lib.parse_cuda_arch_list(text, visible_gpu_capabilities)
        origin = "argument" if args.list is not None else "TORCH_CUDA_ARCH_LIST"
    elif version is not None:
        parsed = arch_lib.default_cuda_archs(version)
        origin = f"default for CUDA {version}"
    else:
        raise BadInputError(
            "no arch list given and no CUDA toolkit found to take the default from",
            hint="pass a list (python -m op_builder archs '8.0;9.0') or --cuda X.Y",
        )
    if version is not None:
        arch_lib.validate_for_toolkit(parsed, version)
    names = [str(a) for a in parsed]
    nvcc_flags = arch_lib.nvcc_gencode_flags(parsed)
    data = {
        "cuda": version,
        "origin": origin,
        "archs": names,
        "bf16": arch_lib.bf16_supported(parsed),
        "nvcc_flags": nvcc_flags,
    }
    if args.json:
        emit(data)
    else:
        print(f"archs ({origin}): {';'.join(names)}")
        print("nvcc flags: " + " ".join(nvcc_flags))
    return 0


# ------------------------------------------------------------------ binary


def cmd_binary(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    code = binary.read_device_code(args.file)
    if args.json:
        emit(code.to_json())
    else:
        print(binary.format_text(code))
    return 0


def cmd_preflight(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """For an image's entrypoint or a job's first step: exit 1 when an installed op cannot run
    on this machine (no code for its GPU, too old a driver), each line saying why."""
    result = run_preflight(read_installed(), require_gpu=args.require_gpu)
    if args.json:
        emit(result.to_json())
    else:
        print("GPUs: " + ("; ".join(result.devices) or "none visible"))
        rows = [[op.name, "ok" if op.ok else "NO", op.reason] for op in result.ops]
        print(_table(rows, ["op", "runs here", "why"]) if rows else "no ops are installed ahead of time")
    return 0 if result.ok else 1
