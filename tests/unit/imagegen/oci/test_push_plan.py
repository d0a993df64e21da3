"""The push rule, in the one place it is decided: where a run pushes (nowhere, its tag, under a
registry, an index of platforms), nothing pushed unverified, every reference one a registry takes;
each refused as bad input (exit 2) before any work, by the commands too."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.oci.push_plan import NO_PUSH, PushPlan, check_push_registry, remote_tag
from imagegen.runs import bake as bake_lib

runner = CliRunner()
TAG = "imagegen:cpu-torch2.13.0-py3.11-d62ff252"


def test_each_kind_says_what_finish_pushes() -> None:
    assert not NO_PUSH.pushes and NO_PUSH.reference(TAG) is None
    assert PushPlan.for_build(push=False, verify=False, tag=None) == NO_PUSH
    own = PushPlan.for_build(push=True, verify=True, tag=None)
    assert own.kind == "tag" and own.reference("r.example/ml/ops:1") == "r.example/ml/ops:1"
    index = PushPlan.for_build(push=True, verify=True, tag="127.0.0.1:5000/ops/cpu:1", platforms=2)
    # An index's platforms are pushed together once all passed, never by finish one at a time.
    assert (
        index.kind == "index" and index.target == "127.0.0.1:5000/ops/cpu:1" and index.reference(TAG) is None
    )
    bake = PushPlan.for_bake("127.0.0.1:5000/", verify=True, tags=[TAG])
    assert bake.reference(TAG) == f"127.0.0.1:5000/{TAG}" and PushPlan.for_bake(None, verify=False) == NO_PUSH
    assert remote_tag("registry.example/team/", "imagegen:cpu-x") == "registry.example/team/imagegen:cpu-x"


@pytest.mark.parametrize(
    "make",
    [
        lambda: PushPlan.for_build(push=True, verify=False, tag=None),
        lambda: PushPlan.for_build(push=True, verify=False, tag="127.0.0.1:5000/o/c:1", platforms=2),
        lambda: PushPlan.for_bake("127.0.0.1:5000", verify=False),
    ],
)
def test_nothing_is_pushed_unverified(make: object) -> None:
    with pytest.raises(BadInputError, match="only after verification"):
        make()  # type: ignore[operator]


@pytest.mark.parametrize("tag", [None, "ops/cpu:1", "imagegen:cpu", "127.0.0.1:5000/Ops:1"])
def test_several_platforms_push_under_a_registry_tag(tag: str | None) -> None:
    with pytest.raises(BadInputError):
        PushPlan.for_build(push=True, verify=True, tag=tag, platforms=2)


@pytest.mark.parametrize(
    "registry", ["127.0.0.1:5000", "registry.example/team/", "localhost:5000/ml/ops", "ops"]
)
def test_registries_that_take_the_images(registry: str) -> None:
    check_push_registry(registry, [TAG])
    PushPlan.for_bake(registry, verify=True).check_references([TAG])


@pytest.mark.parametrize(
    ("registry", "says"),
    [
        ("", "it is empty"),
        ("/", "it is empty"),
        ("http://127.0.0.1:5000", "scheme"),
        ("127.0.0.1:5000/ml:v1", "ends in a tag (ml:v1)"),
        ("127.0.0.1:5000/ml@sha256:" + "a" * 64, "digest"),
        ("registry.example/Team", "upper-case"),
        ("registry example", "white space"),
        ("registry.example/" + "a" * 240, "characters"),
    ],
)
def test_a_malformed_registry_is_bad_input(registry: str, says: str) -> None:
    with pytest.raises(BadInputError) as caught:
        PushPlan.for_bake(registry, verify=True).check_references([TAG])
    assert says in caught.value.message and "HOST[:PORT][/PATH]" in (caught.value.hint or "")


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the bake gets as far as asking for an engine (or anything after it)."""
    monkeypatch.setattr(bake_lib, "detect_engine", lambda env: pytest.fail("the engine was asked"))


@pytest.mark.parametrize("registry", ["http://127.0.0.1:5000", "127.0.0.1:5000/ml:v1", "Registry.example/ML"])
def test_bake_refuses_a_malformed_registry_before_anything_builds(registry: str, no_build: None) -> None:
    result = runner.invoke(app, ["bake", "cpu", "--push", registry, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith("--push ") and error["hint"]


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--cpu", "--ops", "cpu_adam", "--push", "--no-verify"],
        ["build", "--cpu", "--ops", "cpu_adam", "--platform", "linux/amd64,linux/arm64", "--push"],
        ["bake", "cpu", "--push", "127.0.0.1:5000", "--no-verify"],
    ],
)
def test_the_commands_refuse_a_push_the_rule_refuses(argv: list[str], no_build: None) -> None:
    result = runner.invoke(app, [*argv, "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["message"].startswith("--push")
