"""A stable module is the same bytes wherever it was built: two ahead-of-time builds of cpu_lion
from copies of the sources in two folders give one file (no build path inside it), so images of
one target and other machines can share it."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from tests._script_module import load_script

REPO = Path(__file__).resolve().parents[2]
# The proof's wheel build (scripts/stable_abi_proof.py), for one op here.
stable_abi_proof = load_script(REPO / "scripts" / "stable_abi_proof.py", "stable_abi_proof_script")

pytestmark = pytest.mark.timeout(900)


def _built_module(work: Path) -> bytes:
    wheel = stable_abi_proof.build_wheel(work, REPO, ops=("cpu_lion",))
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("kernels/_ops/cpu_lion.abi3.so")


def test_two_folders_build_the_same_module(tmp_path: Path) -> None:
    first = _built_module(tmp_path / "one")
    second = _built_module(tmp_path / "elsewhere" / "two")
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()
    assert str(tmp_path).encode() not in first  # no folder of the build is in the module
