"""The device-code jobs: each toolkit's compiler, where it runs, and the flags op_builder gives."""

from __future__ import annotations

from imagegen.compat import device
from op_builder.paths import PACKAGE_ROOT
from op_builder.plan import probe_host
from op_builder.registry import ALL_OPS

GPU_SOURCES = sum(1 for b in ALL_OPS.values() if b.target == "gpu" for s in b.sources if s.endswith(".cu"))


def test_a_stand_in_toolkit_runs_in_its_image_on_the_checkout_read_only() -> None:
    toolkit = device.Toolkit("cuda", "12.4", "img:1", "nvcc", "img:1")
    jobs = device.jobs_for(toolkit, "c++17", ALL_OPS, probe_host({}))
    assert len(jobs) == GPU_SOURCES
    for job in jobs:
        cmd = list(job.command)
        assert cmd[1:5] == ["run", "--rm", "--network", "none"]
        assert f"{PACKAGE_ROOT}:{PACKAGE_ROOT}:ro" in cmd and cmd[cmd.index("img:1") + 1] == "nvcc"
        assert "-std=c++17" in cmd and "-gencode=arch=compute_80,code=sm_80" in cmd
        assert not job.depfile  # the compiler's dependency list stays in the container


def test_the_standard_follows_torch_and_keys_differ_per_toolkit_and_standard() -> None:
    here = device.Toolkit("cuda", "13.0", "this machine", "/usr/local/cuda/bin/nvcc")
    c17 = device.jobs_for(here, "c++17", ALL_OPS, probe_host({}))
    c20 = device.jobs_for(here, "c++20", ALL_OPS, probe_host({}))
    assert all("-std=c++20" in j.command for j in c20) and all(j.depfile for j in c20)
    other = device.jobs_for(
        device.Toolkit("cuda", "13.2", "img", "nvcc", "img"), "c++17", ALL_OPS, probe_host({})
    )
    keys = [{j.key for j in jobs} for jobs in (c17, c20, other)]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2])


def test_hip_compiles_as_hip_for_amd_wherever_it_runs() -> None:
    here = device.jobs_for(
        device.Toolkit("rocm", "5.2", "this machine", "/usr/bin/hipcc"), "c++17", ALL_OPS, probe_host({})
    )
    assert here[0].command[:2] == ("env", "HIP_PLATFORM=amd")
    image = device.jobs_for(
        device.Toolkit("rocm", "5.7", "img", "hipcc", "img"), "c++17", ALL_OPS, probe_host({})
    )
    for job in (here[0], image[0]):
        cmd = list(job.command)
        assert "--offload-arch=gfx90a" in cmd and cmd[cmd.index("-x") + 1] == "hip"
    assert "HIP_PLATFORM=amd" in image[0].command and "-e" in image[0].command


def test_missing_toolkits_are_named_with_how_to_get_them() -> None:
    found = [device.Toolkit("cuda", "13.0", "this machine", "nvcc")]
    wanted = (("cuda", "13.0", "here"), ("cuda", "12.4", "its stand-in"))
    missing = device.missing_toolkits(found, wanted)
    assert missing == [device.Missing("cuda", "12.4", "not available here (its stand-in)")]


def test_each_toolkit_compiles_under_the_standards_of_the_targets_it_stands_for() -> None:
    from imagegen.compat import check

    toolkits = [
        device.Toolkit("cuda", "12.4", "img", "nvcc", "img"),
        device.Toolkit("cuda", "13.0", "this machine", "nvcc"),
        device.Toolkit("rocm", "5.2", "this machine", "hipcc"),
        device.Toolkit("rocm", "5.7", "img", "hipcc", "img"),
    ]
    # 12.4 stands for every CUDA 11.x / 12.x target (torch up to 2.12: C++17); 13.0 for the 13.x
    # ones, whose torch 2.14 and 2.15 want C++20; hipcc 5.7 for every ROCm target, 5.2 for none.
    assert check.stds_for(check._targets_minors("cuda", "12.4", toolkits)) == ["c++17"]
    assert check.stds_for(check._targets_minors("cuda", "13.0", toolkits)) == ["c++17", "c++20"]
    assert check._targets_minors("rocm", "5.2", toolkits) == []
    assert "2.12" in check._targets_minors("rocm", "5.7", toolkits)
