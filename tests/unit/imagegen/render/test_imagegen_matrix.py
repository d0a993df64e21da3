"""The committed dockerfiles/ are exactly what the code renders; writes touch only changed files."""

from __future__ import annotations

import os
import re
from pathlib import Path

from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.render import matrix
from imagegen.render.matrix import BAKE_FILE, render_matrix, stale_files, standard_entries, write_matrix

REPO = Path(__file__).resolve().parents[4]
DOCKERFILES = REPO / "dockerfiles"


def test_committed_dockerfiles_match_the_code() -> None:
    stale = stale_files(DOCKERFILES)
    assert not stale, f"out of date: {stale}; run `imagegen matrix` and commit dockerfiles/"


def test_matrix_covers_the_standard_targets_with_every_op() -> None:
    entries = standard_entries()
    assert [e.folder for e in entries] == [
        ("cpu" if a == "cpu" else f"{a}{v}") + ("-arm64" if p == "linux/arm64" else "")
        for a, v, p in matrix.STANDARD_MATRIX
    ]
    files = render_matrix()
    assert set(files) == {f"{e.folder}/Dockerfile" for e in entries} | {BAKE_FILE}
    bake = files[BAKE_FILE]
    for entry in entries:
        assert f'target "{entry.bake_target}" {{' in bake
        assert f'dockerfile = "dockerfiles/{entry.folder}/Dockerfile"' in bake
        assert f'tags       = ["{entry.spec.tag}"]' in bake
        assert "." not in entry.bake_target
        # The bases are build arguments (ARG BASE_DEVEL / BASE_RUNTIME), switched without re-rendering.
        assert f'BASE_DEVEL = "{entry.spec.base_devel}"' in bake
        assert f'BASE_RUNTIME = "{entry.spec.base_runtime}"' in bake
    # The docker driver cannot export a cache: export is asked for with CACHE_DIR only.
    assert bake.count('cache-to   = CACHE_DIR == "" ? [] :') == len(entries)
    assert not re.search(r"cache-to\s*=\s*\[", bake)


def test_write_matrix_writes_only_changed_files(tmp_path: Path) -> None:
    written, unchanged = write_matrix(tmp_path)
    assert len(written) == len(render_matrix()) and not unchanged
    cpu = tmp_path / "cpu" / "Dockerfile"
    os.utime(cpu, (1_000_000, 1_000_000))
    (tmp_path / BAKE_FILE).write_text("edited by hand\n")
    written, unchanged = write_matrix(tmp_path)
    assert written == [tmp_path / BAKE_FILE]
    assert cpu.stat().st_mtime == 1_000_000  # untouched
    assert not stale_files(tmp_path)


def test_matrix_command_check_mode(tmp_path: Path) -> None:
    runner = CliRunner()
    stale = runner.invoke(app, ["matrix", "--out", str(tmp_path), "--check"])
    assert stale.exit_code == 1 and "out of date" in stale.stderr
    assert runner.invoke(app, ["matrix", "--out", str(tmp_path)]).exit_code == 0
    fresh = runner.invoke(app, ["matrix", "--out", str(tmp_path), "--check", "--json"])
    assert fresh.exit_code == 0 and '"stale": []' in fresh.stdout
