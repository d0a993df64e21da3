"""Inputs refused before anything parses or builds them, each as exit 2 with one message and a hint
(imagegen/imagespec/given_values.py, imagegen/commands/_options.py, imagegen/runs/bake_inputs.py):

- a version of thousands of digits (``--torch``, ``IMAGEGEN_TORCH``, ``--platform-torch``,
  ``--cuda``, ``--rocm``, ``--python``, an ``--arch`` item), which Python's int-string conversion
  limit (4300 digits) would otherwise turn into a traceback;
- ``--build-platform`` naming another platform than the image's with the classic builder, which
  would ignore it without a word;
- the same platform twice in ``--platform-torch`` / ``--platform-wheelhouse``;
- a ``--bake-file`` that is a block device or a socket, refused before the bake as ``-o`` refuses
  them when writing.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from imagegen.cli import app
from imagegen.runs import bake as bake_lib
from tests.unit.contract import assert_json_error, assert_reported

LONG = "1" * 5000
CPU = ["--cpu", "--ops", "cpu_adam"]
TWO_PLATFORMS = ["--platform", "linux/amd64,linux/arm64"]


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, args, env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200", **(env or {})})


@pytest.fixture(autouse=True)
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a command gets past its inputs to building anything."""
    for name in (
        "imagegen.commands.build.pipeline.build",
        "imagegen.commands.build.multiarch.build_platforms",
    ):
        monkeypatch.setattr(name, lambda *a, **k: pytest.fail("built"))
    monkeypatch.setattr(bake_lib, "detect_engine", lambda env: pytest.fail("the engine was asked"))


def _both_ways(args: list[str], fragment: str, env: dict[str, str] | None = None) -> str:
    """Exit 2 with one message and a hint, as text and (where the command takes --json) as the
    --json error; the text shown."""
    result = _invoke(args, env)
    assert_reported(result, code=2, fragment=fragment)
    if args[0] != "dockerfile":
        assert_json_error(_invoke([*args, "--json"], env), code=2, fragment=fragment)
    return result.stderr


# ------------------------------------------------------------------ a version of 5000 digits


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        pytest.param(["dockerfile", *CPU, "--torch", f"2.{LONG}"], {}, "not a torch release", id="torch"),
        pytest.param(["dockerfile", *CPU, "--torch", LONG], {}, "not a torch release", id="torch-major"),
        pytest.param(["dockerfile", *CPU], {"IMAGEGEN_TORCH": f"2.{LONG}"}, "torch release", id="env-torch"),
        pytest.param(
            ["build", *CPU, *TWO_PLATFORMS, "--platform-torch", f"linux/arm64=2.{LONG}"],
            {},
            "not a torch release",
            id="platform-torch",
        ),
        pytest.param(["bake", "cpu", "--torch", f"2.{LONG}"], {}, "not a torch release", id="bake-torch"),
        pytest.param(["dockerfile", "--ops", "all", "--cuda", f"12.{LONG}"], {}, "CUDA version", id="cuda"),
        pytest.param(
            ["dockerfile", "--ops", "all", "--cuda", f"{LONG}.1"], {}, "CUDA version", id="cuda-major"
        ),
        pytest.param(["dockerfile", "--ops", "all", "--rocm", f"6.{LONG}"], {}, "ROCm version", id="rocm"),
        pytest.param(["dockerfile", *CPU, "--python", f"3.{LONG}"], {}, "Python version", id="python"),
        pytest.param(
            ["dockerfile", "--ops", "all", "--cuda", "12.4", "--arch", f"8.0;{LONG}.0"],
            {},
            "malformed CUDA arch",
            id="arch",
        ),
    ],
)
def test_a_version_of_thousands_of_digits_is_bad_input(
    args: list[str], env: dict[str, str], fragment: str
) -> None:
    shown = _both_ways(args, fragment, env)
    assert "characters" in shown and len(shown) < 600  # named by its start and length, not quoted whole


def test_a_version_of_a_usual_length_is_judged_as_before() -> None:
    assert_reported(_invoke(["dockerfile", *CPU, "--torch", "2.99"]), code=2, fragment="torch 2.99")
    assert _invoke(["dockerfile", *CPU, "--torch", "2.13"]).exit_code == 0


