"""A stable-ABI module against a per-torch module of the same op, on the CPU: step time and
compile time.

    python bench/stable_abi.py [--ops cpu_adam cpu_adagrad cpu_lion] [--reps 30]

Both modules are JIT-built here from the same sources (the per-torch one as the op was built
before torch had a stable ABI: ATen and pybind11), in a fresh cache, so the compile times are
measured too. Each op steps on one 4M-element tensor (the kernel's own time), on 512 tensors of
1024 elements and on 512 empty ones (where a call's cost shows: a stable op is called through
torch.ops, about 5 us more per call than pybind11, and each tensor of a list is handed over on
its own; empty tensors leave that cost alone), three ways: one call per tensor, the list form
(one call for all), and the list form of the per-torch module. The fronts call the list form;
before the stable modules they called the per-torch module once per tensor. Goals: the stable
module's list form no slower than that (`vs before` >= 0.95, allowing for noise), and than the
per-torch module's own list form (`vs per-torch list`). Each op is measured in a process of its
own (measured_apart says why).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import RESULTS, Column, print_table, time_interleaved, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Per op: the step function, how many state tensors, whether it takes a step count, the scalars.
STEPS: dict[str, tuple[str, int, bool, tuple[Any, ...]]] = {
    "cpu_adam": ("adam_step", 2, True, (1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)),
    "cpu_adagrad": ("adagrad_step", 1, True, (1e-2, 0.0, 1e-10, 0.0)),
    "cpu_lion": ("lion_step", 1, False, (1e-4, 0.9, 0.99, 0.01)),
}


def build(op: str, stable: bool) -> tuple[ModuleType, float]:
    from op_builder import get_builder

    builder_class = type(get_builder(op))
    if not stable:
        # The same op with its stable target taken away (ATen and pybind11), under another name:
        # a process loads an op once per name.
        source_root = Path(sys.modules[builder_class.__module__].__file__ or "").parent
        builder_class = type(
            f"PerTorch{builder_class.__name__}",
            (builder_class,),
            {"name": f"{op}_per_torch", "stable_abi": None, "source_root": source_root},
        )
    start = time.perf_counter()
    module = builder_class().load()
    return module, time.perf_counter() - start


def stepper(module: ModuleType, op: str, sizes: list[int], as_list: bool) -> Any:
    import torch

    name, states, counted, scalars = STEPS[op]
    tensors = [[torch.randn(n) for _ in range(2 + states)] for n in sizes]
    if as_list:
        list_fn = getattr(module, name + "s")
        columns = [list(column) for column in zip(*tensors)]
        steps = [[1] * len(sizes)] if counted else []
        return lambda: list_fn(*columns, *steps, *scalars)
    fn = getattr(module, name)
    step_count = (1,) if counted else ()

    def step() -> None:
        for p, g, *state in tensors:
            fn(p, g, *state, None, *step_count, *scalars)

    return step


def measure(op: str, reps: int) -> list[dict[str, Any]]:
    """The rows of one op, built and timed in this process."""
    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="stable-abi-bench-")
    # Empty tensors: no kernel runs, so what is left is the call's own cost per tensor.
    shapes = {"1 x 4M": [4 << 20], "512 x 1K": [1024] * 512, "512 x 0": [0] * 512}
    rows = []
    stable, stable_compile = build(op, stable=True)
    per_torch, per_torch_compile = build(op, stable=False)
    assert hasattr(stable, "op_namespace") and not hasattr(per_torch, "op_namespace")
    for label, sizes in shapes.items():
        fns = [
            stepper(stable, op, sizes, as_list=False),
            stepper(stable, op, sizes, as_list=True),
            stepper(per_torch, op, sizes, as_list=False),
            stepper(per_torch, op, sizes, as_list=True),
        ]
        timings = time_interleaved(fns, reps, 3)
        rows.append(
            {
                "op": op,
                "tensors": label,
                "stable_ms": timings[0].median * 1e3,
                "stable_list_ms": timings[1].median * 1e3,
                "per_torch_ms": timings[2].median * 1e3,
                "per_torch_list_ms": timings[3].median * 1e3,
                "ratio": timings[3].median / timings[1].median,
                "ratio_before": timings[2].median / timings[1].median,
                "stable_list_us_per_tensor": timings[1].median * 1e6 / len(sizes),
                "per_torch_list_us_per_tensor": timings[3].median * 1e6 / len(sizes),
                "stable_compile_s": stable_compile,
                "per_torch_compile_s": per_torch_compile,
            }
        )
    return rows


def measured_apart(ops: list[str], reps: int) -> list[dict[str, Any]]:
    """Each op's rows from a process of its own. A list step streams through its tensors one
    after another, so where they lie matters: in a process whose heap an earlier op's runs had
    shaped, the same list steps (of both modules) ran up to 60% slower than in a fresh one."""
    rows: list[dict[str, Any]] = []
    for op in ops:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "rows.json"
            command = [sys.executable, __file__, "--ops", op, "--reps", str(reps), "--rows-only", str(out)]
            subprocess.run(command, check=True)
            rows.extend(json.loads(out.read_text()))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(STEPS), choices=list(STEPS))
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS / "stable_abi.json")
    # Internal: measure the one op given and write its rows there (measured_apart's child).
    parser.add_argument("--rows-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.rows_only is not None:
        args.rows_only.write_text(json.dumps(measure(args.ops[0], args.reps)))
        return 0
    rows = measured_apart(args.ops, args.reps)
    import torch

    columns = [
        Column("op", "op", "<12"),
        Column("tensors", "tensors", "<9"),
        Column("stable ms", "stable_ms", ">10", ".3f"),
        Column("list", "stable_list_ms", ">7", ".3f"),
        Column("per-torch ms", "per_torch_ms", ">13", ".3f"),
        Column("list", "per_torch_list_ms", ">7", ".3f"),
        Column("us/tensor", "stable_list_us_per_tensor", ">10", ".2f"),
        Column("per-torch", "per_torch_list_us_per_tensor", ">10", ".2f"),
        Column("vs before", "ratio_before", ">10", ".2f", "x"),
        Column("vs per-torch list", "ratio", ">18", ".2f", "x"),
        Column("compile s stable", "stable_compile_s", ">17", ".1f"),
        Column("per-torch", "per_torch_compile_s", ">10", ".1f"),
    ]
    print_table(columns, rows)
    write_json(
        args.out,
        {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
