"""Catalog lookups: targets, base images, torch matrix, arch defaults, package renames."""

from __future__ import annotations

import pytest

from imagegen.imagespec import catalog, catalog_table
from op_builder import archs as arch_lib


def test_every_listed_cuda_and_rocm_version_is_there() -> None:
    assert list(catalog.CUDA_TARGETS) == [
        "11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0", "13.2", "13.3", "13.4", "13.5",
    ]  # fmt: skip
    assert list(catalog.ROCM_TARGETS) == ["6.1", "6.2", "6.3", "6.4", "7.0", "7.1", "7.2"]
    assert catalog.lookup("cuda", "12.2") is None
    assert catalog.lookup("cpu", None) is catalog.CPU_TARGET


@pytest.mark.parametrize(
    ("version", "devel", "runtime"),
    [
        ("11.8", "nvidia/cuda:11.8.0-devel-ubuntu22.04", "nvidia/cuda:11.8.0-base-ubuntu22.04"),
        ("12.1", "nvidia/cuda:12.1.1-devel-ubuntu22.04", "nvidia/cuda:12.1.1-base-ubuntu22.04"),
        ("13.0", "nvidia/cuda:13.0.0-devel-ubuntu22.04", "nvidia/cuda:13.0.0-base-ubuntu22.04"),
    ],
)
def test_cuda_base_images(version: str, devel: str, runtime: str) -> None:
    target = catalog.CUDA_TARGETS[version]
    assert target.base_devel("ubuntu22.04", "3.10") == devel
    assert target.base_runtime("ubuntu22.04", "3.10") == runtime


def test_rocm_and_cpu_base_images() -> None:
    rocm = catalog.ROCM_TARGETS["6.2"]
    assert rocm.base_devel("ubuntu24.04", "3.12") == "rocm/dev-ubuntu-24.04:6.2"
    assert rocm.base_runtime("ubuntu24.04", "3.12") == "ubuntu:24.04"
    cpu = catalog.CPU_TARGET
    assert (
        cpu.base_devel("bookworm", "3.11")
        == cpu.base_runtime("bookworm", "3.11")
        == "python:3.11-slim-bookworm"
    )


@pytest.mark.parametrize(
    ("accelerator", "version", "first", "last", "default"),
    [
        ("cuda", "11.8", "2.0.0", "2.7.1", "2.7.1"),
        ("cuda", "12.1", "2.1.0", "2.5.1", "2.5.1"),
        ("cuda", "12.4", "2.4.0", "2.6.0", "2.6.0"),
        ("cuda", "12.6", "2.6.0", "2.12.1", "2.12.1"),
        ("cuda", "12.8", "2.7.0", "2.11.0", "2.11.0"),
        ("cuda", "12.9", "2.8.0", "2.9.1", "2.9.1"),
        ("cuda", "13.0", "2.9.0", "2.15.0", "2.15.0"),
        ("cuda", "13.2", "2.12.0", "2.15.0", "2.15.0"),
        ("rocm", "6.1", "2.4.0", "2.6.0", "2.6.0"),
        ("rocm", "6.2", "2.5.0", "2.7.1", "2.7.1"),
        ("rocm", "6.3", "2.7.0", "2.9.1", "2.9.1"),
        ("rocm", "7.0", "2.10.0", "2.10.0", "2.10.0"),
        ("rocm", "7.1", "2.10.0", "2.12.1", "2.12.1"),
        ("rocm", "7.2", "2.11.0", "2.12.1", "2.12.1"),
        ("cpu", None, "2.0.0", "2.15.0", "2.13.0"),
    ],
)
def test_torch_builds_per_target(
    accelerator: catalog.Accelerator, version: str | None, first: str, last: str, default: str
) -> None:
    target = catalog.lookup(accelerator, version)
    assert target is not None
    built = target.torch_versions()
    assert (built[0], built[-1]) == (first, last)
    assert target.default_torch == default and default in built


