"""``python -m op_builder {report,verify,selftest,binary,flags,plan,archs}``.

argparse rather than a CLI framework: this runs inside slim runtime images,
whose only dependencies are torch and packaging. This ``main`` is the only place
that turns errors into exit codes (0 ok, 1 failed, 2 bad input, 130 interrupted);
with ``--json`` every outcome, a malformed command line and Ctrl-C included, is one
JSON document on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from op_builder import archs as arch_lib
from op_builder import binary, settings
from op_builder.context import resolve_context, visible_gpu_capabilities
from op_builder.errors import BadInputError, UserFacingError
from op_builder.manifest import read_installed
from op_builder.op_sources import SOURCES_VARIABLE, source_dirs
from op_builder.plan import make_plan, probe_host
from op_builder.registry import ALL_OPS, check_op_names, get_builder, origin_of
from op_builder.report import SelfTestResult
from op_builder.toolchain import CudaToolkit, Toolchain, probe_cuda
from op_builder.verification import verify_ops

# 128 + SIGINT, as shells report a command stopped by Ctrl-C (imagegen's too).
INTERRUPTED_EXIT_CODE = 130


def _emit(data: Any) -> None:
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
    for name, builder in ALL_OPS.items():
        reason = builder.incompatibility(ctx)
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
            }
        )
    data = {
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
        _emit(data)
        return 0
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
            "yes" if op["compatible"] else "no",
            str(op["reason"] or ""),
        ]
        for op in ops
    ]
    print(_table(rows, ["op", "target", "from", "installed", "compatible", "why not"]))
    return 0


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
        _emit(report.to_json())
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
    # Deferred: kernels.selftests imports torch and every front; the other commands must not.
    from kernels import selftests

    names: list[str] = list(dict.fromkeys(args.ops))  # an op named twice is tested once
    check_op_names(names)  # a typo is bad input (exit 2), not a failed self-test
    if not names:
        manifest = read_installed()
        installed = manifest.ops if manifest else {}
        names = [name for name in ALL_OPS if name in installed] or list(ALL_OPS)
    if args.isa != "auto":
        try:
            selftests.force_isa(args.isa, names)
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
        _emit(report.to_json())
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
        _emit(data)
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
        _emit(plan.to_json())
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
        _emit(data)
    else:
        print(f"archs ({origin}): {';'.join(names)}")
        print("nvcc flags: " + " ".join(nvcc_flags))
    return 0


# ------------------------------------------------------------------ binary


def cmd_binary(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    code = binary.read_device_code(args.file)
    if args.json:
        _emit(code.to_json())
    else:
        print(binary.format_text(code))
    return 0


# ------------------------------------------------------------------ entry


class _UsageError(Exception):
    """A malformed command line, as argparse words it, and the (sub)command it was for."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised to ``main`` (which reports it like any bad input,
    as JSON under --json) instead of printing the usage and exiting. Subcommands get it too."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self.prog, message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m op_builder", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text)
        command.add_argument("--json", action="store_true", help="machine-readable output")
        command.add_argument(
            "--op-source",
            action="append",
            default=[],
            metavar="DIR",
            help=f"an op package directory whose ops join ours (repeatable; also {SOURCES_VARIABLE})",
        )
        return command

    report = add("report", "every op: target, installed, compatible here, and why not")
    report.add_argument("--cuda", metavar="X.Y", help="judge against this CUDA toolkit version")
    verify = add("verify", "load each op ahead of time, run its self-test, audit its GPU code")
    verify.add_argument("ops", nargs="*", help="ops to verify (default: every installed op)")
    verify.add_argument(
        "--no-selftest", dest="selftest", action="store_false", help="only load and audit, skip self-tests"
    )
    verify.add_argument(
        "--device",
        choices=("cpu", "cuda", "auto"),
        default="auto",
        help="where self-tests run (default: auto)",
    )
    verify.add_argument(
        "--require-gpu", action="store_true", help="a GPU op's self-test skipped for want of a GPU fails"
    )
    selftest = add("selftest", "each op's kernel against an independent reference; exit 0 only if all pass")
    selftest.add_argument("ops", nargs="*", help="ops to test (default: the installed ops, else every op)")
    selftest.add_argument(
        "--device",
        choices=("cpu", "cuda", "auto"),
        default="auto",
        help="where GPU ops run: cuda, or cpu (GPU ops are then skipped, and fail); auto: cuda if visible",
    )
    selftest.add_argument(
        "--isa",
        choices=("scalar", "avx2", "avx512", "neon", "sve", "auto"),
        default="auto",
        help="force the CPU optimizers' instruction set (default: the best this CPU runs)",
    )
    flags = add("flags", "the exact sources and flags an op gets under this environment")
    flags.add_argument("op")
    flags.add_argument("--cuda", metavar="X.Y", help="plan for this CUDA toolkit version")
    plan = add("plan", "which ops DS_BUILD_* selects, their archs, and every error")
    plan.add_argument("--cuda", metavar="X.Y", help="plan for this CUDA toolkit version")
    device_code = add("binary", "the GPU code a shared object holds: SASS, PTX and gfx targets")
    device_code.add_argument("file", help="a compiled module (.so) or object file")
    archs = add("archs", "resolve an arch list and show its nvcc flags")
    archs.add_argument("list", nargs="?", help="arch list (default: TORCH_CUDA_ARCH_LIST or the toolkit's)")
    archs.add_argument("--cuda", metavar="X.Y", help="validate against this CUDA toolkit version")
    return parser


