"""The precompiled torch header: which sources get it, and that it leaves results' keys alone."""

from __future__ import annotations

from pathlib import Path

from imagegen.compat import pch
from imagegen.compat.host import Job
from op_builder.paths import PACKAGE_ROOT
from op_builder.registry import get_builder

KERNELS = PACKAGE_ROOT / "kernels"


def includes(op: str) -> list[Path]:
    return [Path(d) for d in get_builder(op).include_paths()]


def test_only_sources_that_include_torch_extension_get_it() -> None:
    optim = KERNELS / "optim" / "csrc"
    assert pch.includes_torch(optim / "fused_adam_bindings.cpp", includes("fused_adam"))  # via gpu_bindings.h
    # async_io's binding is Python's C API alone, no torch header.
    assert not pch.includes_torch(KERNELS / "aio" / "csrc" / "async_io.cpp", includes("async_io"))
    # The CPU optimizers' binding takes narrower headers, their kernels none of torch's.
    assert not pch.includes_torch(optim / "cpu_adam.cpp", includes("cpu_adam"))
    assert not pch.includes_torch(optim / "cpu_adam_kernel.cpp", includes("cpu_adam"))


def _job(compiler: str, name: str) -> Job:
    command = (
        compiler,
        "-std=c++17",
        f"-DTORCH_EXTENSION_NAME={name}",
        f"-I{KERNELS}/includes",
        "-c",
        "a.cpp",
        "-o",
        "{obj}",
    )
    return Job("2.13.0", name, "a.cpp", command, key=f"key-{name}", roots=(str(PACKAGE_ROOT),))


def test_jobs_that_differ_only_in_their_own_tu_share_one_header_and_keep_their_keys() -> None:
    made = pch.Precompiled()
    try:
        jobs = [_job("true", "a"), _job("true", "b"), _job("true", "c")]
        out = made.apply(jobs, [True, True, False])
        assert len(made.made) == 1  # one group: TORCH_EXTENSION_NAME, -c and -o are the TU's own
        header = next(iter(made.made.values()))
        assert header is not None
        for job in out[:2]:
            cmd = list(job.command)
            assert cmd[cmd.index("-include") + 1] == str(header) and cmd.index("-include") < cmd.index("-c")
        assert out[2] == jobs[2]
        assert [j.key for j in out] == [j.key for j in jobs]
    finally:
        made.close()
    assert not made.folder.exists()


def test_a_header_that_does_not_precompile_leaves_the_jobs_as_they_were() -> None:
    made = pch.Precompiled()
    try:
        jobs = [_job("false", "a")]
        assert made.apply(jobs, [True]) == jobs
    finally:
        made.close()