def test_rocm_index_names_follow_the_patch_release_torch_was_built_against() -> None:
    rocm = catalog.ROCM_TARGETS["6.2"]
    assert rocm.torch_range("2.5.1").variant == "rocm6.2"  # type: ignore[union-attr]
    assert rocm.torch_range("2.6.0").variant == "rocm6.2.4"  # type: ignore[union-attr]
    assert catalog.torch_index("cu121") == "https://download.pytorch.org/whl/cu121"


def test_rocm_7_targets_compile_in_rocm_dev_images() -> None:
    for version in ("7.0", "7.1", "7.2"):
        target = catalog.ROCM_TARGETS[version]
        assert target.distros[0] == "ubuntu24.04"
        assert target.base_devel("ubuntu24.04", "3.12") == f"rocm/dev-ubuntu-24.04:{version}"
        assert target.base_devel("ubuntu22.04", "3.10") == f"rocm/dev-ubuntu-22.04:{version}"
        assert {r.variant for r in target.torch} == {f"rocm{version}"}
    # torch 2.10 publishes ROCm 7.0 and 7.1, torch 2.11 ROCm 7.1 and 7.2.
    assert [v for v, t in catalog.ROCM_TARGETS.items() if t.torch_range("2.10.0")] == ["7.0", "7.1"]
    assert [v for v, t in catalog.ROCM_TARGETS.items() if t.torch_range("2.11.0")] == ["7.1", "7.2"]


def test_torch_2_11_is_still_built_for_cuda_12_6() -> None:
    assert [v for v, t in catalog.CUDA_TARGETS.items() if t.torch_range("2.11.0")] == [
        "12.6", "12.8", "13.0", "13.3", "13.4", "13.5",
    ]  # fmt: skip


def test_torch_release_resolution() -> None:
    assert catalog.resolve_torch_release("2.5") == "2.5.1"
    assert catalog.resolve_torch_release("2.5.0") == "2.5.0"
    assert catalog.resolve_torch_release("2.5.1+cu121") == "2.5.1"
    assert catalog.resolve_torch_release("2.5.7") is None
    assert catalog.resolve_torch_release("not-a-version") is None


def test_python_ranges() -> None:
    assert catalog.torch_supports_python("2.13.0", "3.11")
    assert not catalog.torch_supports_python("2.1.2", "3.12")
    assert not catalog.torch_supports_python("2.9.1", "3.9")


def test_default_archs_come_from_op_builder() -> None:
    for version in catalog.CUDA_TARGETS:
        expected = tuple(str(a) for a in arch_lib.default_cuda_archs(version))
        assert catalog.default_cuda_archs(version) == expected
        # every default arch must compile with that toolkit
        arch_lib.validate_for_toolkit(arch_lib.parse_cuda_arch_list(";".join(expected)), version)


def test_closest_version() -> None:
    assert catalog.closest_version("cuda", "12.3") == "12.4"
    assert catalog.closest_version("cuda", "14.0") == "13.5"
    assert catalog.closest_version("rocm", "5.7") == "6.1"
    assert catalog.closest_version("rocm", "x") is None


def test_runtime_package_renames_for_t64_distros() -> None:
    assert catalog.runtime_package("libaio1", "bookworm") == "libaio1"
    assert catalog.runtime_package("libaio1", "trixie") == "libaio1t64"
    assert catalog.runtime_package("libaio1", "ubuntu24.04") == "libaio1t64"
    assert catalog.runtime_package("libgomp1", "ubuntu24.04") == "libgomp1"


def test_docs_catalog_table_matches_the_code() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[4] / "docs" / "imagegen.md").read_text()
    assert catalog_table.markdown_table() in docs, (
        "paste catalog_table.markdown_table() into docs/imagegen.md"
    )


# ---------------------------------------------------------------- CUDA 13.x

CUDA13 = [v for v in catalog.CUDA_TARGETS if v.startswith("13.")]


