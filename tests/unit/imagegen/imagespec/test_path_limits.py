"""Paths the file system cannot look up, named through the environment: a name longer than it
allows or a loop of symbolic links in DS_OP_SOURCES or IMAGEGEN_OP_SOURCES, in STANDIN_CA or in
GOOGLE_APPLICATION_CREDENTIALS, is bad input (exit 2) naming the variable's path, never an
OSError's traceback; with --json one `{"error": ...}` document, never nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagegen.errors import BadInputError
from imagegen.imagespec.compile_cache import key_file, parse

REPO = Path(__file__).resolve().parents[4]
LONG = "p" * 300  # longer than any file system's name limit


def _run(module: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "IMAGEGEN_DEBUG": "", "DOCKER_HOST": "tcp://127.0.0.1:9", **env},
    )  # fmt: skip


def _assert_bad_input(done: subprocess.CompletedProcess[str], fragment: str, as_json: bool) -> None:
    detail = done.stdout + done.stderr
    assert done.returncode == 2, detail
    assert "Traceback" not in detail, detail
    if as_json:
        error = json.loads(done.stdout)["error"]
        assert fragment in error["message"] and error["hint"] and error["exit_code"] == 2, error
    else:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and fragment in errors[0], detail
        assert "hint: " in done.stderr, detail


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    """A symbolic link that points at itself."""
    path = tmp_path / "loop"
    path.symlink_to(path)
    return path


# Each command with the variable it reads its op package folders from.
OP_SOURCE_READERS = [
    ("imagegen", ["ops"], "IMAGEGEN_OP_SOURCES"),
    ("imagegen", ["ops", "--json"], "IMAGEGEN_OP_SOURCES"),
    ("imagegen", ["dockerfile", "--cpu", "--ops", "cpu_adam"], "IMAGEGEN_OP_SOURCES"),
    ("imagegen", ["new-op", "acme_norm", "-o", "{tmp}/acme_ops"], "DS_OP_SOURCES"),  # names all ops
    ("op_builder", ["report"], "DS_OP_SOURCES"),
    ("op_builder", ["report", "--json"], "DS_OP_SOURCES"),
    ("op_builder", ["plan", "--json"], "DS_OP_SOURCES"),
]


@pytest.mark.parametrize(("module", "args", "variable"), OP_SOURCE_READERS)
@pytest.mark.parametrize("kind", ["long", "loop"])
def test_an_op_source_that_cannot_be_looked_up_is_bad_input(
    tmp_path: Path, loop: Path, module: str, args: list[str], variable: str, kind: str
) -> None:
    folder = str(tmp_path / LONG) if kind == "long" else str(loop)
    done = _run(module, [a.replace("{tmp}", str(tmp_path)) for a in args], {variable: folder})
    fragment = "file name too long" if kind == "long" else "symbolic link"
    _assert_bad_input(done, fragment, "--json" in args)
    assert not (tmp_path / "acme_ops").exists()


@pytest.mark.parametrize("kind", ["long", "loop"])
def test_standin_ca_that_cannot_be_looked_up_is_bad_input(tmp_path: Path, loop: Path, kind: str) -> None:
    named = str(tmp_path / LONG) if kind == "long" else str(loop)
    done = _run("imagegen", ["standins"], {"STANDIN_CA": named})
    _assert_bad_input(done, "STANDIN_CA", as_json=False)


@pytest.mark.parametrize("kind", ["long", "loop"])
def test_a_gcs_key_file_that_cannot_be_looked_up_is_bad_input(tmp_path: Path, loop: Path, kind: str) -> None:
    named = str(tmp_path / LONG) if kind == "long" else str(loop)
    with pytest.raises(BadInputError, match="GOOGLE_APPLICATION_CREDENTIALS") as caught:
        key_file(parse("gcs://bucket/prefix"), {"GOOGLE_APPLICATION_CREDENTIALS": named})
    assert caught.value.hint
