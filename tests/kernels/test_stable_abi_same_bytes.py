"""A stable module is the same bytes wherever it was built: two ahead-of-time builds of cpu_lion
from copies of the sources in two folders give one file (no build path inside it), so images of
one target and other machines can share it."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import stable_abi_proof  # noqa: E402  (scripts/: the proof's wheel build, one op of it here)

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
