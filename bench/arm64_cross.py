"""The arm64 CPU image, cross-compiled, against the amd64 one: each built cold and verified, side by side.

    python bench/arm64_cross.py [--ops cpu_adam,cpu_adagrad,cpu_lion,async_io] [--reps 1]
                                [--emulated] [--out bench/results/arm64_cross.json]

On this machine (amd64), from the stand-in bases (``make standins`` and ``make standins
PLATFORM=linux/arm64``), the image of the CPU ops is built for linux/amd64 and for linux/arm64,
taking turns, each with the layer cache off (``--no-cache``: every stage runs, cache mounts
start empty) and verified in its sealed container (arm64's under qemu). The arm64 build is a
cross build: devel and build stages native, the runtime stage's apt and the ops' check under
emulation. ``--emulated`` adds the arm64 build with every stage under emulation
(``--build-platform linux/arm64``), the way arm64 images were built before.

torch comes from wheelhouses: ``IMAGEGEN_BENCH_WHEELHOUSE`` (default /opt/wheels, amd64's, also
the cross build's own torch) and ``IMAGEGEN_BENCH_ARM64_WHEELHOUSE`` (default
.cache/wheelhouse-linux-arm64, torch's aarch64 wheel: ``make images PLATFORM=linux/arm64``
fetches it). Goal (docs/benchmarks.md): arm64 build + verify <= 1.5x amd64's. Needs BuildKit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import RESULTS, write_json  # noqa: E402
from image_build import step_seconds  # noqa: E402
from parallel_compile import CPU_OPS, machine  # noqa: E402

from imagegen.engine import Engine, detect_engine  # noqa: E402
from imagegen.imagespec.spec import ImageSpec, build_spec, spec_input  # noqa: E402
from imagegen.runs import pipeline  # noqa: E402
from imagegen.runs.run_choices import RunOptions  # noqa: E402

GOAL = 1.5
AMD64_WHEELS = os.environ.get("IMAGEGEN_BENCH_WHEELHOUSE", "/opt/wheels")
ARM64_WHEELS = os.environ.get(
    "IMAGEGEN_BENCH_ARM64_WHEELHOUSE", str(REPO / ".cache" / "wheelhouse-linux-arm64")
)
CA_CERT = os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")


def spec(ops: str, variant: str) -> ImageSpec:
    """``amd64``, ``arm64`` (cross-compiled) or ``arm64-emulated`` (every stage on arm64)."""
    arm64 = variant != "amd64"
    return build_spec(
        spec_input(
            os.environ,
            ops=ops,
            cpu=True,
            standins=True,
            platform="linux/arm64" if arm64 else "linux/amd64",
            build_platform="linux/arm64" if variant == "arm64-emulated" else None,
            torch="2.10.0" if arm64 else None,
            wheelhouse=ARM64_WHEELS if arm64 else AMD64_WHEELS,
            build_wheelhouse=AMD64_WHEELS if variant == "arm64" else None,
            ca_cert=CA_CERT,
            tag=f"imagegen-bench/cpu:{variant}",
        )
    )


def run(image: ImageSpec, engine: Engine) -> dict[str, Any]:
    report = pipeline.build(image, RunOptions(verify=True, no_cache=True), engine=engine)
    verify = report.verify
    total = report.build_seconds + (verify.seconds if verify is not None else 0.0)
    return {
        "build_seconds": round(report.build_seconds, 1),
        "compile_step_seconds": step_seconds(report.log, "pip wheel"),
        # The build's check of the ops: the build stage's, or a cross build's runtime stage's.
        "check_step_seconds": step_seconds(report.log, "op_builder verify")
        or step_seconds(report.log, "checking the ops"),
        "verify_seconds": round(verify.seconds, 1) if verify is not None else None,
        "verified": verify is not None and verify.ok,
        "total_seconds": round(total, 1),
        "ops_kept": list(image.ops),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=CPU_OPS)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--emulated", action="store_true", help="also build arm64 with every stage emulated")
    parser.add_argument("--out", default=str(RESULTS / "arm64_cross.json"))
    args = parser.parse_args()
    engine = detect_engine()
    if engine.kind == "classic":
        raise SystemExit("this bench needs BuildKit: a cross build's devel stage runs on $BUILDPLATFORM")
    variants = ["amd64", "arm64", *(["arm64-emulated"] if args.emulated else [])]
    specs = {name: spec(args.ops, name) for name in variants}
    before = machine()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for rep in range(args.reps):
        for name in variants:
            result = run(specs[name], engine)
            runs[name].append(result)
            print(f"rep {rep + 1} {name}: {result}", flush=True)

    def median(name: str, key: str) -> float:
        return round(statistics.median(float(r[key]) for r in runs[name]), 1)

    totals = {name: median(name, "total_seconds") for name in variants}
    ratio = round(totals["arm64"] / totals["amd64"], 2)
    results = {
        "ops": args.ops.split(","),
        "machine": before,
        "engine": engine.kind,
        "runs": runs,
        "median_total_seconds": totals,
        "arm64_over_amd64": ratio,
        "goal": GOAL,
        "all_verified": all(r["verified"] for rs in runs.values() for r in rs),
    }
    if "arm64-emulated" in totals:
        results["emulated_over_amd64"] = round(totals["arm64-emulated"] / totals["amd64"], 2)
    print(f"build + verify, median: {totals}; arm64 (cross) / amd64 = {ratio} (goal <= {GOAL})")
    write_json(Path(args.out), results)
    return 0 if results["all_verified"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
