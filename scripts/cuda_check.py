"""Compile every GPU op's CUDA device code with the local nvcc, using the op builder's own flags.

For each GPU op, the flags are exactly what ``op_builder`` gives that op for
``DS_ACCELERATOR=cuda`` and the arch list (``--archs``, default ``8.0;9.0``): the op's
nvcc flags and include dirs, nothing added. The ops are ours and those of the op packages
that ``DS_OP_SOURCES`` and ``--op-source DIR`` (repeatable) name; ``--ops A,B`` picks some.
Each ``.cu`` source is compiled with ``-c`` to an object in a temporary directory, two at a
time. This checks device code on a machine without a GPU or a CUDA build of torch (the
bindings need torch's CUDA headers; ``--bindings`` syntax-checks them too, and builds the module
of an op built against torch's stable ABI and checks its symbols; ``--bindings stable`` does only
that; see ``binding_jobs``). ``--host aarch64`` compiles for an arm64 host (Grace): the host side of
every .cu file with Debian's aarch64-linux-gnu-g++, through ``_cross_nvcc``.

Exit status: 0 when everything compiled (or nvcc is absent: skipped, with the reason);
1 when any source failed; 2 on bad arguments (an unparsable arch list, an unusable op package).
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from _compile_check import ROOT, Job, finish, resolve, run_all, skip  # puts the checkout on sys.path
from _cross_nvcc import CROSS_COMPILERS, cross_compiler, cross_toolkit

from op_builder.builder import OpBuilder
from op_builder.context import BuildContext
from op_builder.errors import UserFacingError
from op_builder.op_sources import source_dirs
from op_builder.registry import check_op_names, registry_for
from op_builder.stable_abi import LIMITED_API_DEFINES


def device_jobs(
    ctx: BuildContext,
    nvcc: str,
    out_dir: Path,
    ops: Mapping[str, OpBuilder],
    host_flags: Sequence[str] = (),
) -> tuple[list[Job], list[tuple[str, str]]]:
    """One compile job per .cu source of each compatible GPU op, and (op, reason) for the others."""
    jobs: list[Job] = []
    skipped: list[tuple[str, str]] = []
    for name, builder in ops.items():
        if builder.target != "gpu":
            continue
        reason = builder.incompatibility(ctx)
        if reason is not None:
            skipped.append((name, reason))
            continue
        flags = builder.flags(ctx)
        includes = [f"-I{d}" for d in flags.include_dirs]
        for source in flags.sources:
            if not source.endswith(".cu"):
                continue
            obj = out_dir / f"{name}-{Path(source).stem}.o"
            command = (nvcc, *host_flags, *flags.device, *includes, "-c", source, "-o", str(obj))
            jobs.append(Job.of(name, source, command))
    return jobs, skipped


def cuda_include_dir(ctx: BuildContext) -> Path:
    """The toolkit's include dir. An ``nvcc`` on PATH may be a wrapper script outside the
    toolkit (``/usr/local/bin/nvcc`` exec'ing the real one), so check for the headers."""
    homes = [Path(ctx.toolchain.cuda.home)] if ctx.toolchain.cuda else []
    homes.append(Path("/usr/local/cuda"))
    for home in homes:
        if (home / "include" / "cuda_runtime.h").exists():
            return home / "include"
    return homes[0] / "include"


def binding_jobs(
    ctx: BuildContext, work_dir: Path, ops: Mapping[str, OpBuilder], which: str = "all"
) -> list[Job]:
    """g++ checks of the .cpp bindings against this torch's headers.

    An op built against torch's stable ABI here (``stable_abi`` declared, torch >= its target)
    gets its stable module built: compiled and linked with the op builder's flags and
    Py_LIMITED_API, as the real build makes it, then its symbols held to the target's ABI (a
    torch C++ symbol, a newer C shim or a Python symbol outside the limited API fails it). Its
    ATen + pybind11 build, which a torch older than the target and ROCm get, is syntax-checked
    too unless ``which`` is "stable", as are the other ops' bindings.

    A CPU build of torch ships c10/cuda headers but not the generated
    ``c10/cuda/impl/cuda_cmake_macros.h``; a stand-in with the one define a shared
    CUDA build of torch sets lets the headers parse. Nothing is linked against torch: a stable
    module's symbols from torch stay undefined, which is what the ABI check reads.
    """
    import torch.utils.cpp_extension as cpp

    macros = work_dir / "stub" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    macros.parent.mkdir(parents=True, exist_ok=True)
    macros.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    system = [
        f"-I{work_dir / 'stub'}",
        *(f"-I{d}" for d in cpp.include_paths()),
        f"-I{cuda_include_dir(ctx)}",
        f"-I{sysconfig.get_paths()['include']}",
    ]
    # The build a torch without the stable ABI gives these ops.
    per_torch = replace(ctx, torch_version=None)
    jobs: list[Job] = []
    for name, builder in ops.items():
        if builder.target != "gpu" or builder.incompatibility(ctx) is not None:
            continue
        flags = builder.flags(ctx)
        target = flags.stable_abi
        if target is None and which == "stable":
            continue
        legacy = builder.flags(per_torch) if target is not None else flags
        for source in flags.sources:
            if not source.endswith(".cpp"):
                continue
            stem = Path(source).stem
            includes = [f"-I{d}" for d in flags.include_dirs]
            if target is not None:
                module = str(work_dir / f"{name}-{stem}.abi3.so")
                command = (
                    "g++",
                    "-shared",
                    "-fPIC",
                    "-w",  # torch's own headers warn under -std=c++17
                    *flags.cxx,
                    *LIMITED_API_DEFINES,
                    f"-DTORCH_EXTENSION_NAME={name}",
                    *includes,
                    *system,
                    source,
                    "-o",
                    module,
                )
                variant = f"stable ABI {target}"
                jobs.append(Job.of(name, source, command, variant=variant, module=module, stable_abi=target))
                if which == "stable":
                    continue
            command = (
                "g++",
                "-fsyntax-only",
                "-w",
                *legacy.cxx,
                f"-DTORCH_EXTENSION_NAME={name}",
                *(f"-I{d}" for d in legacy.include_dirs),
                *system,
                source,
            )
            jobs.append(
                Job.of(name, source, command, variant="ATen + pybind11" if target is not None else "")
            )
    return jobs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--archs", default="8.0;9.0", help="TORCH_CUDA_ARCH_LIST-style list (default 8.0;9.0)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles (default 2)")
    parser.add_argument(
        "--bindings",
        nargs="?",
        const="all",
        choices=("all", "stable"),
        help="also check the .cpp bindings: every one (slow), or 'stable': only the stable-ABI "
        "modules, built and their symbols checked (fast)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument(
        "--op-source",
        action="append",
        default=[],
        metavar="DIR",
        help="also check this op package's GPU ops (repeatable; DS_OP_SOURCES is read too)",
    )
    parser.add_argument("--ops", metavar="A,B", help="check only these ops (default: every GPU op)")
    parser.add_argument(
        "--host",
        choices=sorted(CROSS_COMPILERS),
        help="compile the .cu files' host side for this CPU (cross compiler needed)",
    )
    args = parser.parse_args(argv)
    try:
        registry = registry_for(source_dirs(os.environ, args.op_source))
        ops = registry.ops
        if args.ops:
            names = [n.strip() for n in args.ops.split(",") if n.strip()]
            check_op_names(names, registry)
            ops = {name: registry.ops[name] for name in names}
    except UserFacingError as exc:
        print(f"error: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return 2

    # The environment's toolkit, never its arch list.
    ctx = resolve(os.environ, {"DS_ACCELERATOR": "cuda", "TORCH_CUDA_ARCH_LIST": args.archs})
    if ctx is None:
        return 2
    cuda = ctx.toolchain.cuda
    if cuda is None:
        reason = "nvcc not found (no CUDA toolkit on PATH, CUDA_HOME unset): CUDA compile check skipped"
        return skip(reason, args.json)

    with tempfile.TemporaryDirectory(prefix="cuda_check_") as tmp:
        nvcc = cuda.nvcc
        host_flags: tuple[str, ...] = ()
        if args.host is not None:
            compiler = cross_compiler(args.host)
            if compiler is None:
                package = "g++-" + CROSS_COMPILERS[args.host].removesuffix("-g++")
                return skip(f"no {CROSS_COMPILERS[args.host]} (apt-get install {package})", args.json)
            nvcc, host_flags = str(cross_toolkit(Path(cuda.home), args.host, Path(tmp))), ("-ccbin", compiler)
        jobs, skipped = device_jobs(ctx, nvcc, Path(tmp), ops, host_flags)
        if args.bindings is not None:
            jobs.extend(binding_jobs(ctx, Path(tmp), ops, args.bindings))
        if not args.json:
            print(
                f"nvcc {cuda.version} ({cuda.nvcc}); archs {args.archs}; host {args.host or 'this one'}; "
                f"{len(jobs)} sources, {args.jobs} at a time"
            )
            for name, reason in skipped:
                print(f"SKIP {name:<14} {reason}")
        start = time.perf_counter()
        results = run_all(jobs, args.jobs, quiet=args.json, cwd=ROOT)
        elapsed = time.perf_counter() - start

    fields = {
        "nvcc": cuda.version,
        "host": args.host,
        "archs": [str(a) for a in ctx.cuda_archs],
        "seconds": round(elapsed, 2),
        "skipped": [{"op": n, "reason": r} for n, r in skipped],
    }
    return finish(results, elapsed, args.json, fields)


if __name__ == "__main__":
    sys.exit(main())
