"""How long loading an op takes in a fresh process: installed (AOT) and cached JIT.

    python bench/load_time.py [--op cpu_adam] [--runs 15] [--out bench/results/load_time.json]

Goals: an installed op loads in under 50 ms (median; ``load`` is what ``verify``
reports as ``seconds``: the op's load after ``import op_builder``); a cached JIT
load in under 300 ms. Importing op_builder is reported beside it, and every
figure next to ``import torch`` measured in the same processes, since the
machine's speed moves both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import RESULTS, Column, print_table, write_json

REPO = Path(__file__).resolve().parents[1]

# Runs in the fresh process: times import torch, then the op's load, separately.
PROBE = """
import json, os, sys, time
t0 = time.perf_counter(); import torch; t1 = time.perf_counter()
from op_builder import get_builder
from op_builder.loader import load_op
t2 = time.perf_counter()
loaded = load_op(get_builder(sys.argv[1]), os.environ)
t3 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "import": t2 - t1, "load": t3 - t2, "source": loaded.source,
                  "compiled": loaded.compiled}))
"""


def _run_probe(op: str, env: dict[str, str], cwd: Path) -> dict[str, float | str | bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, op], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _install_aot(op: str, work: Path) -> Path:
    from imagegen.building.build_inputs import copy_build_inputs

    src = copy_build_inputs(REPO, work / "src")
    target = work / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    env.update(DS_BUILD_OPS="0", **{f"DS_BUILD_{op.upper()}": "1"})
    print(f"building {op} ahead of time...", file=sys.stderr, flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            "--target",
            str(target),
            str(src),
        ],
        env=env,
        check=True,
    )
    return target


def _series(runs: int, op: str, env: dict[str, str], cwd: Path) -> dict[str, float | str]:
    samples = [_run_probe(op, env, cwd) for _ in range(runs)]
    sources = {str(s["source"]) for s in samples}
    load = statistics.median(float(s["load"]) for s in samples)
    imports = statistics.median(float(s["import"]) for s in samples)
    torch_import = statistics.median(float(s["torch"]) for s in samples)
    return {
        "source": ",".join(sorted(sources)),
        "load_ms_median": round(load * 1000, 2),
        "import_op_builder_ms_median": round(imports * 1000, 2),
        "torch_import_ms_median": round(torch_import * 1000, 2),
        "load_over_torch_import": round(load / torch_import, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="cpu_adam")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", default=str(RESULTS / "load_time.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp:
        work = Path(tmp)
        site = _install_aot(args.op, work)
        base = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
        aot = _series(args.runs, args.op, {**base, "PYTHONPATH": str(site), "DS_DISABLE_JIT": "1"}, work)

        jit_env = {**base, "PYTHONPATH": str(REPO), "TORCH_EXTENSIONS_DIR": str(work / "jit")}
        print(f"warming the JIT cache for {args.op}...", file=sys.stderr, flush=True)
        warm = _run_probe(args.op, jit_env, work)
        assert warm["compiled"], "the JIT cache was expected to start cold"
        jit = _series(args.runs, args.op, jit_env, work)

    results = {
        "op": args.op,
        "runs": args.runs,
        "aot": {**aot, "goal_ms": 50},
        "jit_cached": {**jit, "goal_ms": 300},
    }
    columns = [
        Column("path", "path", "12"),
        Column("load ms", "load_ms_median", ">8"),
        Column("import op_builder ms", "import_op_builder_ms_median", ">21"),
        Column("import torch ms", "torch_import_ms_median", ">16"),
        Column("ratio", "load_over_torch_import", ">7"),
        Column("goal", "goal_ms", ">5"),
    ]
    print_table(columns, [{"path": key, **results[key]} for key in ("aot", "jit_cached")])
    write_json(Path(args.out), results, "saved")


if __name__ == "__main__":
    main()
