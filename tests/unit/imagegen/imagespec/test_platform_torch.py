"""Each platform's default torch is one whose build for that target exists (the CPU on arm64:
2.10.0, the newest aarch64 CPU build), for `build`, several-platform `build`, `bake` and
`make images` alike; a newer pin there is bad input before anything builds; and the devel
stage's torch check is bounded, naming the step and the platform when it runs past the limit."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.engine.build_log import describe_failure
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec, spec_input
from imagegen.render import dockerfile as render_lib
from imagegen.render.dockerfile import render
from tests._script_module import load_script

REPO = Path(__file__).resolve().parents[4]
runner = CliRunner()


def spec(env: dict[str, str] | None = None, **changes: Any) -> ImageSpec:
    fields: dict[str, Any] = {"ops": "all", "cpu": True, **changes}
    return build_spec(spec_input(env or {}, **fields))


# ---------------------------------------------------------------- the catalog's data


def test_the_cpu_default_on_arm64_is_the_newest_aarch64_cpu_build() -> None:
    cpu = catalog.CPU_TARGET
    assert cpu.default_torch_for(catalog.AMD64) == cpu.default_torch == "2.13.0"
    assert cpu.default_torch_for(catalog.ARM64) == "2.10.0"
    arm64 = cpu.torch_versions(catalog.ARM64)
    assert arm64[0] == "2.0.0" and arm64[-1] == "2.10.0"
    assert cpu.torch_range("2.11.0", catalog.ARM64) is None and cpu.torch_range("2.11.0") is not None


@pytest.mark.parametrize(
    ("target", "platform"),
    [
        (t, p)
        for group in ("cpu", "cuda", "rocm")
        for t in catalog.targets(group).values()
        for p in t.platforms
    ],  # type: ignore[arg-type]
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_every_platforms_default_torch_has_a_build_there(target: catalog.Target, platform: str) -> None:
    default = target.default_torch_for(platform)
    assert default in target.torch_versions(platform), f"{target.name} on {platform}: {default}"
    # And the spec resolves it: the image for that platform pins exactly that release.
    version = target.version
    resolved = build_spec(
        SpecInput(
            ops="all",
            cpu=target.accelerator == "cpu",
            cuda=version if target.accelerator == "cuda" else None,
            rocm=version if target.accelerator == "rocm" else None,
            platform=platform,
        ),
    )
    assert resolved.torch == default


def test_cuda_targets_on_arm64_keep_their_cuda_builds() -> None:
    # torch's aarch64 CUDA (sbsa) wheels follow the amd64 ones: no limit of their own.
    for version, target in catalog.CUDA_TARGETS.items():
        if catalog.ARM64 in target.platforms:
            assert target.platform_limit(catalog.ARM64) is None
            assert spec(cpu=False, cuda=version, platform="linux/arm64").torch == target.default_torch


# ---------------------------------------------------------------- resolving a spec


def test_an_arm64_cpu_image_gets_2_10_by_default() -> None:
    s = spec(platform="linux/arm64")
    assert s.torch == "2.10.0" and s.torch_requirement == "torch==2.10.0"
    assert s.tag.startswith("imagegen:cpu-arm64-torch2.10.0-py3.11-")
    assert spec().torch == "2.13.0"  # amd64 unchanged


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_newer_pin_on_arm64_is_bad_input_naming_the_way_out(how: str) -> None:
    with pytest.raises(BadInputError) as caught:
        if how == "flag":
            spec(platform="linux/arm64", torch="2.13")
        else:
            spec({"IMAGEGEN_TORCH": "2.11.0"}, platform="linux/arm64")
    assert "no cpu build for linux/arm64" in caught.value.message
    assert "--platform-torch linux/arm64=2.10.0" in (caught.value.hint or "")
    assert "2.0.0 to 2.10.0" in (caught.value.hint or "")


def test_an_own_index_is_trusted_with_a_warning_naming_the_platform() -> None:
    s = spec(platform="linux/arm64", torch="2.13.0", torch_index="https://mirror.example/simple")
    assert s.torch == "2.13.0"
    assert any("cpu on linux/arm64" in warning for warning in s.warnings)


def test_an_older_pin_on_arm64_and_any_on_amd64_stay_as_they_were() -> None:
    assert spec(platform="linux/arm64", torch="2.9").torch == "2.9.1"
    assert spec(torch="2.15").torch == "2.15.0"


# ---------------------------------------------------------------- the commands


def test_dockerfile_for_arm64_pins_2_10() -> None:
    result = runner.invoke(app, ["dockerfile", "--cpu", "--ops", "cpu_adam", "--platform", "linux/arm64"])
    assert result.exit_code == 0, result.output
    assert '"torch==2.10.0"' in result.stdout


def test_a_build_of_two_platforms_gives_each_its_own_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ImageSpec] = []

    def fake_build_platforms(specs: list[ImageSpec], *_: Any, **__: Any) -> Any:
        seen.extend(specs)
        raise BadInputError("stop here", hint="the test has what it wants")

    monkeypatch.setattr("imagegen.commands.build.multiarch.build_platforms", fake_build_platforms)
    args = ["build", "--cpu", "--ops", "cpu_adam", "--platform", "linux/amd64,linux/arm64", "--json"]
    result = runner.invoke(app, args)
    assert json.loads(result.stdout)["error"]["message"] == "stop here"
    assert {s.platform: s.torch for s in seen} == {"linux/amd64": "2.13.0", "linux/arm64": "2.10.0"}


def test_a_build_of_two_platforms_with_one_torch_too_new_for_arm64_is_exit_2() -> None:
    args = ["build", "--cpu", "--ops", "cpu_adam", "--platform", "linux/amd64,linux/arm64", "--torch", "2.13"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 2, result.output
    assert "linux/arm64" in json.loads(result.stdout)["error"]["message"]


def test_bake_gives_each_target_its_platforms_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, ImageSpec] = {}

    def fake_bake(requests: Any, *_: Any, **__: Any) -> Any:
        seen.update({r.name: r.spec for r in requests})
        raise BadInputError("stop here")

    monkeypatch.setattr("imagegen.commands.bake.bake", fake_bake)
    result = runner.invoke(app, ["bake", "cpu", "cpu-arm64", "--standins", "--json"])
    assert json.loads(result.stdout)["error"]["message"] == "stop here"
    assert seen["cpu"].torch == "2.13.0" and seen["cpu-arm64"].torch == "2.10.0"


def test_bake_with_a_torch_arm64_has_no_build_of_is_exit_2_before_the_bake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("imagegen.commands.bake.bake", lambda *a, **k: pytest.fail("baked"))
    result = runner.invoke(app, ["bake", "cpu", "cpu-arm64", "--torch", "2.13.0", "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "linux/arm64" in error["message"] and "--platform-torch linux/arm64=2.10.0" in error["hint"]


def test_make_images_reads_the_same_default() -> None:
    images = load_script(REPO / "scripts" / "images.py", "images")
    assert catalog.CPU_TARGET.default_torch_for(catalog.ARM64) == images.ARM64_TORCH


# ---------------------------------------------------------------- the bounded torch check


def _check_script(text: str) -> str:
    """The devel stage's torch check as the RUN line's shell runs it (its two lines, the `&&` off)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" && { timeout "))
    first, second = lines[start], lines[start + 1]
    return first.removeprefix(" && ") + "\n" + second  # the backslash continues the line


