"""A stable module is the same bytes wherever it was built: two ahead-of-time builds of cpu_lion
from copies of the sources in two folders give one file (no build path inside it), so images of
one target and other machines can share it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagegen.building.build_inputs import copy_build_inputs

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(900)


def _built_module(work: Path) -> bytes:
    source = copy_build_inputs(REPO, work / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    env.update(DS_BUILD_OPS="0", DS_BUILD_CPU_LION="1")
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        str(work / "wheel"),
        ".",
    ]
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (work / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("kernels/_ops/cpu_lion.abi3.so")


def test_two_folders_build_the_same_module(tmp_path: Path) -> None:
    first = _built_module(tmp_path / "one")
    second = _built_module(tmp_path / "elsewhere" / "two")
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()
    assert str(tmp_path).encode() not in first  # no folder of the build is in the module
