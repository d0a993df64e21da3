"""The op compile step with the ops compiled at once, against one op after another.

    python bench/parallel_compile.py [--ops cpu_adam,cpu_adagrad,cpu_lion,async_io] [--reps 2]
                                     [--old-ref HEAD] [--sources-ref HEAD] [--jobs N]
                                     [--out bench/results/parallel_compile.json]

``pip wheel`` of the ops (``DS_BUILD_<OP>=1``, what the image's build stage runs; no Docker) in
temporary copies of this checkout, the variants taking turns so that load from other
processes hits them alike:

- ``parallel``: this checkout, MAX_JOBS = the CPUs here, shared by every op;
- ``serial``: this checkout with MAX_JOBS=1: one op, one compile at a time;
- ``old``: the same sources with op_builder/setup_support.py as committed at ``--old-ref``
  (one op after another, each op's ninja given the whole MAX_JOBS); left out when that ref
  already builds in parallel.

The op sources come from ``--sources-ref`` (default HEAD), so that edits in progress in the
working tree cannot break or skew a run. ccache is off (CCACHE_DISABLE=1): every compile is
cold. Two times per run: the whole ``pip wheel``, and its compile span, from the first
"building op" line to the last "built" line (timestamped as pip streams them). Goal on a
2-core machine: parallel / serial <= 0.6 for the span.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import RESULTS, write_json  # noqa: E402

from imagegen.building.build_inputs import copy_build_inputs  # noqa: E402
from imagegen.engine.build_log import compile_seconds  # noqa: E402
from op_builder.parallel_build import host_cpus  # noqa: E402

GOAL = 0.6
CPU_OPS = "cpu_adam,cpu_adagrad,cpu_lion,async_io"
_START = re.compile(r"op_builder: building op \w+")
_END = re.compile(r"op_builder: built (?:op )?\w+")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def machine() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cpus": host_cpus(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average": os.getloadavg()[0],
    }


def checkout(dest: Path, old_ref: str | None, sources_ref: str | None) -> Path:
    """This checkout's build inputs, the op sources (kernels/) as of ``sources_ref`` when given;
    with ``old_ref``, that ref's op_builder/setup_support.py in place of this one."""
    src = copy_build_inputs(REPO, dest)
    if sources_ref is not None:
        shutil.rmtree(src / "kernels")
        archive = subprocess.run(
            ["git", "archive", sources_ref, "kernels"], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    if old_ref is not None:
        old = subprocess.run(
            ["git", "show", f"{old_ref}:op_builder/setup_support.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (src / "op_builder" / "setup_support.py").write_text(old)
    return src


def run_wheel(src: Path, ops: list[str], max_jobs: int, log: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "MAX_JOBS", "VIRTUAL_ENV"))}
    env |= {f"DS_BUILD_{op.upper()}": "1" for op in ops}
    # The venv's ninja, as in an image; no ccache, so every compile is cold.
    env |= {
        "DS_BUILD_OPS": "0",
        "MAX_JOBS": str(max_jobs),
        "CCACHE_DISABLE": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    }
    shutil.rmtree(src / "build", ignore_errors=True)
    out = src.parent / f"wheels-{src.name}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        str(out),
        ".",
    ]
    lines: list[str] = []
    first: float | None = None
    last: float | None = None
    start = time.monotonic()
    with subprocess.Popen(
        cmd, cwd=src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            lines.append(line.rstrip("\n"))
            if first is None and _START.search(line):
                first = now
            if _END.search(line):
                last = now
        code = proc.wait()
    wall = time.monotonic() - start
    log.write_text("\n".join(lines) + "\n")
    if code != 0 or first is None or last is None:
        raise SystemExit(f"pip wheel failed in {src} (exit {code}); its output is in {log}")
    if len(list(out.glob("*.whl"))) != 1:
        raise SystemExit(f"pip wheel made no wheel in {out}; its output is in {log}")
    return {
        "wheel_seconds": round(wall, 1),
        "compile_seconds": round(last - first, 1),
        "per_op": compile_seconds(lines),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=CPU_OPS)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=host_cpus(), help="MAX_JOBS of the parallel run")
    parser.add_argument("--old-ref", default="HEAD", help="git ref of the old op_builder ('' to skip)")
    parser.add_argument(
        "--sources-ref",
        default="HEAD",
        help="git ref of the op sources compiled ('' for the working tree, which others may be editing)",
    )
    parser.add_argument("--out", default=str(RESULTS / "parallel_compile.json"))
    args = parser.parse_args()
    ops = args.ops.split(",")

    old_ref: str | None = args.old_ref or None
    sources_ref: str | None = args.sources_ref or None
    if old_ref is not None:
        text = subprocess.run(
            ["git", "show", f"{old_ref}:op_builder/setup_support.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout
        if not text or "parallel_build" in text:
            print(f"{old_ref} has no serial op_builder to compare with: the old variant is left out")
            old_ref = None

    before = machine()
    logs = Path(args.out).with_suffix("")  # each run's pip output, kept for reading afterwards
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {"parallel": [], "serial": []}
    with tempfile.TemporaryDirectory(prefix="imagegen-parallel-") as tmp:
        variants = {
            "parallel": (checkout(Path(tmp, "new"), None, sources_ref), args.jobs),
            "serial": (Path(tmp, "new"), 1),
        }
        if old_ref is not None:
            variants["old"] = (checkout(Path(tmp, "old"), old_ref, sources_ref), args.jobs)
            runs["old"] = []
        for rep in range(args.reps):
            for name, (src, jobs) in variants.items():
                result = run_wheel(src, ops, jobs, logs / f"{name}-{rep}.log")
                runs[name].append(result)
                print(f"run {rep + 1} {name:8} MAX_JOBS={jobs}: pip wheel {result['wheel_seconds']:6.1f}s, "
                      f"compile span {result['compile_seconds']:6.1f}s  {result['per_op']}")  # fmt: skip

    def median(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[name]), 1)

    summary = {
        name: {
            "wheel_seconds": median(name, "wheel_seconds"),
            "compile_seconds": median(name, "compile_seconds"),
        }
        for name in runs
    }
    ratio = summary["parallel"]["compile_seconds"] / summary["serial"]["compile_seconds"]
    results: dict[str, Any] = {
        "ops": ops,
        "machine": before,
        "load_average_after": os.getloadavg()[0],
        "parallel_max_jobs": args.jobs,
        "old_ref": old_ref,
        "sources_ref": sources_ref,
        "reps": args.reps,
        "median": summary,
        "ratio_parallel_serial": round(ratio, 3),
        "goal_ratio": GOAL,
        "goal_met": ratio <= GOAL,
        "runs": runs,
    }
    if "old" in summary:
        results["ratio_parallel_old"] = round(
            summary["parallel"]["compile_seconds"] / summary["old"]["compile_seconds"], 3
        )
    print(f"\n{before['cpu']}, {before['cpus']} CPUs; medians of {args.reps}:")
    for name, times in summary.items():
        print(
            f"  {name:8} pip wheel {times['wheel_seconds']:6.1f}s",
            f"compile span {times['compile_seconds']:6.1f}s",
        )
    print(f"parallel / serial compile span: {ratio:.3f} (goal <= {GOAL})")
    if "ratio_parallel_old" in results:
        print(f"parallel / old compile span: {results['ratio_parallel_old']:.3f}")
    write_json(Path(args.out), results)
    return 0 if results["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
