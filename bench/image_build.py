"""The cold build of the CPU image with ops compiled at once against one after another, and the
rebuild after one op's source changed.

    python bench/image_build.py [--ops cpu_adam,cpu_adagrad,cpu_lion,async_io] [--reps 1]
                                [--old-ref HEAD] [--sources-ref HEAD] [--touch cpu_lion]
                                [--out bench/results/image_build.json]

In temporary copies of this checkout (the op sources as of ``--sources-ref``, like
``bench/parallel_compile.py``), the CPU image of ``make images`` is built from the stand-in
bases with the layer cache off (``--no-cache``), the variants taking turns:

- ``new``: this checkout's op_builder (the ops compile at once, sharing MAX_JOBS);
- ``old``: op_builder/setup_support.py as committed at ``--old-ref`` (one op after another).

``--no-cache`` gives a build empty cache mounts too (ccache, pip's cache: BuildKit has done so
since 2019, moby/buildkit#1213), so each cold compile is as cold as on a fresh machine; torch
comes from the wheelhouse. Each cold build also first gives every op source a new line (an
unused string: ccache's key changes, the object code does not), in case an engine keeps the
mounts. Then ``--touch``'s source alone gets a new line, and the image is built again with the
layer cache, right after the new cold build: the build stage runs again (its COPY changed),
and ccache should serve every op but the touched one. Goal: that rebuild's compile step <=
0.35 of the cold one's.
Needs Docker with BuildKit and the stand-ins (make standins).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import RESULTS, write_json  # noqa: E402
from image_size import cpu_spec  # noqa: E402
from parallel_compile import CPU_OPS, checkout, machine  # noqa: E402

from imagegen.engine import detect_engine  # noqa: E402
from imagegen.engine.log_lines import BK_HEADER  # noqa: E402
from imagegen.runs import pipeline  # noqa: E402
from imagegen.runs.run_choices import RunOptions  # noqa: E402
from op_builder import get_builder  # noqa: E402
from op_builder.paths import PACKAGE_ROOT  # noqa: E402

REBUILD_GOAL = 0.35
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")


def step_seconds(log: Sequence[str], needle: str) -> float | None:
    """Seconds of the BuildKit step whose title holds ``needle`` (None: cached or absent)."""
    steps = {m.group(1) for m in map(BK_HEADER.match, log) if m and needle in m.group(3)}
    done = [float(m.group(2)) for m in map(_DONE.match, log) if m and m.group(1) in steps]
    return done[-1] if done else None


def change_sources(src: Path, ops: Sequence[str], only: str | None = None) -> None:
    """Give each op's sources (or only the one named ``only``) a new line of their own, so that
    ccache has no entry for them."""
    for op in ops:
        builder = get_builder(op)
        for source, full in zip(builder.sources, builder.source_paths()):
            if only is not None and source != only:
                continue
            path = src / Path(full).relative_to(PACKAGE_ROOT)  # kernels/<family>/csrc/...
            nonce = uuid.uuid4().hex
            path.write_text(
                path.read_text()
                + f'\n[[maybe_unused]] static const char bench_nonce_{nonce}[] = "{nonce}";\n'
            )


def build(spec: Any, engine: Any, src: Path, no_cache: bool) -> dict[str, Any]:
    report = pipeline.build(spec, RunOptions(verify=False, source=src, no_cache=no_cache), engine=engine)
    return {
        "build_seconds": round(report.build_seconds, 1),
        "compile_step_seconds": step_seconds(report.log, "pip wheel"),
        "compile_seconds": dict(report.compile_seconds),
        "image_id": report.image_id,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=CPU_OPS)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--old-ref", default="HEAD")
    parser.add_argument("--sources-ref", default="HEAD")
    parser.add_argument("--touch", default="cpu_lion", help="the op whose source changes for the rebuild")
    parser.add_argument("--out", default=str(RESULTS / "image_build.json"))
    args = parser.parse_args()
    ops = args.ops.split(",")

    engine = detect_engine()
    if engine.kind == "classic":
        raise SystemExit("this bench needs BuildKit (its cache mounts hold ccache)")
    spec = cpu_spec(args.ops, engine, tag="imagegen-bench/cpu:image-build")
    before = machine()
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="imagegen-image-build-") as tmp:
        # "new" last: --no-cache starts a build with empty cache mounts too (BuildKit does so
        # since 2019, moby/buildkit#1213), so the rebuild must follow the cold build whose
        # ccache it is meant to use.
        sources = {
            "old": checkout(Path(tmp, "old"), args.old_ref, args.sources_ref or None),
            "new": checkout(Path(tmp, "new"), None, args.sources_ref or None),
        }
        for rep in range(args.reps):
            for name, src in sources.items():
                change_sources(src, ops)
                result = build(spec, engine, src, no_cache=True)
                runs[name].append(result)
                print(f"cold {rep + 1} {name}: {result}")
        change_sources(sources["new"], [args.touch])
        rebuild = build(spec, engine, sources["new"], no_cache=False)
        print(f"rebuild after touching {args.touch}: {rebuild}")
        # An edit to the math alone: the op's torch-free kernel TU, where it has one.
        kernel_tu = next((t for t in get_builder(args.touch).sources if t.endswith("_kernel.cpp")), None)
        kernel_rebuild = None
        if kernel_tu is not None:
            change_sources(sources["new"], [args.touch], only=kernel_tu)
            kernel_rebuild = build(spec, engine, sources["new"], no_cache=False)
            print(f"rebuild after touching {kernel_tu}: {kernel_rebuild}")

    def median(name: str, key: str) -> float:
        return round(statistics.median(float(r[key]) for r in runs[name]), 1)

    cold = {name: {k: median(name, k) for k in ("build_seconds", "compile_step_seconds")} for name in runs}
    results: dict[str, Any] = {
        "ops": ops,
        "machine": before,
        "engine": engine.kind,
        "old_ref": args.old_ref,
        "sources_ref": args.sources_ref,
        "reps": args.reps,
        "cold_median": cold,
        "cold_build_new_vs_old": round(cold["new"]["build_seconds"] / cold["old"]["build_seconds"], 3),
        "cold_compile_step_new_vs_old": round(
            cold["new"]["compile_step_seconds"] / cold["old"]["compile_step_seconds"], 3
        ),
        "touched": args.touch,
        "rebuild": rebuild,
        "rebuild_compile_step_vs_cold": round(
            float(rebuild["compile_step_seconds"]) / cold["new"]["compile_step_seconds"], 3
        ),
        "rebuild_goal": REBUILD_GOAL,
        "kernel_source": kernel_tu,
        "kernel_rebuild": kernel_rebuild,
        "kernel_rebuild_compile_step_vs_cold": (
            round(float(kernel_rebuild["compile_step_seconds"]) / cold["new"]["compile_step_seconds"], 3)
            if kernel_rebuild
            else None
        ),
        "runs": runs,
    }
    results["rebuild_goal_met"] = results["rebuild_compile_step_vs_cold"] <= REBUILD_GOAL
    for key in ("cold_median", "cold_build_new_vs_old", "cold_compile_step_new_vs_old"):
        print(f"{key}: {results[key]}")
    print(f"rebuild compile step / cold: {results['rebuild_compile_step_vs_cold']} (goal <= {REBUILD_GOAL})")
    if kernel_rebuild:
        print(f"rebuild after touching {kernel_tu} / cold: {results['kernel_rebuild_compile_step_vs_cold']}")
    write_json(Path(args.out), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
