"""Sharing one job budget among ops compiled at once, and keeping their output readable."""

from __future__ import annotations

import io
import itertools
import sys
import threading
from pathlib import Path

import pytest

from op_builder import get_builder
from op_builder.context import resolve_context
from op_builder.errors import BadInputError
from op_builder.parallel_build import (
    FULL_TORCH_COST,
    PrefixedOutput,
    default_nvcc_threads,
    job_budget,
    op_cost,
    run_prefixed,
    split_jobs,
)
from tests.unit.fakes import host

CPU_OPS = {"cpu_adam": 1, "cpu_adagrad": 1, "cpu_lion": 1, "async_io": 1}
GPU_OPS = {
    "fused_adam": 2,
    "fused_lamb": 2,
    "fused_lion": 2,
    "transformer": 4,
    "quantizer": 2,
    "fp_quantizer": 2,
}


@pytest.mark.parametrize(
    ("budget", "units", "workers", "jobs"),
    [
        # The case: 2 cores, four one-TU ops: two ops at once, one compile each.
        (2, CPU_OPS, 2, dict.fromkeys(CPU_OPS, 1)),
        # One job: one op at a time (the old serial build).
        (1, CPU_OPS, 1, dict.fromkeys(CPU_OPS, 1)),
        # More cores than TUs: every op at once, none given jobs it cannot use.
        (16, CPU_OPS, 4, dict.fromkeys(CPU_OPS, 1)),
        # One op keeps the whole budget up to its TU count (what torch did for it alone).
        (8, {"transformer": 4}, 1, {"transformer": 4}),
        (3, {"transformer": 4}, 1, {"transformer": 3}),
        # Left-over jobs go to the ops with more TUs, largest first.
        (3, {"fused_adam": 2, "transformer": 4}, 2, {"transformer": 2, "fused_adam": 1}),
        (5, {"fused_adam": 2, "transformer": 4}, 2, {"transformer": 3, "fused_adam": 2}),
        # Six GPU ops on 8 cores: six at once, the two jobs left to the largest two.
        (8, GPU_OPS, 6, {"transformer": 2, "fused_adam": 2, "fused_lamb": 1, "fused_lion": 1,
                         "quantizer": 1, "fp_quantizer": 1}),
    ],
)  # fmt: skip
def test_split_jobs(budget: int, units: dict[str, int], workers: int, jobs: dict[str, int]) -> None:
    split = split_jobs(budget, units)
    assert split.budget == budget and split.workers == workers
    assert dict(split.jobs) == jobs
    assert sorted(split.order) == sorted(units)


def test_costliest_op_starts_first() -> None:
    # async_io's one TU costs about three light ones (it includes torch's whole C++ API): started
    # last it would compile alone at the end, one core idle, while started first the three light
    # ones share the other core.
    cost = {"cpu_adam": 1.0, "cpu_adagrad": 1.0, "cpu_lion": 1.0, "async_io": 3.0}
    split = split_jobs(2, CPU_OPS, cost)
    assert split.order == ("async_io", "cpu_adam", "cpu_adagrad", "cpu_lion")
    assert split.workers == 2 and dict(split.jobs) == dict.fromkeys(CPU_OPS, 1)


def test_op_cost_of_the_real_ops() -> None:
    def cost(name: str, archs: int = 0) -> float:
        builder = get_builder(name)
        return op_cost(builder.source_paths(), builder.include_paths(), archs)

    # Two light TUs each: the binding (ATen headers only) and the torch-free kernels.
    assert cost("cpu_adam") == cost("cpu_lion") == 2.0
    assert cost("async_io") == 1.0  # Python's C API alone: no torch header at all
    # Bindings include torch's API through a project header; device code costs one per arch.
    assert cost("fused_adam", archs=2) == FULL_TORCH_COST + 2
    assert cost("transformer", archs=4) == FULL_TORCH_COST + 3 * 4


def test_op_cost_follows_project_headers(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "outer.h").write_text('#include "inner.h"\n')
    (tmp_path / "inc" / "inner.h").write_text("#include <torch/torch.h>\n")
    (tmp_path / "heavy.cpp").write_text('#include "outer.h"\n')
    (tmp_path / "light.cpp").write_text("#include <ATen/core/Tensor.h>\n#include <torch/extension_not.h>\n")
    include = [str(tmp_path / "inc")]
    assert op_cost([str(tmp_path / "heavy.cpp")], include) == FULL_TORCH_COST
    assert op_cost([str(tmp_path / "light.cpp")], include) == 1.0
    assert op_cost([str(tmp_path / "k.cu"), str(tmp_path / "light.cpp")], include, archs=3) == 4.0


