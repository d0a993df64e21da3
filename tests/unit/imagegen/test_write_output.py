"""Writing output (`dockerfile -o`, `matrix --out`): bad paths are exit 2 with a hint, nothing is
left half-written, `-o -` is stdout, and files get the modes any tool would give them."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from imagegen import files
from imagegen.errors import BadInputError
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import render
from tests.unit.contract import DOCKERFILE, assert_json_error, assert_reported, invoke


def test_dockerfile_output_to_a_directory_is_bad_input(workdir: Path) -> None:
    (workdir / "out").mkdir()
    assert_reported(invoke([*DOCKERFILE, "-o", "out"]), fragment="is a directory")
    assert [p.name for p in (workdir / "out").iterdir()] == []


def test_dockerfile_output_in_a_missing_folder_is_bad_input(workdir: Path) -> None:
    result = invoke([*DOCKERFILE, "-o", "no/such/Dockerfile"])
    assert_reported(result, fragment="does not exist")
    assert "mkdir -p no/such" in result.stderr
    assert list(workdir.iterdir()) == []  # no folder made either


def test_dockerfile_output_below_a_file_is_bad_input(workdir: Path) -> None:
    (workdir / "plain").write_text("x")
    assert_reported(invoke([*DOCKERFILE, "-o", "plain/Dockerfile"]), fragment="not a folder")
    assert (workdir / "plain").read_text() == "x"


@pytest.mark.skipif(
    not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs (refuses new files, even to root)"
)
def test_dockerfile_output_in_an_unwritable_folder_is_bad_input() -> None:
    # sysfs refuses to create files for any user, so this holds when the tests run as root too.
    assert_reported(invoke([*DOCKERFILE, "-o", "/sys/Dockerfile"]), fragment="/sys/Dockerfile")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to a read-only folder")
def test_dockerfile_output_in_a_read_only_folder_is_bad_input(workdir: Path) -> None:
    locked = workdir / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert_reported(invoke([*DOCKERFILE, "-o", "locked/Dockerfile"]), fragment="permission denied")
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_dockerfile_output_dash_is_stdout(workdir: Path) -> None:
    result = invoke([*DOCKERFILE, "-o", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout == render(build_spec(SpecInput(cpu=True, ops="cpu_adam")))
    assert list(workdir.iterdir()) == []  # no file named '-'


def test_a_new_file_gets_the_usual_mode(workdir: Path, umask: None) -> None:
    for mask, expected in ((0o022, 0o644), (0o027, 0o640)):
        os.umask(mask)
        name = f"Dockerfile.{mask:o}"
        assert invoke([*DOCKERFILE, "-o", name]).exit_code == 0
        assert stat.S_IMODE((workdir / name).stat().st_mode) == expected


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o755])
def test_an_overwritten_file_keeps_its_mode(workdir: Path, umask: None, mode: int) -> None:
    target = workdir / "Dockerfile"
    target.write_text("old\n")
    target.chmod(mode)
    assert invoke([*DOCKERFILE, "-o", "Dockerfile"]).exit_code == 0
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert target.read_text().startswith("# imagegen ops image: cpu")
    assert [p.name for p in workdir.iterdir()] == ["Dockerfile"]  # no temporary file left


def test_output_through_a_symlink_keeps_the_link(workdir: Path) -> None:
    (workdir / "real").write_text("old\n")
    (workdir / "link").symlink_to("real")
    assert invoke([*DOCKERFILE, "-o", "link"]).exit_code == 0
    assert (workdir / "link").is_symlink()
    assert (workdir / "real").read_text().startswith("# imagegen ops image: cpu")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = workdir / "Dockerfile"
    target.write_text("old\n")

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    assert_reported(invoke([*DOCKERFILE, "-o", "Dockerfile"]), fragment="no space left")
    assert target.read_text() == "old\n"
    assert [p.name for p in workdir.iterdir()] == ["Dockerfile"]


def test_write_if_changed_on_a_directory_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="is a directory"):
        files.write_if_changed(tmp_path, "text")


@pytest.mark.parametrize("check", [False, True])
def test_matrix_out_naming_a_file_is_bad_input(workdir: Path, check: bool) -> None:
    (workdir / "plain").write_text("x")
    args = ["matrix", "--out", "plain", *(["--check"] if check else [])]
    assert_reported(invoke(args), fragment="plain is a file")
    assert_json_error(invoke([*args, "--json"]), fragment="plain is a file")
    assert (workdir / "plain").read_text() == "x"


def test_matrix_out_below_a_file_is_bad_input(workdir: Path) -> None:
    (workdir / "plain").write_text("x")
    assert_json_error(
        invoke(["matrix", "--out", "plain/dockerfiles", "--json"]), fragment="a file is in the way"
    )