_COMMANDS = {
    "binary": cmd_binary,
    "report": cmd_report,
    "verify": cmd_verify,
    "selftest": cmd_selftest,
    "flags": cmd_flags,
    "plan": cmd_plan,
    "archs": cmd_archs,
}


@contextlib.contextmanager
def _with_op_sources(env: Mapping[str, str], extra: Sequence[str]) -> Iterator[Mapping[str, str]]:
    """``env`` with ``--op-source`` folders added to ``DS_OP_SOURCES``, which the process
    environment also holds meanwhile: the registry, setup-time and JIT builds all read it there."""
    sources = source_dirs(env, extra)
    if not sources:
        yield env
        return
    value = os.pathsep.join(str(p) for p in sources)
    before = os.environ.get(SOURCES_VARIABLE)
    os.environ[SOURCES_VARIABLE] = value
    try:
        yield {**env, SOURCES_VARIABLE: value}
    finally:
        if before is None:
            os.environ.pop(SOURCES_VARIABLE, None)
        else:
            os.environ[SOURCES_VARIABLE] = before


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    # Read before parsing: a usage error stops argparse before --json is known.
    wants_json = "--json" in arguments
    try:
        try:
            args = _parser().parse_args(arguments)
        except _UsageError as exc:
            usage = BadInputError(exc.message, hint=f"see `{exc.prog} --help`")
            return _report_error(usage, wants_json, env)
        try:
            with _with_op_sources(env, args.op_source) as with_sources:
                return _COMMANDS[args.command](args, with_sources)
        except UserFacingError as exc:
            return _report_error(exc, bool(getattr(args, "json", False)), env)
    except KeyboardInterrupt:
        if wants_json:
            _emit({"error": {"message": "interrupted", "hint": None, "exit_code": INTERRUPTED_EXIT_CODE}})
        print("interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    except BrokenPipeError:
        # The reader went away (`... --json | head`): nothing more can be said on stdout. As
        # imagegen (click): exit 1, no traceback, and stdout pointed at /dev/null so that
        # Python's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _report_error(exc: UserFacingError, as_json: bool, env: Mapping[str, str]) -> int:
    if env.get(settings.DEBUG.name) == "1":
        traceback.print_exc()
    if as_json:
        _emit(exc.to_json())
    print(f"error: {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=sys.stderr)
    return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
