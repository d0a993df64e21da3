"""Cold build against a rebuild after touching a Python file that is not part of the ops.

    python bench/rebuild.py [--touch imagegen/cli.py] [--prune-cache] [--out bench/results/rebuild.json]

In a temporary copy of the checkout: build the CPU image with the layer cache off
(``--no-cache``), append a comment to ``--touch`` (default imagegen/cli.py: outside
op_builder/ and kernels/, so the build stage must not run again), build again, and compare.
Goal with BuildKit: rebuild / cold <= 0.1, and no op compiled in the rebuild (checked in its
log). On this engine (dockerd 20.10's BuildKit) ``--no-cache`` also gives the build empty
cache mounts (moby/buildkit#1213), so the cold build compiles from scratch; ``--prune-cache``
empties the mounts first as well (for every build on this daemon), for engines that keep them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from _common import write_json  # noqa: E402
from image_size import cpu_spec  # noqa: E402

from imagegen.engine import detect_engine  # noqa: E402
from imagegen.engine.log_lines import BK_HEADER  # noqa: E402
from imagegen.runs import pipeline  # noqa: E402
from imagegen.runs.report import ImageReport  # noqa: E402
from imagegen.runs.run_choices import RunOptions  # noqa: E402

COPIED = ("setup.py", "pyproject.toml", "README.md", "op_builder", "kernels", "imagegen")
GOAL = 0.1
_COMPILE = re.compile(r"\bbuilding op (\w+)|building '[\w.]+' extension")
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
_CACHED = re.compile(r"^#(\d+) CACHED$")


def step_report(log: Sequence[str]) -> dict[str, Any]:
    """From a BuildKit plain log: steps that ran (with seconds) and steps served from cache."""
    titles: dict[str, str] = {}
    ran: dict[str, float] = {}
    cached: list[str] = []
    for line in log:
        if m := BK_HEADER.match(line):
            titles.setdefault(m.group(1), f"[{m.group(2)}] {m.group(3)}"[:100])
        elif m := _DONE.match(line):
            ran[m.group(1)] = float(m.group(2))
        elif m := _CACHED.match(line):
            cached.append(m.group(1))
    steps = [{"step": titles[n], "seconds": s} for n, s in ran.items() if n in titles]
    steps.sort(key=lambda s: -float(s["seconds"]))
    return {
        "ran": steps[:8],
        "cached": len([n for n in cached if n in titles]),
        "ops_compiled": sorted({m.group(1) or "?" for m in map(_COMPILE.search, log) if m}),
    }


def runtime_id(report: ImageReport) -> str:
    """The image the build made, before its SBOM and provenance were sealed in."""
    return report.proof.runtime_image_id if report.proof is not None else report.image_id


def _copy_checkout(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "build", "*.egg-info")
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="cpu_adam,cpu_lion")
    parser.add_argument("--touch", default="imagegen/cli.py", help="file to change, relative to the checkout")
    parser.add_argument("--prune-cache", action="store_true", help="empty BuildKit cache mounts first")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "rebuild.json"))
    args = parser.parse_args()

    engine = detect_engine()
    spec = cpu_spec(args.ops, engine, tag="imagegen-bench/cpu:rebuild")
    if args.prune_cache:
        if engine.client is None:
            parser.error("--prune-cache needs a docker CLI (BuildKit engine)")
        subprocess.run(
            [engine.client, "builder", "prune", "-f", "--filter", "type=exec.cachemount"], check=True
        )
    with tempfile.TemporaryDirectory(prefix="imagegen-rebuild-") as tmp:
        checkout = Path(tmp)
        _copy_checkout(checkout)
        cold = pipeline.build(spec, RunOptions(verify=False, source=checkout, no_cache=True), engine=engine)
        touched = checkout / args.touch
        touched.write_text(touched.read_text() + "\n# changed by bench/rebuild.py\n")
        time.sleep(1)  # a new mtime even on file systems with one-second resolution
        # The pipeline stages the context afresh, as `imagegen build` does on every run.
        warm = pipeline.build(spec, RunOptions(verify=False, source=checkout), engine=engine)
    ratio = warm.build_seconds / cold.build_seconds
    warm_steps = step_report(warm.log)
    results = {
        "ops": spec.ops,
        "engine": engine.kind,
        "touched": args.touch,
        "cache_mounts_pruned": args.prune_cache,
        "cold_seconds": round(cold.build_seconds, 1),
        "rebuild_seconds": round(warm.build_seconds, 1),
        "ratio": round(ratio, 3),
        "goal_ratio": GOAL,
        "goal_met": ratio <= GOAL and not warm_steps["ops_compiled"],
        # The runtime stage's ids: the sealed images differ by their SBOM's and provenance's times.
        "same_image": runtime_id(cold) == runtime_id(warm),
        "cold_steps": step_report(cold.log),
        "rebuild_steps": warm_steps,
    }
    compiled = warm_steps["ops_compiled"] or "none"
    print(f"cold {cold.build_seconds:.1f}s, rebuild after touching {args.touch} {warm.build_seconds:.1f}s")
    print(f"ratio {ratio:.3f} (goal <= {GOAL}); ops compiled in the rebuild: {compiled}")
    write_json(Path(args.out), results, "written to")
    return 0 if results["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
