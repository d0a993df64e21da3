"""Hipify every GPU op's CUDA sources and compile the device code with hipcc for AMD targets.

Our op packages' sources and headers (``kernels/<family>/csrc`` and ``includes``, and the
shared ``kernels/includes``) are copied to a temporary directory and run through torch's
hipify (as a ROCm build of an extension does); each hipified ``.cu`` is then compiled with
``-c`` by ``hipcc`` (``HIP_PLATFORM=amd``) with the flags ``op_builder`` gives the op for
``DS_ACCELERATOR=rocm`` and the gfx list (``--archs``, default ``gfx90a;gfx1030``: one wave64
and one wave32 target).
``--no-hipify`` compiles the unmodified ``.cu`` files instead (the kernels use only
portable names, so both must work).

Exit status: 0 when everything compiled (or hipcc is absent: skipped, with the
reason); 1 when any source failed; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _compile_check import Job, finish, resolve, run_all, skip  # puts the checkout on sys.path

from op_builder import ALL_OPS
from op_builder.context import BuildContext
from op_builder.paths import PACKAGE_ROOT
from op_builder.registry import origin_of

KERNELS = PACKAGE_ROOT / "kernels"


def include_dirs(ctx: BuildContext) -> list[Path]:
    """Every include dir of our GPU ops (their families' and the shared one), once each."""
    dirs = (Path(d) for name in our_gpu_ops() for d in ALL_OPS[name].flags(ctx).include_dirs)
    return list(dict.fromkeys(dirs))


def our_gpu_ops() -> list[str]:
    """Our ops only: the hipified copy is of kernels/, and an op package's sources
    (DS_OP_SOURCES) live elsewhere."""
    return [name for name, b in ALL_OPS.items() if b.target == "gpu" and not origin_of(name).external]


def hipify_tree(root: Path, headers: Sequence[Path]) -> dict[Path, Path]:
    """Hipify the copy of kernels/ at ``root`` in place (``headers``: its include dirs); map each
    original .cu path to the file to compile."""
    from torch.utils.hipify import hipify_python

    # hipify prints progress; keep it out of the report.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        results = hipify_python.hipify(
            project_directory=str(root),
            output_directory=str(root),
            includes=["*"],
            header_include_dirs=[str(d) for d in headers],
            is_pytorch_extension=True,
            show_detailed=False,
            show_progress=False,
        )
    mapping: dict[Path, Path] = {}
    for original, result in results.items():
        hipified = getattr(result, "hipified_path", None)
        if original.endswith(".cu") and hipified:
            mapping[Path(original)] = Path(hipified)
    return mapping


def jobs_for(
    ctx: BuildContext, hipcc: str, tree: Path, hipified: dict[Path, Path] | None, out: Path
) -> list[Job]:
    jobs: list[Job] = []
    for name in our_gpu_ops():
        flags = ALL_OPS[name].flags(ctx)
        includes = [f"-I{tree / Path(d).relative_to(KERNELS)}" for d in flags.include_dirs]
        for source in flags.sources:
            if not source.endswith(".cu"):
                continue
            copied = tree / Path(source).relative_to(KERNELS)
            target = hipified.get(copied, copied) if hipified is not None else copied
            language = [] if hipified is not None else ["-x", "hip"]
            obj = out / f"{name}-{Path(source).stem}.o"
            command = (hipcc, *flags.device, *includes, *language, "-c", str(target), "-o", str(obj))
            jobs.append(Job.of(name, source, command))
    return jobs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--archs", default="gfx90a;gfx1030", help="PYTORCH_ROCM_ARCH-style list")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles (default 2)")
    parser.add_argument("--no-hipify", action="store_true", help="compile the .cu files unmodified")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = parser.parse_args(argv)

    hipcc = shutil.which("hipcc")
    if hipcc is None:
        reason = (
            "hipcc not found: HIP compile check skipped "
            "(Debian/Ubuntu: apt-get install hipcc libamdhip64-dev rocm-device-libs)"
        )
        return skip(reason, args.json)
    ctx = resolve(os.environ, {"DS_ACCELERATOR": "rocm", "PYTORCH_ROCM_ARCH": args.archs})
    if ctx is None:
        return 2

    with tempfile.TemporaryDirectory(prefix="hip_check_") as tmp:
        tree = Path(tmp, "kernels")
        # The C++ sources and headers only: the fronts and any compiled module stay behind.
        shutil.copytree(KERNELS, tree, ignore=shutil.ignore_patterns("__pycache__", "_ops", "*.py", "*.so"))
        headers = [tree / d.relative_to(KERNELS) for d in include_dirs(ctx)]
        start = time.perf_counter()
        hipified = None if args.no_hipify else hipify_tree(tree, headers)
        hipify_seconds = time.perf_counter() - start
        jobs = jobs_for(ctx, hipcc, tree, hipified, Path(tmp))
        if not args.json:
            mode = "unmodified sources" if hipified is None else f"hipified in {hipify_seconds:.1f}s"
            print(f"hipcc {hipcc}; archs {';'.join(ctx.rocm_archs)}; {len(jobs)} sources ({mode})")
        env = {**os.environ, "HIP_PLATFORM": "amd"}
        results = run_all(jobs, args.jobs, quiet=args.json, env=env)
        elapsed = time.perf_counter() - start

    fields = {
        "hipcc": hipcc,
        "archs": list(ctx.rocm_archs),
        "hipified": hipified is not None,
        "seconds": round(elapsed, 2),
    }
    return finish(results, elapsed, args.json, fields)


if __name__ == "__main__":
    sys.exit(main())
