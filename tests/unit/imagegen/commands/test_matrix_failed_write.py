"""A `matrix --out` that fails part-way leaves no folders or files of its own behind."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.render.matrix import render_matrix


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_file_in_the_way_leaves_nothing_of_the_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's\n")
    # The last folder in write order is a file: every folder before it has been made by then.
    last_folder = sorted(render_matrix())[-1].split("/")[0]
    (out / last_folder).write_text("in the way\n")
    before = _tree(out)

    result = CliRunner().invoke(app, ["matrix", "--out", str(out)])

    assert result.exit_code == 2, result.output
    assert "a file is in the way" in result.stderr
    assert _tree(out) == before


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 KiB tmpfs: room for a few Dockerfiles of the matrix, not all of them."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_leaves_no_empty_folders(tiny_disk: Path) -> None:
    assert sum(len(t.encode()) for t in render_matrix().values()) > 48 * 1024  # it must not fit

    result = CliRunner().invoke(app, ["matrix", "--out", str(tiny_disk / "dockerfiles")])

    assert result.exit_code == 2, result.output
    assert "no space left on device" in result.stderr
    assert not (tiny_disk / "dockerfiles").exists()
