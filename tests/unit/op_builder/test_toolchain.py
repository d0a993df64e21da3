"""Toolkit version policy, library probes and the manifest (real probes where cheap)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from op_builder import manifest
from op_builder.errors import OpLoadError, ToolchainError
from op_builder.toolchain import check_cuda_versions, cuda_mismatch, probe_library


@pytest.mark.parametrize(
    ("toolkit", "torch_cuda", "ok"),
    [
        ("12.1", "12.1", True),
        ("12.6", "12.1", True),  # minor-version compatibility within 12.x
        ("11.8", "11.7", True),
        ("13.0", "13.0", True),
        ("12.4", "11.8", False),
        ("13.0", "12.8", False),
        ("10.2", "10.1", False),  # before 11, minors had to match
    ],
)
def test_cuda_policy(toolkit: str, torch_cuda: str, ok: bool) -> None:
    assert (cuda_mismatch(toolkit, torch_cuda) is None) is ok


def test_mismatch_raises_with_both_versions_unless_skipped() -> None:
    with pytest.raises(ToolchainError) as err:
        check_cuda_versions("12.4", "11.8", {})
    assert "12.4" in err.value.message and "11.8" in err.value.message
    assert err.value.hint and "DS_SKIP_CUDA_CHECK=1" in err.value.hint
    warning = check_cuda_versions("12.4", "11.8", {"DS_SKIP_CUDA_CHECK": "1"})
    assert warning and "ignored" in warning


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (apt-get install g++)")
def test_library_probe_finds_libc_math_and_reports_missing_ones() -> None:
    assert probe_library("m", "cmath", "cos").ok
    missing = probe_library("definitely_not_a_lib", "definitely_not_a_header.h", "nothing")
    assert not missing.ok and "definitely_not_a_header.h" in (missing.reason or "")


@pytest.mark.skipif(
    not Path("/usr/include/libaio.h").exists(), reason="libaio-dev not installed (apt-get install libaio-dev)"
)
def test_libaio_probe() -> None:
    assert probe_library("aio", "libaio.h", "io_submit").ok


def test_manifest_round_trip_and_atomic_write(tmp_path: Path) -> None:
    original = manifest.Manifest(
        torch="2.13.0+cpu",
        cuda=None,
        hip=None,
        accelerator="cpu",
        python="3.11.7",
        ops={
            "cpu_adam": manifest.InstalledOp("cpu_adam", "kernels._ops.cpu_adam", "cpu", (), {"cxx": ["-O3"]})
        },
    )
    target = manifest.manifest_path(tmp_path)
    manifest.write(original, target)
    assert [p.name for p in target.parent.iterdir()] == ["manifest.json"]  # no temp files left
    manifest.read_installed.cache_clear()
    assert manifest.read_installed(tmp_path) == original


def test_damaged_manifest_is_an_error_not_an_empty_install(tmp_path: Path) -> None:
    target = manifest.manifest_path(tmp_path)
    target.parent.mkdir(parents=True)
    target.write_text("{not json")
    manifest.read_installed.cache_clear()
    with pytest.raises(OpLoadError, match="unreadable"):
        manifest.read_installed(tmp_path)


def test_default_jit_cache_matches_torch() -> None:
    # In a fresh process: nothing else may have imported torch's helper modules, and torch's
    # cpp_extension (which imports setuptools) is imported there too, not here, where another
    # test may already have imported the standard library's distutils, which setuptools refuses.
    import subprocess
    import sys

    import torch

    from op_builder.loader import extensions_root

    probe = (
        "from op_builder.loader import extensions_root; print(extensions_root({}))\n"
        "from torch.utils.cpp_extension import get_default_build_root; print(get_default_build_root())"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"},
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    ours, torchs = (Path(line) for line in done.stdout.split())
    assert ours == extensions_root({})
    assert ours.parent == torchs
    assert ours.name == f"py{sys.version_info[0]}{sys.version_info[1]}_" + (
        "cpu" if torch.version.cuda is None else f"cu{torch.version.cuda.replace('.', '')}"
    )
