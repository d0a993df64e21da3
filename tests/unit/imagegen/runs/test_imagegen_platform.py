"""The platform axis: --platform / IMAGEGEN_PLATFORM, what the catalog refuses on arm64, tags,
labels, Grace arch lists, the torch pin, stand-ins, the matrix and the engine's command line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.engine import BuildResult, Engine
from imagegen.engine.backend import BuildRequest
from imagegen.engine.buildkit import cli_build_argv
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec, build_spec, spec_input
from imagegen.proof.size import SizeReport
from imagegen.render.dockerfile import labels, render
from imagegen.render.matrix import BAKE_FILE, render_matrix, standard_entries, write_matrix
from imagegen.runs import finish, pipeline
from imagegen.runs.run_choices import RunOptions

REPO = Path(__file__).resolve().parents[4]
runner = CliRunner()


def spec(env: dict[str, str] | None = None, **changes: Any) -> ImageSpec:
    fields: dict[str, Any] = {"ops": "all", **changes}
    if not any(k in fields for k in ("cuda", "rocm", "cpu")):
        fields["cpu"] = True
    return build_spec(spec_input(env or {}, **fields))


def label_map(s: ImageSpec) -> dict[str, str]:
    return {key: value.strip('"') for key, value in labels(s)}


# ---------------------------------------------------------------- the option and the cascade


def test_default_is_amd64_and_the_flag_beats_the_environment() -> None:
    assert spec().platform == "linux/amd64"
    assert spec({"IMAGEGEN_PLATFORM": "linux/arm64"}).platform == "linux/arm64"
    assert spec({"IMAGEGEN_PLATFORM": "linux/arm64"}, platform="linux/amd64").platform == "linux/amd64"
    assert spec(platform=" Linux/ARM64 ").platform == "linux/arm64"  # spacing and case forgiven


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("arm64", "did you mean linux/arm64?"),
        ("aarch64", "did you mean linux/arm64?"),
        ("x86_64", "did you mean linux/amd64?"),
        ("linux/s390x", "use linux/amd64 or linux/arm64"),
        ("windows/amd64", "use linux/amd64 or linux/arm64"),
    ],
)
def test_other_platforms_exit_2_with_a_hint(value: str, hint: str) -> None:
    result = runner.invoke(app, ["dockerfile", "--cpu", "--ops", "all", "--platform", value])
    assert result.exit_code == 2, result.output
    assert "is not a platform imagegen builds for" in result.stderr
    assert hint in result.stderr


@pytest.mark.parametrize(
    ("args", "message", "hint"),
    [
        (["--rocm", "6.2"], "rocm6.2 has no linux/arm64 build", "for linux/amd64"),
        (
            ["--cuda", "12.4"],
            "torch publishes aarch64 CUDA wheels from CUDA 12.6 on",
            "12.6, 12.8, 12.9, 13.0",
        ),
        (["--cuda", "11.8"], "cuda11.8 has no linux/arm64 build", "13.2"),
    ],
)
def test_combinations_without_arm64_wheels_exit_2(args: list[str], message: str, hint: str) -> None:
    result = runner.invoke(app, ["dockerfile", *args, "--ops", "all", "--platform", "linux/arm64"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and hint in result.stderr


def test_the_rule_for_arm64_cuda_is_the_catalog_s() -> None:
    # Documented rule: CUDA 12.6 and newer (torch's aarch64 sbsa wheels), the CPU, no ROCm.
    arm64 = [v for v, t in catalog.CUDA_TARGETS.items() if "linux/arm64" in t.platforms]
    assert arm64 == ["12.6", "12.8", "12.9", "13.0", "13.2", "13.3", "13.4", "13.5"]
    assert "linux/arm64" in catalog.CPU_TARGET.platforms
    assert all(t.platforms == ("linux/amd64",) for t in catalog.ROCM_TARGETS.values())


# ---------------------------------------------------------------- tags, labels, Dockerfile


def test_arm64_tags_say_so_and_amd64_tags_keep_their_names() -> None:
    amd64, arm64 = spec(), spec(platform="linux/arm64")
    # The amd64 default tag is what it was before the platform axis existed.
    assert amd64.tag.startswith("imagegen:cpu-torch2.13.0-py3.11-")
    # arm64 takes its own default torch (the newest aarch64 CPU build): the tag names it.
    assert arm64.tag == amd64.tag.replace("imagegen:cpu-", "imagegen:cpu-arm64-").replace("2.13.0", "2.10.0")
    cuda = spec(cuda="13.0", platform="linux/arm64")
    assert cuda.tag.startswith("imagegen:cuda13.0-arm64-torch2.15.0-py3.10-")


def test_labels_and_header_name_the_platform() -> None:
    s = spec(platform="linux/arm64")
    assert label_map(s)["io.imagegen.platform"] == "linux/arm64"
    assert label_map(spec())["io.imagegen.platform"] == "linux/amd64"
    text = render(s)
    assert text.startswith("# imagegen ops image: cpu for linux/arm64,")
    # BuildKit picks each multi-platform base's variant from --platform; only a cross build's
    # devel stage names one, the builder's own.
    assert "FROM --platform=$BUILDPLATFORM ${BASE_DEVEL} AS devel" in text
    assert text.count("FROM --platform") == 1
    assert "FROM --platform" not in render(spec(platform="linux/arm64", build_platform="linux/arm64"))


def test_cli_dockerfile_for_arm64() -> None:
    result = runner.invoke(
        app, ["dockerfile", "--cuda", "13.2", "--ops", "fused_adam", "--platform", "linux/arm64"]
    )
    assert result.exit_code == 0, result.output
    assert '"io.imagegen.platform"' not in result.stdout  # keys are bare, values quoted
    assert 'io.imagegen.platform="linux/arm64"' in result.stdout
    assert 'TORCH_CUDA_ARCH_LIST="9.0;10.0;10.3;12.1+PTX"' in result.stdout


# ---------------------------------------------------------------- Grace arch lists

# NVIDIA's Grace-paired GPUs: GH200 = sm_90, GB200 = sm_100, GB300 = sm_103, GB10 = sm_121.
# nvcc learnt sm_100 in CUDA 12.8 and sm_103 / sm_121 in 12.9 (CUDA toolkit release notes);
# the newest carries PTX. Written out, not computed, so a slip in either table shows here.
GRACE_EXPECTED = {
    "12.6": ("9.0+PTX",),
    "12.8": ("9.0", "10.0+PTX"),
    "12.9": ("9.0", "10.0", "10.3", "12.1+PTX"),
    "13.0": ("9.0", "10.0", "10.3", "12.1+PTX"),
    "13.2": ("9.0", "10.0", "10.3", "12.1+PTX"),
    "13.3": ("9.0", "10.0", "10.3", "12.1+PTX"),
    "13.4": ("9.0", "10.0", "10.3", "12.1+PTX"),
    "13.5": ("9.0", "10.0", "10.3", "12.1+PTX"),
}


@pytest.mark.parametrize("version", sorted(GRACE_EXPECTED))
def test_arm64_cuda_defaults_are_the_grace_gpus_the_toolkit_compiles(version: str) -> None:
    assert catalog.default_cuda_archs(version, "linux/arm64") == GRACE_EXPECTED[version]
    s = spec(cuda=version, platform="linux/arm64")
    assert s.cuda_archs == GRACE_EXPECTED[version]
    assert label_map(s)["io.imagegen.archs"] == ";".join(GRACE_EXPECTED[version])


def test_every_arm64_cuda_target_has_an_expected_list() -> None:
    arm64 = {v for v, t in catalog.CUDA_TARGETS.items() if "linux/arm64" in t.platforms}
    assert arm64 == set(GRACE_EXPECTED)


def test_arch_overrides_the_grace_default() -> None:
    s = spec(cuda="13.0", platform="linux/arm64", arch="9.0")
    assert s.cuda_archs == ("9.0",)
    with pytest.raises(BadInputError):
        spec(cuda="12.6", platform="linux/arm64", arch="10.3")  # not compiled by 12.6


def test_amd64_cuda_defaults_are_unchanged_by_the_platform_axis() -> None:
    assert spec(cuda="13.0").cuda_archs == ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "11.0", "12.0+PTX")


# ---------------------------------------------------------------- torch pins


def test_torch_pins_per_platform() -> None:
    # download.pytorch.org/whl/cpu has no +cpu label on its aarch64 wheels.
    assert spec().torch_requirement == "torch==2.13.0+cpu"
    assert spec(platform="linux/arm64").torch_requirement == "torch==2.10.0"
    assert spec(cuda="13.0", platform="linux/arm64").torch_requirement == "torch==2.15.0+cu130"
    # The build check still insists on a CPU build of torch.
    assert '.startswith("CPU")' in render(spec(platform="linux/arm64"))


# ---------------------------------------------------------------- stand-ins


def test_arm64_standins() -> None:
    s = spec(platform="linux/arm64", standins=True, build_platform="linux/arm64")
    assert (s.base_devel, s.base_runtime) == (
        "imagegen-standin/python:3.11-devel-arm64",
        "imagegen-standin/python:3.11-runtime-arm64",
    )
    # Cross-compiled (the default on an amd64 builder): the devel stage is the builder's.
    cross = spec(platform="linux/arm64", standins=True)
    assert cross.base_devel == "imagegen-standin/python:3.11-devel"
    # CUDA 13.x on arm64: the cross build's devel stage is amd64's CUDA stand-in, its runtime arm64's.
    cuda = spec(cuda="13.2", platform="linux/arm64", standins=True, ops="fused_adam")
    assert (cuda.base_devel, cuda.base_runtime) == (
        "imagegen-standin/cuda:13.2-devel",
        "imagegen-standin/cuda:13.2-base-arm64",
    )
    with pytest.raises(BadInputError, match=r"no stand-in bases for cuda12\.8 on linux/arm64"):
        spec(cuda="12.8", platform="linux/arm64", standins=True)


def test_standin_shim_passes_the_old_spellings_on(tmp_path: Path) -> None:
    # scripts/standin-images.sh is kept for callers: its flags reach `imagegen standins`,
    # whose bad-input errors (exit 2) come back through it.
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    script = REPO / "scripts" / "standin-images.sh"
    for args, message in (
        (["--platform", "linux/s390x"], "not one the stand-ins are made for"),
        (["--cuda", "12.8"], "no stand-in for CUDA 12.8"),
        (["--arm64", "--cuda", "12.4"], "on linux/arm64 only NVIDIA's 13.x wheels"),
    ):
        done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr, done.stderr


# ---------------------------------------------------------------- the matrix


def test_matrix_has_the_platform_axis() -> None:
    entries = {e.folder: e for e in standard_entries()}
    assert {"cpu-arm64", "cuda13.0-arm64", "cuda13.2-arm64"} <= set(entries)
    assert entries["cpu"].spec.platform == "linux/amd64"
    assert entries["cpu-arm64"].spec.platform == "linux/arm64"
    assert entries["cuda13.2-arm64"].bake_target == "cuda13-2-arm64"
    bake = render_matrix()[BAKE_FILE]
    block = bake[bake.index('target "cuda13-2-arm64"') :]
    assert 'platforms  = ["linux/arm64"]' in block.split("}")[0]
    assert 'dockerfile = "dockerfiles/cuda13.2-arm64/Dockerfile"' in block
    cpu = bake[bake.index('target "cpu" {') :].split("}")[0]
    assert 'platforms  = ["linux/amd64"]' in cpu
    # No ROCm on arm64.
    assert not any(
        e.spec.accelerator == "rocm" and e.spec.platform == "linux/arm64" for e in entries.values()
    )


def test_matrix_platform_filter_keeps_the_whole_bake_file(tmp_path: Path) -> None:
    written, _ = write_matrix(tmp_path, platforms=("linux/arm64",))
    dockerfiles = sorted(str(p.relative_to(tmp_path).parent) for p in written if p.name == "Dockerfile")
    assert dockerfiles == ["cpu-arm64", "cuda12.8-arm64", "cuda13.0-arm64", "cuda13.2-arm64"]
    assert 'target "cpu" {' in (tmp_path / BAKE_FILE).read_text()


def test_matrix_command_platform_option(tmp_path: Path) -> None:
    ok = runner.invoke(app, ["matrix", "--out", str(tmp_path), "--platform", "linux/arm64"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "cpu-arm64" / "Dockerfile").is_file() and not (tmp_path / "cpu").exists()
    bad = runner.invoke(app, ["matrix", "--out", str(tmp_path), "--platform", "arm64"])
    assert bad.exit_code == 2 and "did you mean linux/arm64?" in bad.stderr


# ---------------------------------------------------------------- the engine


def test_buildkit_argv_names_the_platform(tmp_path: Path) -> None:
    req = BuildRequest(tmp_path, tmp_path / "Dockerfile", tmp_path / "iid", "t:1", platform="linux/arm64")
    argv = cli_build_argv(Engine("buildkit", "/usr/bin/docker", "20.10"), req)
    assert argv[argv.index("--platform") + 1] == "linux/arm64"
    plain = BuildRequest(tmp_path, tmp_path / "Dockerfile", tmp_path / "iid", "t:1")
    assert "--platform" not in cli_build_argv(Engine("buildkit", "/usr/bin/docker", "20.10"), plain)


def test_pipeline_passes_the_spec_platform_to_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def build_image(engine: Engine, context: Path, text: str, tag: str, **kw: Any) -> BuildResult:
        seen.update(kw)
        return BuildResult(tag, "sha256:abc", 1.0)

    monkeypatch.setattr(pipeline, "build_image", build_image)
    # No image to seal or measure here: the finish sequence's steps answer for one.
    monkeypatch.setattr(finish, "measure_image", lambda tag: SizeReport(tag, 1, ()))
    monkeypatch.setattr(finish, "seal_image", lambda *args, **kw: None)
    s = spec(platform="linux/arm64", ops="cpu_adam", tag="it:arm64")
    pipeline.build(
        s, RunOptions(source=REPO, verify=False), engine=Engine("buildkit", "/usr/bin/docker", "20.10")
    )
    assert seen["platform"] == "linux/arm64"
