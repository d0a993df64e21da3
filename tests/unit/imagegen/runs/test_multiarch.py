"""Several platforms in one build: the platform list, each platform's tag, and the push's bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.imagespec.checks import platform_list
from imagegen.registry.distribution import names_registry
from imagegen.runs.multiarch import platform_tag


def test_platform_lists_and_tags() -> None:
    assert platform_list("linux/amd64, linux/arm64") == ("linux/amd64", "linux/arm64")
    for bad in ("linux/amd64,", "linux/amd64,linux/amd64", "linux/amd64,arm"):
        with pytest.raises(BadInputError):
            platform_list(bad)
    assert platform_tag("127.0.0.1:5000/ops/cpu:1", "linux/arm64") == "127.0.0.1:5000/ops/cpu:1-arm64"
    assert platform_tag("127.0.0.1:5000/ops/cpu", "linux/amd64") == "127.0.0.1:5000/ops/cpu:latest-amd64"
    assert names_registry("127.0.0.1:5000/ops/cpu:1") and not names_registry("ops/cpu:1")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--platform", "linux/amd64,,linux/arm64"], "empty item"),
        (["--platform", "linux/amd64,linux/amd64"], "twice"),
        (["--platform", "linux/amd64,linux/arm64", "--push"], "--tag REGISTRY"),
        (["--platform", "linux/amd64,linux/arm64", "--push", "--tag", "ops/cpu:1"], "--tag REGISTRY"),
        (["--platform-torch", "linux/arm64=2.10.0"], "not for"),
        (["--platform", "linux/amd64,linux/arm64", "--platform-torch", "linux/arm64"], "OS/ARCH=VALUE"),
        (["--platform", "linux/amd64,linux/arm64", "--platform-wheelhouse", "arm=/w"], "not a platform"),
    ],
)
def test_bad_platform_options_exit_2_before_any_work(argv: list[str], message: str) -> None:
    # No engine is asked (none is needed to refuse these), and nothing is built.
    result = CliRunner().invoke(app, ["build", "--cpu", "--ops", "cpu_adam", *argv, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert message in error["message"] and error["exit_code"] == 2
