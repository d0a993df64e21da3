"""Several ops compiled at once, sharing one job budget (MAX_JOBS).

Each op is one extension of one to four translation units (TUs). torch's BuildExtension
builds the extensions one after another and gives each one's ninja the whole MAX_JOBS, so
with one TU per op (every CPU op) all cores but one idle. Here the budget is split once
across the ops (``split_jobs``, a pure function), a pool of ``workers`` threads builds the
extensions, and each op's ninja gets its own ``-j``; ``PrefixedOutput`` keeps their
interleaved output readable by putting the op's name in front of every line.

Nothing here imports torch: ``op_builder.context`` takes its nvcc default from here too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from op_builder import includes, settings
from op_builder.env import env_positive_int


@dataclass(frozen=True)
class JobSplit:
    """How one build spends its budget: at most ``workers`` ops at once, each op's ninja
    running ``jobs[op]`` compiles at once, never more than ``budget`` compiles in all."""

    budget: int
    workers: int
    jobs: Mapping[str, int]
    order: tuple[str, ...]  # the order ops are started in: costliest first


def host_cpus() -> int:
    """CPUs this process may run on (a container's cpuset, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def job_budget(env: Mapping[str, str], cpus: int | None = None) -> int:
    """MAX_JOBS when set (the image template caps it by memory), else the CPUs here.

    A garbled MAX_JOBS is an error rather than torch's silent "let ninja choose".
    """
    return env_positive_int(env, settings.MAX_JOBS.name, host_cpus() if cpus is None else cpus)


def split_jobs(budget: int, units: Mapping[str, int], cost: Mapping[str, float] | None = None) -> JobSplit:
    """Share ``budget`` compile jobs among ops with ``units[op]`` TUs each.

    ``workers = min(budget, ops)`` ops build at once with one job each; the jobs left over
    go one at a time, costliest op first, to ops with more TUs than jobs. However the pool
    pairs the ops, the ``workers`` running at once then hold at most
    ``workers + leftover == budget`` jobs, so the budget (and the memory cap behind it)
    holds without any coordination between the ninja processes.

    Ops start costliest first (``cost``, default their TU counts; ties keep the given
    order): the longest op started last would run alone at the end while cores idle.
    """
    if budget < 1:
        raise ValueError(f"job budget {budget} is below 1")
    weight = cost if cost is not None else units
    order = tuple(sorted(units, key=lambda op: -weight.get(op, 0)))
    workers = max(1, min(budget, len(order)))
    jobs = dict.fromkeys(order, 1)
    left = budget - workers
    while left > 0:
        growing = [op for op in order if jobs[op] < units[op]]
        if not growing:
            break
        for op in growing:
            if left == 0:
                break
            jobs[op] += 1
            left -= 1
    return JobSplit(budget, workers, jobs, order)


# torch's whole C++ API (frontend, autograd, nn, pybind): a TU that includes it parses about
# three times what one with only ATen/core/Tensor.h and torch's pybind header does (async_io
# compiles in ~29 s here against cpu_adam's ~10 s), and the header parse is most of a CPU TU.
_FULL_TORCH = frozenset({"torch/extension.h", "torch/torch.h", "torch/all.h"})
FULL_TORCH_COST = 3.0


def op_cost(sources: Sequence[str], include_dirs: Sequence[str], archs: int = 0) -> float:
    """A rough compile cost of one op, in units of a light TU: enough to start the longest first.

    A C++ TU costs 1, or ``FULL_TORCH_COST`` when it (or a project header it includes)
    includes torch's whole C++ API; a CUDA/HIP TU costs one per arch it is compiled for,
    since nvcc compiles the device code once per arch.
    """
    total = 0.0
    for source in sources:
        if source.endswith((".cu", ".hip")):
            total += max(1, archs)
        else:
            full = _FULL_TORCH & included_names(Path(source), [Path(d) for d in include_dirs])
            total += FULL_TORCH_COST if full else 1.0
    return total


def included_names(source: Path, search: Sequence[Path]) -> set[str]:
    """Every name ``source`` includes, following the project headers found in ``search``."""
    return set(includes.scan([source], search).names)


def default_nvcc_threads(budget: int) -> int:
    """nvcc's ``--threads`` when DS_NVCC_THREADS is unset: one per 8 jobs of the budget, 1 to 4.

    ``--threads`` compiles one TU's archs in parallel, but ninja counts that nvcc as one
    job, so each thread beyond the first spends a core (and a device compiler's memory)
    that the budget did not grant. The budget goes to TUs first: a build of the six GPU ops
    has 14, and one op's device TU, the longest, only runs alone at the end of a build on
    a machine with at least twice as many cores. It gains nothing with one arch.
    """
    return max(1, min(4, budget // 8))


class PrefixedOutput:
    """Whole lines to one stream, each behind its op's name (``[cpu_adam] ...``), from any thread."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def lines(self, prefix: str, lines: Sequence[str]) -> None:
        stream = self._stream or sys.stdout
        text = "".join(f"[{prefix}] {line.rstrip()}\n" for line in lines)
        with self._lock:
            stream.write(text)
            stream.flush()


def run_prefixed(
    cmd: Sequence[str],
    *,
    prefix: str,
    output: PrefixedOutput,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``cmd`` with its stdout and stderr, line by line, behind ``prefix``; its exit code."""
    # The caller's own buffered lines first, so the log keeps its order.
    sys.stdout.flush()
    sys.stderr.flush()
    with subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            output.lines(prefix, [raw.decode("utf-8", errors="replace")])
        return proc.wait()