def test_cuda_13_2_is_torch_2_15_s_build() -> None:
    # torch 2.15.0's wheels require cuda-toolkit==13.2.2 (their metadata on PyPI); 2.11-2.14 13.0.
    # torch publishes cu132 builds from 2.12 on.
    target = catalog.CUDA_TARGETS["13.2"]
    assert target.torch_versions()[0] == "2.12.0" and target.default_torch == "2.15.0"
    assert target.torch_range("2.15.0").variant == "cu132"  # type: ignore[union-attr]
    assert catalog.torch_index("cu132") == "https://download.pytorch.org/whl/cu132"
    assert target.distros[0] == "ubuntu24.04"
    assert target.base_devel("ubuntu24.04", "3.12") == "nvidia/cuda:13.2.2-devel-ubuntu24.04"
    assert target.base_runtime("ubuntu24.04", "3.12") == "nvidia/cuda:13.2.2-base-ubuntu24.04"


def test_cuda_13_2_default_archs_name_every_blackwell() -> None:
    # B200 10.0, GB300 10.3, RTX Blackwell 12.0, GB10 12.1, written out from NVIDIA's list.
    assert catalog.default_cuda_archs("13.2") == (
        "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1+PTX",
    )  # fmt: skip


@pytest.mark.parametrize("version", CUDA13)
def test_every_cuda_13_target_renders_a_dockerfile(version: str) -> None:
    from imagegen.imagespec.spec import SpecInput, build_spec
    from imagegen.render.dockerfile import render

    target = catalog.CUDA_TARGETS[version]
    spec = build_spec(SpecInput(cuda=version, ops="all"))
    text = render(spec)
    assert f"ARG BASE_DEVEL={target.base_devel(target.distros[0], spec.python)}\n" in text
    variant = target.torch_range(target.default_torch).variant  # type: ignore[union-attr]
    assert f'"torch=={target.default_torch}+{variant}"' in text
    assert f'io.imagegen.cuda="{version}"' in text


@pytest.mark.parametrize("version", CUDA13)
def test_every_cuda_13_target_has_standins(version: str) -> None:
    from imagegen.imagespec.spec import SpecInput, build_spec

    spec = build_spec(SpecInput(cuda=version, ops="all", standins=True))
    assert (spec.base_devel, spec.base_runtime) == (
        f"imagegen-standin/cuda:{version}-devel",
        f"imagegen-standin/cuda:{version}-base",
    )
    assert (spec.python, spec.distro) == (catalog.STANDIN_PYTHON, catalog.STANDIN_DISTRO)


def test_cuda_12_standins_are_debians_only() -> None:
    # NVIDIA's 12.x wheels hold only ptxas: the one CUDA 12 home here is Debian trixie's 12.4.
    assert [name for name, _ in catalog.STANDINS if name.startswith("cuda12")] == ["cuda12.4"]
    assert (catalog.standin_python("cuda12.4"), catalog.standin_distro("cuda12.4")) == ("3.13", "trixie")
    assert (catalog.standin_python("cpu"), catalog.standin_distro("cuda13.2")) == ("3.11", "bookworm")


@pytest.mark.parametrize("version", ["13.3", "13.4", "13.5"])
def test_cuda_13_releases_torch_does_not_build_take_its_13_0_and_13_2_builds(version: str) -> None:
    # No torch wheel pins 13.3-13.5: minor-version compatibility runs cu130 / cu132 builds on them.
    target = catalog.CUDA_TARGETS[version]
    assert [(r.first, r.last, r.variant) for r in target.torch] == [
        ("2.9", "2.11", "cu130"),
        ("2.12", "2.15", "cu132"),
    ]
    assert target.torch_range("2.10.0").variant == "cu130"  # type: ignore[union-attr]
    assert target.torch_range("2.15.0").variant == "cu132"  # type: ignore[union-attr]
    assert target.default_torch == "2.15.0" and catalog.ARM64 in target.platforms
    full = {"13.3": "13.3.1", "13.4": "13.4.3", "13.5": "13.5.0"}[version]
    assert target.base_devel("ubuntu24.04", "3.12") == f"nvidia/cuda:{full}-devel-ubuntu24.04"
    assert catalog.default_cuda_archs(version) == catalog.default_cuda_archs("13.2")
