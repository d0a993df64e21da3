"""The planner: DS_BUILD_* selection, per-op archs (the seed bug), errors and skips."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from op_builder import ALL_OPS
from op_builder.plan import make_plan
from tests.unit.fakes import host

GPU_OPS = [name for name, b in ALL_OPS.items() if b.target == "gpu"]
SEED_ENV = {"DS_ACCELERATOR": "cuda", "TORCH_CUDA_ARCH_LIST": "7.0;8.0;9.0+PTX", "DS_BUILD_OPS": "1"}


def _gencode_counts(flags: tuple[str, ...]) -> Counter[str]:
    return Counter(f.rsplit("code=", 1)[1] for f in flags if f.startswith("-gencode"))


def test_seed_bug_each_op_gets_its_own_archs_each_once() -> None:
    plan = make_plan(SEED_ENV, host(torch_cuda="12.4", toolkit="12.4"))
    assert plan.ok, plan.errors
    by_name = {op.name: op for op in plan.ops}
    assert set(GPU_OPS) <= set(by_name)
    for name in GPU_OPS:
        counts = _gencode_counts(by_name[name].flags.device)
        expected = {"sm_80": 1, "sm_90": 1, "compute_90": 1}
        if name != "fp_quantizer":
            expected["sm_70"] = 1
        assert dict(counts) == expected, name
        # bf16 paths follow each op's own list: only fp_quantizer dropped 7.0.
        assert ("-DBF16_AVAILABLE" in by_name[name].flags.device) == (name == "fp_quantizer")


def test_fp_quantizer_filter_cannot_leak_into_later_ops() -> None:
    # Plan twice, with fp_quantizer alone first and then everything: a global,
    # mutated arch list (the DeepSpeed bug) would make the second plan lose 7.0.
    before = dict(os.environ)
    first = make_plan({**SEED_ENV, "DS_BUILD_OPS": "0", "DS_BUILD_FP_QUANTIZER": "1"}, host("12.4", "12.4"))
    assert [op.archs for op in first.ops] == [("8.0", "9.0+PTX")]
    second = make_plan(SEED_ENV, host("12.4", "12.4"))
    for op in second.ops:
        if op.target == "gpu" and op.name != "fp_quantizer":
            assert op.archs == ("7.0", "8.0", "9.0+PTX"), op.name
            assert "-DBF16_AVAILABLE" not in op.flags.device  # 7.0 in its own list: no bf16 path
    fp = next(op for op in second.ops if op.name == "fp_quantizer")
    assert "-DBF16_AVAILABLE" in fp.flags.device
    assert dict(os.environ) == before
    assert "TORCH_CUDA_ARCH_LIST" not in os.environ or os.environ["TORCH_CUDA_ARCH_LIST"] == before.get(
        "TORCH_CUDA_ARCH_LIST"
    )


def test_env_mapping_not_modified() -> None:
    env = dict(SEED_ENV)
    make_plan(env, host("12.4", "12.4"))
    assert env == SEED_ENV


def test_nothing_selected_by_default() -> None:
    plan = make_plan({}, host())
    assert plan.ok and plan.ops == () and plan.skipped == ()


def test_explicit_op_only() -> None:
    plan = make_plan({"DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1"}, host())
    assert [op.name for op in plan.ops] == ["cpu_adam"]
    assert plan.accelerator == "cpu"


def test_build_all_on_cpu_skips_gpu_ops_with_reasons() -> None:
    plan = make_plan({"DS_BUILD_OPS": "1"}, host())
    assert plan.ok
    assert {op.name for op in plan.ops} == {"cpu_adam", "cpu_adagrad", "cpu_lion", "async_io"}
    assert {s.name for s in plan.skipped} == set(GPU_OPS)
    assert all("CPU" in s.reason for s in plan.skipped)


def test_build_all_with_one_opt_out() -> None:
    plan = make_plan({"DS_BUILD_OPS": "1", "DS_BUILD_ASYNC_IO": "0"}, host())
    assert "async_io" not in {op.name for op in plan.ops}


def test_explicit_incompatible_op_is_an_error() -> None:
    plan = make_plan({"DS_BUILD_FUSED_ADAM": "1"}, host())
    assert not plan.ok
    assert "DS_BUILD_FUSED_ADAM=1 but fused_adam cannot be built" in plan.errors[0].message


def test_missing_libaio_explicit_is_error_and_skip_under_build_all() -> None:
    plan = make_plan({"DS_BUILD_ASYNC_IO": "1"}, host(libaio=False))
    assert not plan.ok and "libaio-dev" in plan.errors[0].message
    plan = make_plan({"DS_BUILD_OPS": "1"}, host(libaio=False))
    assert plan.ok and [s.name for s in plan.skipped if s.name == "async_io"]
    assert "libaio-dev" in next(s.reason for s in plan.skipped if s.name == "async_io")


def test_no_compiler() -> None:
    plan = make_plan({"DS_BUILD_CPU_LION": "1"}, host(cxx=False))
    assert not plan.ok and "no C++ compiler" in plan.errors[0].message


@pytest.mark.parametrize(
    ("variable", "suggestion"),
    [
        ("DS_BUILD_CPU_ADAMW", "DS_BUILD_CPU_ADAM"),
        ("DS_BUILD_TRANSFORMERS", "DS_BUILD_TRANSFORMER"),
        ("DS_BUILD_OP", "DS_BUILD_OPS"),
    ],
)
def test_unknown_build_variable_suggests(variable: str, suggestion: str) -> None:
    plan = make_plan({variable: "1"}, host())
    assert not plan.ok
    assert variable in plan.errors[0].message
    assert plan.errors[0].hint and suggestion in plan.errors[0].hint


def test_garbled_boolean() -> None:
    plan = make_plan({"DS_BUILD_CPU_ADAM": "maybe"}, host())
    assert not plan.ok and "not a boolean" in plan.errors[0].message


def test_bad_accelerator() -> None:
    plan = make_plan({"DS_ACCELERATOR": "tpu"}, host())
    assert not plan.ok and "DS_ACCELERATOR" in plan.errors[0].message


def test_accelerator_follows_torch_build() -> None:
    assert make_plan({}, host(torch_cuda="12.4", toolkit="12.4")).accelerator == "cuda"
    assert make_plan({}, host(torch_hip="6.2", rocm="6.2")).accelerator == "rocm"
    assert make_plan({"DS_ACCELERATOR": "cpu"}, host(torch_cuda="12.4", toolkit="12.4")).accelerator == "cpu"


def test_default_archs_come_from_the_toolkit() -> None:
    plan = make_plan({"DS_BUILD_FUSED_ADAM": "1"}, host("13.0", "13.0"))
    assert plan.ok
    assert plan.ops[0].archs[0] == "7.5" and plan.ops[0].archs[-1].endswith("+PTX")


def test_arch_the_toolkit_cannot_build_is_an_error() -> None:
    plan = make_plan({"DS_BUILD_FUSED_ADAM": "1", "TORCH_CUDA_ARCH_LIST": "7.0"}, host("13.0", "13.0"))
    assert not plan.ok and "7.0 was dropped" in plan.errors[0].message


def test_cuda_major_mismatch_fails_unless_skipped() -> None:
    env = {"DS_BUILD_FUSED_ADAM": "1", "TORCH_CUDA_ARCH_LIST": "8.0"}
    plan = make_plan(env, host(torch_cuda="11.8", toolkit="12.4"))
    assert not plan.ok and "12.4" in plan.errors[0].message and "11.8" in plan.errors[0].message
    plan = make_plan({**env, "DS_SKIP_CUDA_CHECK": "1"}, host(torch_cuda="11.8", toolkit="12.4"))
    assert plan.ok and any("DS_SKIP_CUDA_CHECK" in w for w in plan.warnings)


def test_minor_mismatch_is_fine() -> None:
    plan = make_plan({"DS_BUILD_FUSED_ADAM": "1", "TORCH_CUDA_ARCH_LIST": "8.0"}, host("12.1", "12.6"))
    assert plan.ok and not plan.warnings


def test_gpu_op_without_toolkit() -> None:
    plan = make_plan({"DS_ACCELERATOR": "cuda", "DS_BUILD_QUANTIZER": "1"}, host(torch_cuda="12.4"))
    assert not plan.ok and "no CUDA toolkit" in plan.errors[0].message


def test_fp_quantizer_alone_on_old_archs() -> None:
    plan = make_plan({"DS_BUILD_FP_QUANTIZER": "1", "TORCH_CUDA_ARCH_LIST": "7.0;7.5"}, host("12.4", "12.4"))
    assert not plan.ok and ">= 8.0" in plan.errors[0].message


def test_rocm_flags() -> None:
    env = {"DS_ACCELERATOR": "rocm", "PYTORCH_ROCM_ARCH": "gfx90a;gfx1030", "DS_BUILD_TRANSFORMER": "1"}
    plan = make_plan(env, host(torch_hip="6.2", rocm="6.2"))
    assert plan.ok
    flags = plan.ops[0].flags
    assert flags.device_compiler == "hipcc"
    assert flags.device.count("--offload-arch=gfx90a") == 1 and "--offload-arch=gfx1030" in flags.device
    assert not any("gencode" in f for f in flags.device)


def test_cpu_native_is_opt_in() -> None:
    plain = make_plan({"DS_BUILD_CPU_ADAM": "1"}, host())
    native = make_plan({"DS_BUILD_CPU_ADAM": "1", "DS_CPU_NATIVE": "1"}, host())
    assert "-march=native" not in plain.ops[0].flags.cxx
    assert "-march=native" in native.ops[0].flags.cxx


def test_plan_json_shape() -> None:
    data = make_plan(SEED_ENV, host("12.4", "12.4")).to_json()
    assert data["ok"] is True and data["accelerator"] == "cuda"
    assert data["cuda_archs"] == ["7.0", "8.0", "9.0+PTX"]
    assert {"name", "target", "archs", "flags"} <= set(data["ops"][0])


@pytest.mark.parametrize(
    ("torch_version", "std"),
    [
        ("2.5.1", "c++17"),
        ("2.13.0+cpu", "c++17"),
        ("2.14.0", "c++20"),
        ("2.15.0+cu132", "c++20"),
        ("3.0.0", "c++20"),
    ],
)
def test_cxx_standard_follows_torch(torch_version: str, std: str) -> None:
    from dataclasses import replace

    from op_builder.toolchain import TorchBuild

    toolchain = replace(host("12.8", "12.8"), torch=TorchBuild(torch_version, "12.8", None))
    plan = make_plan(
        {"DS_BUILD_CPU_ADAM": "1", "DS_BUILD_FUSED_ADAM": "1", "TORCH_CUDA_ARCH_LIST": "9.0"}, toolchain
    )
    assert plan.ok
    for op in plan.ops:
        assert f"-std={std}" in op.flags.cxx
        assert all("-std=" not in f or f == f"-std={std}" for f in op.flags.device)