def _run_check(tmp_path: Path, script: str, python_body: str, limit: str) -> subprocess.CompletedProcess[str]:
    """Run the check with a stand-in `python` first on PATH, as the devel stage's venv has it."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{python_body}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "TORCH_CHECK_TIMEOUT": limit}
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("buildkit", [True, False])
def test_the_torch_check_is_bounded_by_a_build_argument(buildkit: bool) -> None:
    # Bounded where torch is imported under emulation: arm64 built on arm64's platform (or classic).
    text = render(spec(platform="linux/arm64", build_platform="linux/arm64", buildkit=buildkit))
    arg = f"ARG {render_lib.TORCH_CHECK_TIMEOUT_ARG}={render_lib.TORCH_CHECK_TIMEOUT_S}"
    devel = text[: text.index(" AS build")]
    assert arg in devel and devel.index(arg) < devel.index("timeout --kill-after=")
    assert '"${TORCH_CHECK_TIMEOUT}" python -c ' in _check_script(text)


def test_a_check_past_its_limit_stops_naming_the_step_and_the_platform(tmp_path: Path) -> None:
    script = _check_script(render(spec(platform="linux/arm64", build_platform="linux/arm64")))
    hung = _run_check(tmp_path, script, "exec sleep 30", "0.3")
    assert hung.returncode == 124
    assert "the devel stage's torch check (import torch) gave no answer within 0.3 s on linux/arm64" in (
        hung.stderr
    )
    assert "torch==2.10.0" in hung.stderr and "--build-arg TORCH_CHECK_TIMEOUT=SECONDS" in hung.stderr
    # A check that answers in time keeps its own outcome, and says nothing of a limit.
    wrong = _run_check(
        tmp_path, script, 'echo "imagegen: pip installed torch 2.13.0, a CUDA build" >&2; exit 1', "5"
    )
    assert wrong.returncode == 1 and "gave no answer" not in wrong.stderr
    fine = _run_check(tmp_path, script, "exit 0", "5")
    assert fine.returncode == 0 and fine.stderr == ""


def test_a_cross_build_bounds_its_runtime_check_not_its_devel_one() -> None:
    # The devel stage reads the target's torch/version.py natively: nothing there runs under
    # emulation. Its runtime stage imports torch under emulation, bounded the same way.
    text = render(spec(platform="linux/arm64"))
    devel, runtime = text.split(" AS runtime")
    assert "TORCH_CHECK_TIMEOUT" not in devel and "timeout --kill-after" not in devel
    assert 'runpy.run_path("/opt/venv/lib/python3.11/site-packages/torch/version.py")' in devel
    assert (
        "ARG TORCH_CHECK_TIMEOUT=600" in runtime
        and 'timeout --kill-after=30 "${TORCH_CHECK_TIMEOUT}"' in runtime
    )
    assert "the runtime stage's check of the ops (import torch) gave no answer" in runtime


def test_a_cross_builds_check_past_its_limit_stops_naming_the_step(tmp_path: Path) -> None:
    text = render(spec(platform="linux/arm64", bytecode="none"))
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(' && { [ "${CHECK_OPS}" = 0 ]'))
    script = lines[start].removeprefix(" && ") + "\n" + lines[start + 1]
    hung = _run_check(tmp_path, script, "exec sleep 30", "0.3")
    assert hung.returncode == 124 and "the runtime stage's check of the ops" in hung.stderr
    env = {**os.environ, "CHECK_OPS": "0", "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    skipped = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert skipped.returncode == 0  # imagegen build's sealed verification checks instead


def test_the_message_is_safe_in_its_double_quoted_shell_word() -> None:
    for s in (spec(), spec(platform="linux/arm64"), spec(cpu=False, cuda="13.0", platform="linux/arm64")):
        message = render_lib.torch_check_timeout_message(s)
        assert not set('"`\\!') & set(message)
        assert message.count("$") == 1 and "${TORCH_CHECK_TIMEOUT}" in message
        assert s.platform in message


def test_a_build_log_with_the_timeout_fails_with_that_line() -> None:
    s = spec(platform="linux/arm64", build_platform="linux/arm64")
    said = render_lib.torch_check_timeout_message(s).replace("${TORCH_CHECK_TIMEOUT}", "600")
    log = [
        "#9 [devel 4/4] RUN --mount=type=cache,target=/root/.cache/pip     pip install setuptools",
        "#9 41.2 Successfully installed torch-2.13.0",
        f"#9 641.9 {said}",
        "#9 ERROR: executor failed running [/bin/bash -o pipefail -c pip install]: exit code: 124",
    ]
    failure = describe_failure(log, "buildx", {}, s.tag)
    assert failure.message.startswith(f"building {s.tag} failed: the devel stage's torch check")
    assert "within 600 s on linux/arm64" in failure.message
    assert "devel 4/4" in (failure.hint or "")
