"""How long verifying an image takes: load + self-tests + device-code audit, against load only.

Verifies the four-op CPU image that ``make images`` builds (built here from the stand-ins if it
is missing) in the sealed container, alternating a full verification with a load-only one
(``--no-selftest``, what verification was before self-tests) so both see the same machine.
Goal: the full verification of the four-op CPU image under 10 s (median).

    python bench/verify_time.py [--runs 5] [--out bench/results/verify_time.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from _common import write_json  # noqa: E402

from bench.image_size import cpu_spec  # noqa: E402
from imagegen.engine import detect_engine  # noqa: E402
from imagegen.runs import pipeline  # noqa: E402
from imagegen.runs.run_choices import RunOptions  # noqa: E402
from imagegen.verify.container import verify_image  # noqa: E402

OPS = "cpu_adam,cpu_adagrad,cpu_lion,async_io"
GOAL_SECONDS = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "verify_time.json"))
    args = parser.parse_args()
    engine = detect_engine()
    spec = cpu_spec(OPS, engine)
    # Cached after `make images`: the same spec renders the same Dockerfile.
    pipeline.build(spec, RunOptions(verify=False, source=REPO), engine=engine)
    full: list[float] = []
    load_only: list[float] = []
    selftest_seconds: dict[str, float] = {}
    for _ in range(args.runs):
        result = verify_image(spec.tag, ops=spec.ops)
        if not result.ok:
            sys.exit(f"{spec.tag} failed verification: {result.failure_summary()}")
        full.append(result.seconds)
        selftest_seconds = {op.name: op.selftest.seconds for op in result.ops if op.selftest is not None}
        load_only.append(verify_image(spec.tag, ops=spec.ops, selftest=False).seconds)
    results = {
        "image": spec.tag,
        "ops": list(spec.ops),
        "engine": engine.kind,
        "runs": args.runs,
        "full_seconds_median": round(statistics.median(full), 2),
        "load_only_seconds_median": round(statistics.median(load_only), 2),
        "ratio_full_to_load_only": round(statistics.median(full) / statistics.median(load_only), 2),
        "selftest_seconds_last_run": {k: round(v, 3) for k, v in selftest_seconds.items()},
        "goal_seconds": GOAL_SECONDS,
        "goal_met": statistics.median(full) < GOAL_SECONDS,
        "full_seconds": [round(s, 2) for s in full],
        "load_only_seconds": [round(s, 2) for s in load_only],
    }
    print(
        f"verify {spec.tag}: full {results['full_seconds_median']} s, load only "
        f"{results['load_only_seconds_median']} s (x{results['ratio_full_to_load_only']}); "
        f"goal < {GOAL_SECONDS:.0f} s: {'met' if results['goal_met'] else 'NOT met'}"
    )
    write_json(Path(args.out), results)
    return 0 if results["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