def test_largest_op_starts_first_and_ties_keep_the_plan_order() -> None:
    assert split_jobs(2, GPU_OPS).order == (
        "transformer", "fused_adam", "fused_lamb", "fused_lion", "quantizer", "fp_quantizer",
    )  # fmt: skip
    assert split_jobs(2, CPU_OPS).order == tuple(CPU_OPS)


@pytest.mark.parametrize("budget", range(1, 20))
@pytest.mark.parametrize("units", [CPU_OPS, GPU_OPS, {"a": 1}, {"a": 3, "b": 1, "c": 7}])
def test_ops_running_at_once_never_exceed_the_budget(budget: int, units: dict[str, int]) -> None:
    split = split_jobs(budget, units)
    assert 1 <= split.workers <= min(budget, len(units))
    assert all(1 <= split.jobs[op] <= max(1, units[op]) for op in units)
    # Whichever ops the pool happens to run together, their jobs fit the budget.
    for running in itertools.combinations(units, split.workers):
        assert sum(split.jobs[op] for op in running) <= budget
    # And the budget is used: the jobs beyond one per op are all given out, as far as TUs take them.
    extra = sum(split.jobs.values()) - len(units)
    assert extra == min(budget - split.workers, sum(n - 1 for n in units.values()))


def test_a_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        split_jobs(0, CPU_OPS)


@pytest.mark.parametrize(
    ("env", "cpus", "budget"),
    [({}, 2, 2), ({}, 16, 16), ({"MAX_JOBS": "5"}, 2, 5), ({"MAX_JOBS": " 1 "}, 16, 1)],
)
def test_job_budget_is_max_jobs_else_the_cpus(env: dict[str, str], cpus: int, budget: int) -> None:
    assert job_budget(env, cpus) == budget


@pytest.mark.parametrize("value", ["0", "-1", "four", "2.5"])
def test_a_garbled_max_jobs_is_bad_input(value: str) -> None:
    with pytest.raises(BadInputError, match="MAX_JOBS"):
        job_budget({"MAX_JOBS": value}, 2)


@pytest.mark.parametrize(("budget", "threads"), [(1, 1), (2, 1), (7, 1), (8, 1), (16, 2), (32, 4), (128, 4)])
def test_default_nvcc_threads_follows_the_budget(budget: int, threads: int) -> None:
    assert default_nvcc_threads(budget) == threads


def test_nvcc_threads_in_the_context_default_from_max_jobs_and_yield_to_ds_nvcc_threads() -> None:
    toolchain = host(torch_cuda="12.1", toolkit="12.1")
    assert resolve_context({"DS_ACCELERATOR": "cuda", "MAX_JOBS": "1"}, toolchain).nvcc_threads == 1
    assert resolve_context({"DS_ACCELERATOR": "cuda", "MAX_JOBS": "32"}, toolchain).nvcc_threads == 4
    env = {"DS_ACCELERATOR": "cuda", "MAX_JOBS": "32", "DS_NVCC_THREADS": "3"}
    assert resolve_context(env, toolchain).nvcc_threads == 3


def test_prefixed_output_keeps_each_line_whole_across_threads() -> None:
    stream = io.StringIO()
    out = PrefixedOutput(stream)

    def write(op: str) -> None:
        for i in range(200):
            out.lines(op, [f"line {i} of {op}\n"])

    threads = [threading.Thread(target=write, args=(op,)) for op in CPU_OPS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 200 * len(CPU_OPS)
    for op in CPU_OPS:
        assert [ln for ln in lines if ln.startswith(f"[{op}] ")] == [
            f"[{op}] line {i} of {op}" for i in range(200)
        ]


def test_run_prefixed_prefixes_stdout_and_stderr_and_returns_the_exit_code() -> None:
    stream = io.StringIO()
    script = "import sys; print('out'); sys.stdout.flush(); print('err', file=sys.stderr); sys.exit(3)"
    code = run_prefixed([sys.executable, "-c", script], prefix="cpu_adam", output=PrefixedOutput(stream))
    assert code == 3
    assert stream.getvalue().splitlines() == ["[cpu_adam] out", "[cpu_adam] err"]
