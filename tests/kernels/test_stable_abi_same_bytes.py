"""A stable module is the same bytes wherever it was built: ahead-of-time builds of cpu_lion from
copies of the sources in two folders, against one set of torch headers pinned at two places
(DS_STABLE_HEADERS, as images pin their target's newest torch), give one file (no build path
inside it), so images of one target and other machines can share it. And the pinned headers are
the ones the compiler reads: a copy with an error planted in one fails the build, naming it."""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch.utils.cpp_extension

from imagegen.proof.probe import elf_facts
from tests._script_module import load_script

REPO = Path(__file__).resolve().parents[2]
# The proof's wheel build (scripts/stable_abi_proof.py), for one op here.
stable_abi_proof = load_script(REPO / "scripts" / "stable_abi_proof.py", "stable_abi_proof_script")
# This torch's headers stand in for a pinned release's: copied, so that they are not where the
# installed torch's are (and the prefix map of torch's site folder cannot hide their path).
TORCH_INCLUDE = Path(torch.utils.cpp_extension.include_paths()[0])
# A header every stable binding includes (kernels/includes/op_abi.h).
STABLE_LIBRARY = Path("torch", "csrc", "stable", "library.h")

pytestmark = pytest.mark.timeout(900)


def _pinned_copy(where: Path) -> Path:
    shutil.copytree(TORCH_INCLUDE, where, copy_function=os.link)  # links: the copy costs nothing
    return where


def _built_module(work: Path, headers: Path) -> bytes:
    wheel = stable_abi_proof.build_wheel(work, REPO, ops=("cpu_lion",), headers=headers)
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("kernels/_ops/cpu_lion.abi3.so")


def test_two_folders_and_two_places_of_the_headers_build_the_same_module(tmp_path: Path) -> None:
    first = _built_module(tmp_path / "one", _pinned_copy(tmp_path / "h1" / "include"))
    second = _built_module(tmp_path / "elsewhere" / "two", _pinned_copy(tmp_path / "h2" / "x" / "include"))
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()
    assert str(tmp_path).encode() not in first  # no folder of the build or of the headers is in it
    # Its function names stay: the SBOM reads the instruction-set paths from them.
    module = tmp_path / "cpu_lion.abi3.so"
    module.write_bytes(first)
    assert {"scalar", "avx2", "avx512"} <= set(elf_facts(str(module))[0])


def test_the_build_reads_the_pinned_headers_not_the_installed_torchs(tmp_path: Path) -> None:
    headers = _pinned_copy(tmp_path / "pinned" / "include")
    planted = headers / STABLE_LIBRARY
    text = planted.read_text()
    planted.unlink()  # a link to the installed torch's file: replace it, never write through it
    planted.write_text('#error "the pinned copy of library.h"\n' + text)
    with pytest.raises(stable_abi_proof.ProofError, match="the wheel did not build"):
        _built_module(tmp_path / "work", headers)
    assert "the pinned copy of library.h" in (tmp_path / "work" / "logs" / "wheel.log").read_text()
