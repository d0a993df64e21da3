"""Compile every GPU op's CUDA device code with the local nvcc, using the op builder's own flags.

For each GPU op, the flags are exactly what ``op_builder`` gives that op for
``DS_ACCELERATOR=cuda`` and the arch list (``--archs``, default ``8.0;9.0``): the op's
nvcc flags and include dirs, nothing added. Each ``.cu`` source is compiled with ``-c``
to an object in a temporary directory, two at a time. This checks device code on a
machine without a GPU or a CUDA build of torch (the bindings need torch's CUDA headers;
``--bindings`` syntax-checks them too, see ``check_bindings``).

Exit status: 0 when everything compiled (or nvcc is absent: skipped, with the reason);
1 when any source failed; 2 on bad arguments (an unparsable arch list).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from op_builder import ALL_OPS  # noqa: E402
from op_builder.builder import BuildContext  # noqa: E402
from op_builder.errors import OpBuilderError  # noqa: E402
from op_builder.plan import resolve_context  # noqa: E402
from op_builder.toolchain import probe  # noqa: E402


@dataclass(frozen=True)
class Job:
    op: str
    source: str  # relative to the repository
    command: tuple[str, ...]


@dataclass(frozen=True)
class Result:
    op: str
    source: str
    ok: bool
    seconds: float
    command: list[str]
    output: str


def cuda_context(archs: str, env: Mapping[str, str]) -> BuildContext:
    """The build context of a CUDA build for ``archs`` (the environment's toolkit, never its arch list)."""
    cuda_env = {**env, "DS_ACCELERATOR": "cuda", "TORCH_CUDA_ARCH_LIST": archs}
    return resolve_context(cuda_env, probe(cuda_env))


def device_jobs(ctx: BuildContext, nvcc: str, out_dir: Path) -> tuple[list[Job], list[tuple[str, str]]]:
    """One compile job per .cu source of each compatible GPU op, and (op, reason) for the others."""
    jobs: list[Job] = []
    skipped: list[tuple[str, str]] = []
    for name, builder in ALL_OPS.items():
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
            command = (nvcc, *flags.device, *includes, "-c", source, "-o", str(obj))
            jobs.append(Job(name, os.path.relpath(source, ROOT), command))
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


def binding_jobs(ctx: BuildContext, stub_dir: Path) -> list[Job]:
    """Syntax-only g++ checks of the .cpp bindings against this torch's headers.

    A CPU build of torch ships c10/cuda headers but not the generated
    ``c10/cuda/impl/cuda_cmake_macros.h``; a stand-in with the one define a shared
    CUDA build of torch sets lets the headers parse. Nothing is linked.
    """
    import torch.utils.cpp_extension as cpp

    macros = stub_dir / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    macros.parent.mkdir(parents=True, exist_ok=True)
    macros.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    system = [
        f"-I{stub_dir}",
        *(f"-I{d}" for d in cpp.include_paths()),
        f"-I{cuda_include_dir(ctx)}",
        f"-I{sysconfig.get_paths()['include']}",
    ]
    jobs: list[Job] = []
    for name, builder in ALL_OPS.items():
        if builder.target != "gpu" or builder.incompatibility(ctx) is not None:
            continue
        flags = builder.flags(ctx)
        for source in flags.sources:
            if not source.endswith(".cpp"):
                continue
            command = (
                "g++",
                "-fsyntax-only",
                "-w",  # torch's own headers warn under -std=c++17
                *flags.cxx,
                f"-DTORCH_EXTENSION_NAME={name}",
                *(f"-I{d}" for d in flags.include_dirs),
                *system,
                source,
            )
            jobs.append(Job(name, os.path.relpath(source, ROOT), command))
    return jobs


def run_job(job: Job) -> Result:
    start = time.perf_counter()
    done = subprocess.run(job.command, capture_output=True, text=True, check=False, cwd=ROOT)
    return Result(
        op=job.op,
        source=job.source,
        ok=done.returncode == 0,
        seconds=round(time.perf_counter() - start, 2),
        command=list(job.command),
        output=(done.stdout + done.stderr)[-4000:],
    )


def run_all(jobs: Sequence[Job], workers: int, quiet: bool) -> list[Result]:
    results: list[Result] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for result in pool.map(run_job, jobs):
            results.append(result)
            if not quiet:
                status = "OK  " if result.ok else "FAIL"
                print(f"{status} {result.op:<14} {result.source:<50} {result.seconds:6.1f}s", flush=True)
                if not result.ok:
                    print("     " + " ".join(result.command))
                    print("     " + result.output.strip().replace("\n", "\n     "))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--archs", default="8.0;9.0", help="TORCH_CUDA_ARCH_LIST-style list (default 8.0;9.0)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles (default 2)")
    parser.add_argument("--bindings", action="store_true", help="also syntax-check the .cpp bindings (slow)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = parser.parse_args(argv)

    try:
        ctx = cuda_context(args.archs, os.environ)
    except OpBuilderError as exc:
        print(f"error: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return 2
    cuda = ctx.toolchain.cuda
    if cuda is None:
        reason = "nvcc not found (no CUDA toolkit on PATH, CUDA_HOME unset): CUDA compile check skipped"
        print(json.dumps({"ok": True, "skipped": reason}) if args.json else f"SKIP {reason}")
        return 0

    with tempfile.TemporaryDirectory(prefix="cuda_check_") as tmp:
        jobs, skipped = device_jobs(ctx, cuda.nvcc, Path(tmp))
        if args.bindings:
            jobs.extend(binding_jobs(ctx, Path(tmp, "stub")))
        if not args.json:
            print(
                f"nvcc {cuda.version} ({cuda.nvcc}); archs {args.archs}; "
                f"{len(jobs)} sources, {args.jobs} at a time"
            )
            for name, reason in skipped:
                print(f"SKIP {name:<14} {reason}")
        start = time.perf_counter()
        results = run_all(jobs, max(1, args.jobs), quiet=args.json)
        elapsed = time.perf_counter() - start

    ok = all(r.ok for r in results)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": ok,
                    "nvcc": cuda.version,
                    "archs": [str(a) for a in ctx.cuda_archs],
                    "seconds": round(elapsed, 2),
                    "skipped": [{"op": n, "reason": r} for n, r in skipped],
                    "results": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    else:
        failed = sum(not r.ok for r in results)
        print(
            f"{len(results) - failed}/{len(results)} compiled in {elapsed:.1f}s"
            + ("" if ok else f"; {failed} FAILED")
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
