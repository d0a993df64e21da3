"""Arch-list parsing, toolkit validation, per-op filtering and nvcc flags (pure functions)."""

from __future__ import annotations

import pytest

from op_builder import archs as A
from op_builder.errors import ArchError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.0", ["8.0"]),
        ("7.0;8.0;9.0+PTX", ["7.0", "8.0", "9.0+PTX"]),
        ("9.0 8.0  7.5", ["7.5", "8.0", "9.0"]),
        ("8.0,8.6", ["8.0", "8.6"]),
        ("9.0a", ["9.0a"]),
        ("10.0f;12.0f+PTX", ["10.0f", "12.0f+PTX"]),
        ("Ampere", ["8.0", "8.6"]),
        ("ampere+PTX", ["8.0", "8.6+PTX"]),
        ("Hopper;Blackwell", ["9.0", "10.0", "12.0"]),
        ("8.0;8.0;8.0+PTX", ["8.0+PTX"]),  # duplicates merge, PTX kept
        ("Ampere;8.0", ["8.0", "8.6"]),
    ],
)
def test_parse(text: str, expected: list[str]) -> None:
    assert [str(a) for a in A.parse_cuda_arch_list(text)] == expected


@pytest.mark.parametrize("text", ["", "  ", "8", "sm_80", "8.0.1", "Amper", "8.0+ptxx", "8.0b", "x.y"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ArchError) as err:
        A.parse_cuda_arch_list(text)
    assert err.value.hint


def test_native_uses_visible_gpus() -> None:
    assert [str(a) for a in A.parse_cuda_arch_list("native", lambda: ["9.0", "8.0"])] == ["8.0", "9.0"]
    with pytest.raises(ArchError, match="no GPU is visible"):
        A.parse_cuda_arch_list("native", lambda: [])


@pytest.mark.parametrize(
    ("cuda", "lowest", "has_blackwell"),
    [
        ("11.8", "7.0", False),
        ("12.1", "7.0", False),
        ("12.6", "7.0", False),
        ("12.8", "7.0", True),
        ("12.9", "7.0", True),
        ("13.0", "7.5", True),
    ],
)
def test_defaults_per_toolkit(cuda: str, lowest: str, has_blackwell: bool) -> None:
    archs = A.default_cuda_archs(cuda)
    assert str(archs[0]) == lowest
    assert any(a.major == 10 for a in archs) == has_blackwell
    assert sum(a.ptx for a in archs) == 1 and archs[-1].ptx  # PTX only for the newest
    A.validate_for_toolkit(archs, cuda)  # every default is buildable by its own toolkit


@pytest.mark.parametrize(
    ("arch", "cuda", "fragment"),
    [
        ("7.0", "13.0", "dropped after CUDA 12.9"),
        ("6.0", "13.0", "dropped"),
        ("10.0", "12.4", "needs CUDA 12.8"),
        ("9.0", "11.7", "needs CUDA 11.8"),
        ("3.5", "12.1", "dropped after CUDA 11.8"),
        ("9.0a", "11.8", "needs CUDA 12.0"),
        ("10.0f", "12.8", "needs CUDA 12.9"),
        ("8.0a", "12.4", "no 'a' variant"),
        ("9.9", "12.4", "not a known compute capability"),
    ],
)
def test_validate_rejects(arch: str, cuda: str, fragment: str) -> None:
    with pytest.raises(ArchError, match=fragment) as err:
        A.validate_for_toolkit(A.parse_cuda_arch_list(arch), cuda)
    assert err.value.hint and f"CUDA {cuda} compiles:" in err.value.hint


@pytest.mark.parametrize(
    ("arch", "cuda"), [("7.5", "13.0"), ("7.0", "12.9"), ("9.0a", "12.0"), ("12.0", "12.8")]
)
def test_validate_accepts(arch: str, cuda: str) -> None:
    A.validate_for_toolkit(A.parse_cuda_arch_list(arch), cuda)


def test_decide_op_archs_returns_new_lists_and_leaves_input_alone() -> None:
    archs = A.parse_cuda_arch_list("7.0;8.0;9.0+PTX")
    decision = A.decide_op_archs("op", archs, A.ArchLimits(min_capability=(8, 0)))
    assert [str(a) for a in decision.kept] == ["8.0", "9.0+PTX"]
    assert [str(a) for a in decision.dropped] == ["7.0"]
    assert decision.reason is None
    assert [str(a) for a in archs] == ["7.0", "8.0", "9.0+PTX"]
    decision = A.decide_op_archs("op", archs, A.ArchLimits(max_capability=(8, 0)))
    assert [str(a) for a in decision.kept] == ["7.0", "8.0"]


def test_decide_op_archs_rejects_with_the_reason_when_nothing_is_left() -> None:
    archs = A.parse_cuda_arch_list("7.0;7.5")
    decision = A.decide_op_archs("fp_quantizer", archs, A.ArchLimits(min_capability=(8, 0)))
    assert decision.kept == ()
    assert decision.reason == "fp_quantizer needs archs >= 8.0; none of 7.0;7.5 is"


def test_gencode_each_arch_once_and_ptx_only_where_asked() -> None:
    flags = A.nvcc_gencode_flags(A.parse_cuda_arch_list("7.0;8.0;9.0+PTX;8.0"))
    assert flags == [
        "-gencode=arch=compute_70,code=sm_70",
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]


def test_arch_specific_spelling() -> None:
    assert A.nvcc_gencode_flags(A.parse_cuda_arch_list("9.0a")) == ["-gencode=arch=compute_90a,code=sm_90a"]


@pytest.mark.parametrize(("text", "bf16"), [("8.0;9.0", True), ("7.5;8.0", False), ("12.0", True)])
def test_bf16_from_own_list(text: str, bf16: bool) -> None:
    assert A.bf16_supported(A.parse_cuda_arch_list(text)) is bf16
    assert A.bf16_supported(()) is False


def test_rocm_lists() -> None:
    assert A.parse_rocm_arch_list("gfx942;gfx90a gfx90a") == ("gfx90a", "gfx942")
    assert A.parse_rocm_arch_list("gfx90a:xnack+") == ("gfx90a:xnack+",)
    assert A.hip_offload_flags(["gfx90a", "gfx1030"]) == ["--offload-arch=gfx1030", "--offload-arch=gfx90a"]
    with pytest.raises(ArchError):
        A.parse_rocm_arch_list("sm_80")
