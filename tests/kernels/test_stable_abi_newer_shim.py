"""The stable-ABI check on real compiled code: torch's headers keep a C shim newer than the
target out of a build that sets TORCH_TARGET_VERSION, and a module built without the target that
uses one is caught by the symbol check, in op_builder and in ``verify``, naming it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from op_builder import stable_abi
from op_builder.manifest import InstalledOp, Manifest
from op_builder.verify import stable_abi_break

# torch_from_blob came in 2.11 (torch/csrc/stable/c/shim_function_versions.txt).
SOURCE = """
#include <torch/csrc/stable/c/shim.h>
extern "C" void* newer_than_the_target() { return reinterpret_cast<void*>(&torch_from_blob); }
"""


def _compile(tmp_path: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.fail("no C++ compiler: `make setup` installs one")
    source = tmp_path / "probe.cpp"
    source.write_text(SOURCE)
    include = Path(torch.__file__).parent / "include"
    command = [
        cxx,
        "-std=c++17",
        "-shared",
        "-fPIC",
        f"-I{include}",
        *defines,
        str(source),
        "-o",
        str(tmp_path / "probe.so"),
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_the_target_keeps_newer_shims_out_at_compile_time(tmp_path: Path) -> None:
    built = _compile(tmp_path, f"-DTORCH_TARGET_VERSION={stable_abi.version_macro('2.10')}")
    assert built.returncode != 0 and "torch_from_blob" in built.stderr


def test_a_module_that_uses_a_newer_shim_fails_the_check(tmp_path: Path) -> None:
    built = _compile(tmp_path)  # no target: the headers of this torch (2.13) allow it
    assert built.returncode == 0, built.stderr
    module = tmp_path / "probe.so"
    report = stable_abi.check_module(module, "2.10")
    assert report.newer_shims == ("torch_from_blob (2.11)",)
    assert stable_abi.check_module(module, "2.11").ok

    entry = InstalledOp("cpu_lion", "kernels._ops.cpu_lion", "cpu", (), {}, "2.10")
    manifest = Manifest(torch.__version__, None, None, "cpu", "3.11", {"cpu_lion": entry})
    why = stable_abi_break("cpu_lion", str(module), manifest)
    assert (
        why is not None and "breaks the stable ABI of torch 2.10" in why and "torch_from_blob (2.11)" in why
    )
    per_torch = Manifest(
        torch.__version__, None, None, "cpu", "3.11", {"cpu_lion": InstalledOp("cpu_lion", "m", "cpu", ())}
    )
    assert stable_abi_break("cpu_lion", str(module), per_torch) is None  # not a stable build: not held to it
