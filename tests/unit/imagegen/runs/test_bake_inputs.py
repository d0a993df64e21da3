"""`imagegen bake` judges every input it can before anything builds: the registry of --push, the
folder of --bake-file, the platforms --platform-torch / --platform-wheelhouse name, the stand-ins
of a --standins bake (naming the command that makes them). Every target keeps its ops, cpu-arm64's
async_io too (cross-compiled; its self-test is reported not checkable under emulation)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.engine import Engine
from imagegen.errors import BadInputError
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec
from imagegen.runs import bake as bake_lib
from imagegen.runs.bake import bake
from imagegen.runs.bake_inputs import (
    BakeRequest,
    check_bake_file,
    missing_standins,
)

runner = CliRunner()


def _spec(**changes: Any) -> ImageSpec:
    return build_spec(SpecInput(**{"cpu": True, "ops": "all", **changes}))


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the bake gets as far as asking for an engine (or anything after it)."""
    monkeypatch.setattr(bake_lib, "detect_engine", lambda env: pytest.fail("the engine was asked"))


# ---------------------------------------------------------------- --bake-file FILE


def test_a_bake_file_in_a_folder_that_is_there_passes(tmp_path: Path) -> None:
    check_bake_file(tmp_path / "bake.hcl")
    (tmp_path / "old.hcl").write_text("kept\n")
    check_bake_file(tmp_path / "old.hcl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.hcl"]  # nothing left behind
    assert (tmp_path / "old.hcl").read_text() == "kept\n"
    check_bake_file(Path(os.devnull))  # written in place, as write_atomic does


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("missing/bake.hcl", "does not exist"),
        ("file/bake.hcl", "a file, not a folder"),
        ("", "is a directory"),
        ("x" * 300, "file name too long"),
    ],
)
def test_a_bake_file_that_cannot_be_written_is_bad_input(tmp_path: Path, where: str, says: str) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(BadInputError) as caught:
        check_bake_file(tmp_path / where if where else tmp_path)
    assert says in caught.value.message and caught.value.hint


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_a_bake_file_in_a_read_only_folder_is_bad_input(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(BadInputError, match="permission denied"):
            check_bake_file(tmp_path / "bake.hcl")
    finally:
        tmp_path.chmod(0o700)


def test_bake_refuses_a_bake_file_in_a_missing_folder_before_anything_builds(
    tmp_path: Path, no_build: None
) -> None:
    result = runner.invoke(app, ["bake", "cpu", "--bake-file", str(tmp_path / "no" / "bake.hcl"), "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "does not exist" in error["message"] and "mkdir -p" in error["hint"]


# ---------------------------------------------------------------- --platform-torch / -wheelhouse


@pytest.mark.parametrize(
    "option", [["--platform-torch", "linux/arm64=2.10.0"], ["--platform-wheelhouse", "linux/arm64=/tmp"]]
)
def test_a_platform_option_for_no_target_of_the_bake_is_exit_2(option: list[str], no_build: None) -> None:
    result = runner.invoke(app, ["bake", "cpu", *option, "--json"])
    assert result.exit_code == 2, result.output
    assert "none of the targets is for" in json.loads(result.stdout)["error"]["message"]


# ---------------------------------------------------------------- the ops of each target


def test_every_target_is_baked_with_all_its_ops_async_io_too(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, BakeRequest] = {}

    def fake_bake(requests: Sequence[BakeRequest], *_: Any, **__: Any) -> Any:
        seen.update({r.name: r for r in requests})
        raise BadInputError("stop here")

    monkeypatch.setattr("imagegen.commands.bake.bake", fake_bake)
    runner.invoke(app, ["bake", "cpu", "cpu-arm64"])
    # cpu-arm64 is cross-compiled and keeps async_io on any builder: under emulation its
    # self-test is reported not checkable, not failed.
    for name, platform in (("cpu", "linux/amd64"), ("cpu-arm64", "linux/arm64")):
        spec = seen[name].spec
        assert spec.platform == platform
        assert spec.ops == ("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io")
    seen.clear()
    runner.invoke(app, ["bake", "cpu-arm64", "--ops", "cpu_adam,async_io"])
    assert seen["cpu-arm64"].spec.ops == ("cpu_adam", "async_io")


def test_a_cross_targets_own_torch_comes_from_the_wheelhouse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, BakeRequest] = {}

    def fake_bake(requests: Sequence[BakeRequest], *_: Any, **__: Any) -> Any:
        seen.update({r.name: r for r in requests})
        raise BadInputError("stop here")

    monkeypatch.setattr("imagegen.commands.bake.bake", fake_bake)
    amd64, arm64 = tmp_path / "amd64", tmp_path / "arm64"
    amd64.mkdir()
    arm64.mkdir()
    args = [
        "bake",
        "cpu",
        "cpu-arm64",
        "--wheelhouse",
        str(amd64),
        "--platform-wheelhouse",
        f"linux/arm64={arm64}",
    ]
    runner.invoke(app, args)
    cross = seen["cpu-arm64"].spec
    assert cross.cross and cross.wheelhouses == (arm64, amd64)
    assert seen["cpu"].spec.wheelhouses == (amd64,)


# ---------------------------------------------------------------- the stand-ins


def test_missing_standins_name_the_command_that_makes_them() -> None:
    specs = {"cpu": _spec(standins=True), "cpu-arm64": _spec(standins=True, platform="linux/arm64")}
    asked: list[Sequence[str]] = []

    def present(refs: Sequence[str]) -> dict[str, bool]:
        asked.append(refs)
        return {ref: not ref.endswith("-arm64") for ref in refs}

    with pytest.raises(BadInputError) as caught:
        missing_standins(specs, present)
    # cpu-arm64 is cross-compiled: its devel stage runs on the amd64 stand-in, which is present.
    assert "cpu-arm64 (imagegen-standin/python:3.11-runtime-arm64)" in caught.value.message
    assert "`imagegen standins --platform linux/arm64`" in (caught.value.hint or "")
    assert "leave cpu-arm64 out" in (caught.value.hint or "")
    assert len(asked) == 1 and len(asked[0]) == 3  # one question for every base (amd64's devel is shared)
    missing_standins(specs, lambda refs: dict.fromkeys(refs, True))
    missing_standins(specs, lambda refs: None)  # the engine cannot tell: not judged here
    # Bases that are not stand-ins are not asked about (a registry may still have them).
    missing_standins({"cpu": _spec()}, lambda refs: pytest.fail(f"asked about {refs}"))


def test_bake_refuses_missing_standins_before_staging_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bake_lib, "detect_engine", lambda env: Engine("buildx", "/usr/bin/docker", "20.10"))
    monkeypatch.setattr(bake_lib, "inspect_builder", lambda *a: "docker")
    monkeypatch.setattr(bake_lib, "local_images", lambda refs, env: dict.fromkeys(refs, False))
    monkeypatch.setattr(bake_lib, "_staged", lambda *a: pytest.fail("staged"))
    specs = [
        _spec(standins=True, ops="cpu_adam"),
        _spec(standins=True, ops="cpu_adam", platform="linux/arm64"),
    ]
    with pytest.raises(BadInputError) as caught:
        bake([BakeRequest("cpu", specs[0]), BakeRequest("cpu-arm64", specs[1])])
    assert "`imagegen standins` and `imagegen standins --platform linux/arm64`" in (caught.value.hint or "")
    # Another driver builds elsewhere, from what its registry has: nothing judged here.
    monkeypatch.setattr(bake_lib, "inspect_builder", lambda *a: "remote")

    def reached(*_: Any) -> None:
        raise _Reached

    monkeypatch.setattr(bake_lib, "check_host_network", reached)
    with pytest.raises(_Reached):
        bake([BakeRequest("cpu", specs[0])])


class _Reached(Exception):
    """The bake got past the checks under test."""
