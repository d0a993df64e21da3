"""Hipify every GPU op's CUDA sources and compile the device code with hipcc for AMD targets.

The sources under ``kernels/csrc`` are copied to a temporary directory and run
through torch's hipify (as a ROCm build of an extension does); each hipified
``.cu`` is then compiled with ``-c`` by ``hipcc`` (``HIP_PLATFORM=amd``) with the
flags ``op_builder`` gives the op for ``DS_ACCELERATOR=rocm`` and the gfx list
(``--archs``, default ``gfx90a;gfx1030``: one wave64 and one wave32 target).
``--no-hipify`` compiles the unmodified ``.cu`` files instead (the kernels use only
portable names, so both must work).

Exit status: 0 when everything compiled (or hipcc is absent: skipped, with the
reason); 1 when any source failed; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from op_builder import ALL_OPS  # noqa: E402
from op_builder.builder import CSRC, BuildContext  # noqa: E402
from op_builder.errors import OpBuilderError  # noqa: E402
from op_builder.plan import resolve_context  # noqa: E402
from op_builder.toolchain import probe  # noqa: E402


@dataclass(frozen=True)
class Job:
    op: str
    source: str  # the original source, relative to the repository
    command: tuple[str, ...]


@dataclass(frozen=True)
class Result:
    op: str
    source: str
    ok: bool
    seconds: float
    command: list[str]
    output: str


def rocm_context(archs: str, env: Mapping[str, str]) -> BuildContext:
    rocm_env = {**env, "DS_ACCELERATOR": "rocm", "PYTORCH_ROCM_ARCH": archs}
    return resolve_context(rocm_env, probe(rocm_env))


def hipify_tree(csrc: Path) -> dict[Path, Path]:
    """Hipify ``csrc`` in place; map each original .cu path to the file to compile."""
    from torch.utils.hipify import hipify_python

    # hipify prints progress; keep it out of the report.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        results = hipify_python.hipify(
            project_directory=str(csrc),
            output_directory=str(csrc),
            includes=["*"],
            header_include_dirs=[str(csrc / "includes")],
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
    for name, builder in ALL_OPS.items():
        if builder.target != "gpu":
            continue
        flags = builder.flags(ctx)
        includes = [f"-I{tree / Path(d).relative_to(CSRC)}" for d in flags.include_dirs]
        for source in flags.sources:
            if not source.endswith(".cu"):
                continue
            copied = tree / Path(source).relative_to(CSRC)
            target = hipified.get(copied, copied) if hipified is not None else copied
            language = [] if hipified is not None else ["-x", "hip"]
            obj = out / f"{name}-{Path(source).stem}.o"
            command = (hipcc, *flags.device, *includes, *language, "-c", str(target), "-o", str(obj))
            jobs.append(Job(name, os.path.relpath(source, ROOT), command))
    return jobs


def run_job(job: Job) -> Result:
    start = time.perf_counter()
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    done = subprocess.run(job.command, capture_output=True, text=True, check=False, env=env)
    return Result(
        op=job.op,
        source=job.source,
        ok=done.returncode == 0,
        seconds=round(time.perf_counter() - start, 2),
        command=list(job.command),
        output=(done.stdout + done.stderr)[-4000:],
    )


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
        print(json.dumps({"ok": True, "skipped": reason}) if args.json else f"SKIP {reason}")
        return 0
    try:
        ctx = rocm_context(args.archs, os.environ)
    except OpBuilderError as exc:
        print(f"error: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="hip_check_") as tmp:
        tree = Path(tmp, "csrc")
        shutil.copytree(CSRC, tree)
        start = time.perf_counter()
        hipified = None if args.no_hipify else hipify_tree(tree)
        hipify_seconds = time.perf_counter() - start
        jobs = jobs_for(ctx, hipcc, tree, hipified, Path(tmp))
        if not args.json:
            mode = "unmodified sources" if hipified is None else f"hipified in {hipify_seconds:.1f}s"
            print(f"hipcc {hipcc}; archs {';'.join(ctx.rocm_archs)}; {len(jobs)} sources ({mode})")
        results: list[Result] = []
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for result in pool.map(run_job, jobs):
                results.append(result)
                if not args.json:
                    status = "OK  " if result.ok else "FAIL"
                    print(f"{status} {result.op:<14} {result.source:<50} {result.seconds:6.1f}s", flush=True)
                    if not result.ok:
                        print("     " + " ".join(result.command))
                        print("     " + result.output.strip().replace("\n", "\n     "))
        elapsed = time.perf_counter() - start

    ok = all(r.ok for r in results)
    if args.json:
        report = {
            "ok": ok,
            "hipcc": hipcc,
            "archs": list(ctx.rocm_archs),
            "hipified": hipified is not None,
            "seconds": round(elapsed, 2),
            "results": [asdict(r) for r in results],
        }
        print(json.dumps(report, indent=2))
    else:
        failed = sum(not r.ok for r in results)
        summary = f"{len(results) - failed}/{len(results)} compiled in {elapsed:.1f}s"
        print(summary + ("" if ok else f"; {failed} FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