# ------------------------------------------------------------------ --build-platform without BuildKit

ARM64 = ["--platform", "linux/arm64"]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(
            ["dockerfile", *CPU, *ARM64, "--build-platform", "linux/amd64", "--no-buildkit"], {}, id="flags"
        ),
        pytest.param(
            ["build", *CPU, *ARM64, "--build-platform", "linux/amd64", "--no-buildkit"], {}, id="build"
        ),
        pytest.param(
            ["dockerfile", *CPU, "--build-platform", "linux/arm64", "--no-buildkit"],
            {},
            id="default-platform",
        ),
        pytest.param(
            ["dockerfile", *CPU, *ARM64],
            {"IMAGEGEN_BUILD_PLATFORM": "linux/amd64", "IMAGEGEN_BUILDKIT": "0"},
            id="variables",
        ),
        pytest.param(
            ["build", *CPU, *TWO_PLATFORMS, "--build-platform", "linux/amd64", "--no-buildkit"],
            {},
            id="two-platforms",
        ),
    ],
)
def test_build_platform_with_the_classic_builder_is_conflicting_flags(
    args: list[str], env: dict[str, str]
) -> None:
    shown = _both_ways(args, "--build-platform", env)
    assert "--no-buildkit" in shown and "hint: drop --no-buildkit" in shown


@pytest.mark.parametrize(
    "args",
    [
        [*ARM64, "--build-platform", "linux/amd64"],  # BuildKit: a cross build
        [*ARM64, "--build-platform", "linux/arm64", "--no-buildkit"],  # the image's own platform
        [*ARM64, "--no-buildkit"],  # no --build-platform: every stage on the image's
    ],
)
def test_build_platform_that_changes_nothing_or_with_buildkit_is_taken(args: list[str]) -> None:
    result = _invoke(["dockerfile", *CPU, *args])
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------ a platform twice


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            [
                "build",
                *CPU,
                *TWO_PLATFORMS,
                "--platform-torch",
                "linux/arm64=2.10.0",
                "--platform-torch",
                "linux/arm64=2.9.0",
            ],
            id="build-torch",
        ),
        pytest.param(
            [
                "build",
                *CPU,
                *TWO_PLATFORMS,
                "--platform-torch",
                "linux/arm64=2.10.0",
                "--platform-torch",
                "Linux/ARM64=2.10.0",
            ],
            id="build-same-value",
        ),
        pytest.param(
            [
                "bake",
                "cpu",
                "cpu-arm64",
                "--platform-torch",
                "linux/arm64=2.10.0",
                "--platform-torch",
                "linux/arm64=2.9.0",
            ],
            id="bake-torch",
        ),
        pytest.param(
            [
                "build",
                *CPU,
                *TWO_PLATFORMS,
                "--platform-wheelhouse",
                "linux/arm64=/a",
                "--platform-wheelhouse",
                "linux/arm64=/b",
            ],
            id="build-wheelhouse",
        ),
    ],
)
def test_the_same_platform_twice_is_bad_input_naming_it(args: list[str]) -> None:
    _both_ways(args, "names linux/arm64 twice")


# ------------------------------------------------------------------ --bake-file that is never written


@pytest.fixture
def block_device(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("making a block device node needs root")
    path = tmp_path / "loop"
    os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    yield path


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        yield path


@pytest.mark.parametrize(("node", "kind"), [("block_device", "a block device"), ("unix_socket", "a socket")])
def test_a_bake_file_that_is_a_block_device_or_a_socket_is_refused_before_the_bake(
    node: str, kind: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(node)
    args = ["bake", "cpu", "--bake-file", str(path)]
    _both_ways(args, kind)
    link = path.parent / "link.hcl"  # through a symbolic link too
    link.symlink_to(path)
    _both_ways(["bake", "cpu", "--bake-file", str(link)], kind)
    assert stat.S_IFMT(os.stat(path).st_mode) == stat.S_IFMT(os.lstat(path).st_mode)  # left as it was


def test_a_bake_file_on_a_character_device_still_passes_the_check() -> None:
    # /dev/null is written in place at the end: the bake goes on, to ask for the engine.
    with pytest.raises(pytest.fail.Exception, match="the engine was asked"):
        _invoke(["bake", "cpu", "--bake-file", os.devnull])
