"""ImageSpec validation through the real CLI: every bad input is exit 2, one message, a hint."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import SpecInput, build_spec, content_hash, spec_input

runner = CliRunner()

# (arguments after `imagegen dockerfile`, text the message must contain, text the hint must contain)
BAD_INPUT = [
    (["--cpu", "--ops", "cpu_adm"], "unknown op 'cpu_adm'", "did you mean 'cpu_adam'"),
    (["--cpu", "--ops", "fused_adam"], "fused_adam is a GPU op", "--cuda X.Y"),
    (["--cpu", "--ops", "all,cpu_adam"], "cannot be combined", "either all or a list"),
    (["--cpu", "--ops", " , "], "--ops is empty", "--ops all"),
    (["--cpu"], "no ops given", "cpu_adam"),
    (["--cpu", "--cuda", "12.1", "--ops", "all"], "two targets at once: --cuda and --cpu", "one target"),
    (["--ops", "all"], "no target given", "--cuda X.Y, --rocm X.Y or --cpu"),
    (["--cuda", "12.3", "--ops", "all"], "CUDA 12.3 is not supported", "closest supported version is 12.4"),
    (["--cuda", "11.7", "--ops", "all"], "CUDA 11.7 is not supported", "closest supported version is 11.8"),
    (["--rocm", "5.7", "--ops", "all"], "ROCm 5.7 is not supported", "closest supported version is 6.1"),
    (["--cuda", "twelve", "--ops", "all"], "is not a CUDA version", "MAJOR.MINOR"),
    (["--cuda", "12.1", "--ops", "all", "--arch", "8.x"], "malformed CUDA arch '8.x'", "X.Y+PTX"),
    (
        ["--cuda", "13.0", "--ops", "all", "--arch", "6.0"],
        "6.0 was dropped after CUDA 12.9",
        "CUDA 13.0 compiles",
    ),
    (["--cuda", "12.1", "--ops", "all", "--arch", "10.0"], "10.0 needs CUDA 12.8", "CUDA 12.1 compiles"),
    (["--cuda", "12.1", "--ops", "all", "--arch", "native"], "no GPU is visible", "name the archs"),
    (["--rocm", "6.2", "--ops", "all", "--arch", "sm_90"], "malformed ROCm arch 'sm_90'", "gfx90a"),
    (["--cpu", "--ops", "all", "--arch", "8.0"], "--arch applies to --cuda and --rocm", "drop --arch"),
    (
        ["--cuda", "12.1", "--ops", "fp_quantizer", "--arch", "7.0;7.5"],
        "fp_quantizer needs archs >= 8.0",
        "add an arch in range",
    ),
    (
        ["--cuda", "12.1", "--ops", "all", "--torch", "2.7"],
        "torch 2.7.1 is not built for cuda12.1",
        "2.1.0 to 2.5.1",
    ),
    (
        ["--cuda", "12.8", "--ops", "all", "--torch", "2.6.0"],
        "torch 2.6.0 is not built for cuda12.8",
        "2.7.0",
    ),
    (["--cpu", "--ops", "all", "--torch", "3.1"], "torch 3.1 is not a torch release", "2.0.0 to 2.15.0"),
    (
        ["--cpu", "--ops", "all", "--torch", "2.1", "--python", "3.12"],
        "torch 2.1.2 has no wheels for Python 3.12",
        "supports Python 3.8 to 3.11",
    ),
    (["--cpu", "--ops", "all", "--python", "3.7"], "Python 3.7 has no python:3.7-slim image", "3.9"),
    (["--cpu", "--ops", "all", "--python", "three"], "is not a Python version", "MAJOR.MINOR"),
    (
        ["--cuda", "12.1", "--ops", "all", "--python", "3.12"],
        "python3, which is 3.10, not 3.12",
        "--base-devel and --base-runtime",
    ),
    (
        ["--cuda", "12.6", "--ops", "all", "--python", "3.12"],
        "which is 3.10, not 3.12",
        "--distro ubuntu24.04",
    ),
    (
        ["--cuda", "12.1", "--ops", "all", "--distro", "ubuntu24.04"],
        "distro 'ubuntu24.04' is not available",
        "ubuntu22.04",
    ),
    (["--cpu", "--ops", "all", "--distro", "bookwrom"], "distro 'bookwrom'", "did you mean 'bookworm'"),
    (
        ["--cpu", "--ops", "all", "--wheelhouse", "/no/such/dir"],
        "wheelhouse /no/such/dir is not a directory",
        "pip download",
    ),
    (["--cpu", "--ops", "all", "--ca-cert", "/no/such/ca.crt"], "CA certificate file /no/such/ca.crt", "PEM"),
    (["--cpu", "--ops", "all", "--offline"], "--offline needs --wheelhouse", "pip download"),
    (["--cpu", "--ops", "all", "--keep-ca-cert"], "--keep-ca-cert needs --ca-cert", "CA bundle"),
    (["--cpu", "--ops", "all", "--max-jobs", "0"], "max jobs 0 is below 1", "--max-jobs 4"),
    (
        ["--cpu", "--ops", "all", "--base-devel", "Not An Image"],
        "is not a valid image reference",
        "lower case",
    ),
    (
        ["--cuda", "12.1", "--ops", "all", "--standins"],
        "no stand-in bases for cuda12.1 on linux/amd64",
        "nvidia",
    ),
    (
        ["--cpu", "--ops", "all", "--standins", "--python", "3.12"],
        "stand-in bases have Python 3.11",
        "--python 3.11",
    ),
]


@pytest.mark.parametrize(("args", "message", "hint"), BAD_INPUT, ids=[" ".join(a) for a, _, _ in BAD_INPUT])
def test_bad_input_exits_2_with_message_and_hint(args: list[str], message: str, hint: str) -> None:
    result = runner.invoke(app, ["dockerfile", *args], env={"IMAGEGEN_DEBUG": ""})
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert any(line.startswith("hint: ") for line in lines)
    assert hint in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""  # nothing rendered


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "some:image", "--ops", "cpu_adm", "--json"],
        ["build", "--cpu", "--ops", "cpu_adam", "--push", "--no-verify", "--json"],
        ["build", "--cpu", "--ops", "nope", "--json"],
    ],
)
def test_bad_input_with_json_prints_one_error_document(args: list[str]) -> None:
    import json

    result = runner.invoke(app, args)
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert set(doc) == {"error"}
    assert doc["error"]["exit_code"] == 2
    assert doc["error"]["message"] and doc["error"]["hint"]


def test_env_fills_what_flags_leave_out_and_flags_win() -> None:
    env = {"IMAGEGEN_TORCH": "2.12", "IMAGEGEN_PYTHON": "3.12", "IMAGEGEN_OPS": "cpu_lion"}
    from_env = build_spec(spec_input(env, cpu=True))
    assert (from_env.torch, from_env.python, from_env.ops) == ("2.12.1", "3.12", ("cpu_lion",))
    from_flags = build_spec(spec_input(env, cpu=True, torch="2.13.0", python="3.11", ops="cpu_adam"))
    assert (from_flags.torch, from_flags.python, from_flags.ops) == ("2.13.0", "3.11", ("cpu_adam",))
    default = build_spec(SpecInput(cpu=True, ops="cpu_adam"))
    assert (default.torch, default.python) == ("2.13.0", "3.11")


def test_env_booleans_are_checked() -> None:
    assert build_spec(spec_input({"IMAGEGEN_BUILDKIT": "0"}, cpu=True, ops="all")).buildkit is False
    assert (
        build_spec(spec_input({"IMAGEGEN_BUILDKIT": "0"}, cpu=True, ops="all", buildkit=True)).buildkit
        is True
    )
    with pytest.raises(BadInputError, match="IMAGEGEN_BUILDKIT='maybe' is not a boolean"):
        build_spec(spec_input({"IMAGEGEN_BUILDKIT": "maybe"}, cpu=True, ops="all"))


def test_cuda_alone_gets_documented_defaults() -> None:
    spec = build_spec(SpecInput(cuda="12.1", ops="transformer"))
    assert spec.torch == "2.5.1" and spec.torch_variant == "cu121"
    assert spec.torch_requirement == "torch==2.5.1+cu121"
    assert spec.python == "3.10" and spec.distro == "ubuntu22.04"
    assert spec.base_devel == "nvidia/cuda:12.1.1-devel-ubuntu22.04"
    assert spec.base_runtime == "nvidia/cuda:12.1.1-base-ubuntu22.04"
    assert spec.torch_index == "https://download.pytorch.org/whl/cu121"
    assert spec.cuda_archs == ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX")


def test_ops_all_means_every_op_of_the_target_in_registry_order() -> None:
    from op_builder import ALL_OPS

    cpu = build_spec(SpecInput(cpu=True, ops="all"))
    assert cpu.ops == tuple(n for n, b in ALL_OPS.items() if b.target == "cpu")
    gpu = build_spec(SpecInput(rocm="6.4", ops="all"))
    assert gpu.ops == tuple(ALL_OPS)
    reordered = build_spec(SpecInput(cpu=True, ops="cpu_lion,cpu_adam,cpu_lion"))
    assert reordered.ops == ("cpu_adam", "cpu_lion")


def test_each_gpu_op_gets_its_own_arch_list() -> None:
    spec = build_spec(SpecInput(cuda="12.8", ops="fused_adam,fp_quantizer", arch="7.5;8.6;9.0+PTX"))
    assert dict(spec.op_archs) == {
        "fused_adam": ("7.5", "8.6", "9.0+PTX"),
        "fp_quantizer": ("8.6", "9.0+PTX"),
    }


def test_all_drops_an_op_without_archs_and_says_so() -> None:
    spec = build_spec(SpecInput(cuda="12.1", ops="all", arch="7.0;7.5"))
    assert "fp_quantizer" not in spec.ops and "transformer" in spec.ops
    assert len(spec.warnings) == 1 and "fp_quantizer" in spec.warnings[0]


def test_custom_torch_index_relaxes_the_catalog_check_with_a_warning() -> None:
    index = "https://index.example.invalid/simple"
    spec = build_spec(SpecInput(cuda="12.1", ops="quantizer", torch="2.7.1", torch_index=index))
    assert spec.torch == "2.7.1" and spec.torch_index == index
    assert spec.warnings and "trusting --torch-index" in spec.warnings[0]


def test_wheelhouse_replaces_the_torch_index_and_offline_drops_every_index(tmp_path: Path) -> None:
    spec = build_spec(SpecInput(cpu=True, ops="all", wheelhouse=str(tmp_path)))
    assert spec.wheelhouse == tmp_path.resolve() and spec.torch_index is None
    offline = build_spec(SpecInput(cpu=True, ops="all", wheelhouse=str(tmp_path), offline=True))
    assert offline.offline and offline.torch_index is None


def test_standins_set_the_bases_below_explicit_flags() -> None:
    spec = build_spec(spec_input({"IMAGEGEN_STANDINS": "1"}, cpu=True, ops="all"))
    assert (spec.base_devel, spec.base_runtime) == (catalog.STANDIN_DEVEL, catalog.STANDIN_RUNTIME)
    mixed = build_spec(
        SpecInput(cpu=True, ops="all", standins=True, base_runtime="python:3.11-slim-bookworm")
    )
    assert (mixed.base_devel, mixed.base_runtime) == (catalog.STANDIN_DEVEL, "python:3.11-slim-bookworm")


def test_each_bytecode_mode_is_its_own_image() -> None:
    default = build_spec(SpecInput(cpu=True, ops="cpu_adam"))
    assert default.bytecode == "startup"
    tags = {default.tag}
    for mode, suffix in (("none", "-nobytecode"), ("all", "-allbytecode")):
        spec = build_spec(spec_input({"IMAGEGEN_BYTECODE": mode.upper()}, cpu=True, ops="cpu_adam"))
        assert spec.bytecode == mode
        assert spec.tag == default.tag + suffix
        tags.add(spec.tag)
    assert len(tags) == 3  # two specs never share a tag
    flag_wins = build_spec(
        spec_input({"IMAGEGEN_BYTECODE": "none"}, cpu=True, ops="cpu_adam", bytecode="all")
    )
    assert flag_wins.bytecode == "all"


def test_unknown_bytecode_mode_names_the_modes() -> None:
    with pytest.raises(BadInputError) as info:
        build_spec(SpecInput(cpu=True, ops="cpu_adam", bytecode="startp"))
    assert "'startp'" in info.value.message
    assert "did you mean 'startup'?" in info.value.hint and "all, or none" in info.value.hint


def test_cuda_standins_are_the_host_toolkit_pair() -> None:
    spec = build_spec(SpecInput(cuda="13.0", ops="all", standins=True))
    assert (spec.base_devel, spec.base_runtime) == catalog.STANDINS[("cuda13.0", "linux/amd64")]
    assert (spec.python, spec.distro) == (catalog.STANDIN_PYTHON, catalog.STANDIN_DISTRO)


def test_default_tag_names_target_torch_python_and_content() -> None:
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam,cpu_lion"))
    assert spec.tag == f"imagegen:cpu-torch2.13.0-py3.11-{content_hash(('cpu_adam', 'cpu_lion'), ())}"
    other = build_spec(SpecInput(cpu=True, ops="cpu_adam"))
    assert other.tag != spec.tag
    a = build_spec(SpecInput(cuda="12.8", ops="quantizer", arch="8.0"))
    b = build_spec(SpecInput(cuda="12.8", ops="quantizer", arch="9.0"))
    assert a.tag != b.tag  # the arch list is part of what the tag names
    assert build_spec(SpecInput(cpu=True, ops="all", tag="reg.example:5000/team/ops:v1")).tag.endswith(":v1")
