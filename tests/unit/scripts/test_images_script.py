"""scripts/images.py: what `make images` and `make image-cuda` run for their variables.

The plans are checked against op_builder's registry read here (each op's target and system
libraries) and against the rules written out: PyPI's torch per CUDA, every op in an arm64 image
(cross-compiled; async_io's self-test is reported not checkable under emulation, not failed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from op_builder import ALL_OPS
from tests._script_module import load_script

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "images.py"
IMAGEGEN = ["imagegen"]


def _load() -> ModuleType:
    return load_script(SCRIPT, "images_script")


images = _load()


def _option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def _cpu(*argv: str) -> list[list[str]]:
    args = images.parser().parse_args(["cpu", *argv])
    return images.cpu_commands(args, images.our_ops(), IMAGEGEN)  # type: ignore[no-any-return]


def _cuda(*argv: str, index: str = "https://mirror.example/simple") -> list[list[str]]:
    args = images.parser().parse_args(["cuda", *argv])
    return images.cuda_commands(args, images.our_ops(), index, IMAGEGEN)  # type: ignore[no-any-return]


def test_our_ops_are_the_registrys_by_target() -> None:
    builtin = [b for b in ALL_OPS.values() if b.name in images.our_ops().cpu + images.our_ops().gpu]
    ops = images.our_ops()
    assert ops.cpu == tuple(b.name for b in builtin if b.target == "cpu")
    assert ops.gpu == tuple(b.name for b in builtin if b.target == "gpu")
    assert {"cpu_adam", "async_io"} <= set(ops.cpu) and {"fused_adam", "transformer"} <= set(ops.gpu)


def test_amd64_image_builds_every_cpu_op() -> None:
    (build,) = _cpu("--platform", "", "--ops", "")
    assert build[:3] == [*IMAGEGEN, "build", "--cpu"]
    assert _option(build, "--platform") == "linux/amd64"
    assert _option(build, "--ops") == ",".join(images.our_ops().cpu)
    assert "--torch" not in build


@pytest.mark.parametrize(
    ("argv", "ops"),
    [
        ([], "cpu_adam,cpu_adagrad,cpu_lion,async_io"),  # cross-compiled: all four, on any host
        (["--ops", "cpu_adam,async_io"], "cpu_adam,async_io"),  # IMAGE_OPS as given
        (["--arm64-ops", "cpu_lion"], "cpu_lion"),  # ARM64_IMAGE_OPS as given
        (["--ops", "cpu_adam", "--arm64-ops", "cpu_lion,async_io"], "cpu_lion,async_io"),  # it wins
    ],
)
def test_arm64_image_ops(argv: list[str], ops: str) -> None:
    _fetch, build = _cpu("--platform", "linux/arm64", *argv)
    assert _option(build, "--ops") == ops


def test_arm64_image_keeps_async_io_and_takes_the_build_machines_torch_from_the_amd64_wheels(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(images, "WHEELHOUSE", tmp_path / "wheels")
    _fetch, build = _cpu("--platform", "linux/arm64")
    assert "async_io" in (_option(build, "--ops") or "").split(",")
    assert _option(build, "--ops") == ",".join(images.our_ops().cpu)
    assert "--build-wheelhouse" not in build  # no amd64 wheelhouse: imagegen's default
    (tmp_path / "wheels").mkdir()
    _fetch, build = _cpu("--platform", "linux/arm64")
    assert _option(build, "--build-wheelhouse") == str(tmp_path / "wheels")
    assert _option(build, "--wheelhouse") == images.ARM64_WHEELHOUSE  # the target's torch
    _fetch, build = _cpu("--platform", "linux/arm64", "--wheelhouse", "amd64-wheels")
    assert _option(build, "--build-wheelhouse") == "amd64-wheels"


def test_arm64_image_fetches_its_torch_into_its_wheelhouse() -> None:
    fetch, build = _cpu("--platform", "linux/arm64", "--arm64-torch", "", "--arm64-wheelhouse", "")
    assert fetch[1:4] == ["-m", "pip", "download"] and fetch[-1] == "torch==2.10.0"
    assert _option(fetch, "--dest") == _option(build, "--wheelhouse") == ".cache/wheelhouse-linux-arm64"
    assert _option(build, "--torch") == "2.10.0"
    fetch, build = _cpu("--platform", "linux/arm64", "--arm64-torch", "2.9.0", "--arm64-wheelhouse", "w")
    assert fetch[-1] == "torch==2.9.0" and _option(build, "--torch") == "2.9.0"
    assert _option(fetch, "--dest") == _option(build, "--wheelhouse") == "w"


@pytest.mark.parametrize(
    ("cuda", "torch"), [("", "2.15.0"), ("13.0", "2.15.0"), ("13.2", "2.15.0"), ("12.4", "2.6.0")]
)
def test_cuda_image_takes_pypis_torch_for_that_cuda(cuda: str, torch: str) -> None:
    standins, build = _cuda("--cuda", cuda)
    assert standins == [*IMAGEGEN, "standins", "--cuda", cuda or "13.0"]
    assert _option(build, "--cuda") == (cuda or "13.0")
    assert _option(build, "--torch") == torch
    assert _option(build, "--torch-index") == "https://mirror.example/simple"
    assert _option(build, "--ops") == ",".join(images.our_ops().gpu)
    assert "--arch" not in build  # the catalog's default list for that CUDA


def test_cuda_image_passes_what_is_set() -> None:
    _, build = _cuda(
        "--arch", "8.0;9.0+PTX", "--torch", "2.14.1", "--ops", "transformer", "--ca-cert", "ca.pem"
    )
    assert _option(build, "--arch") == "8.0;9.0+PTX"
    assert _option(build, "--torch") == "2.14.1"
    assert _option(build, "--ops") == "transformer"
    assert _option(build, "--ca-cert") == "ca.pem"


def test_wheelhouse_and_ca_cert_only_when_present(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(images, "WHEELHOUSE", tmp_path / "wheels")
    monkeypatch.setattr(images, "CA_CERT", tmp_path / "ca.crt")
    (build,) = _cpu()
    assert "--wheelhouse" not in build and "--ca-cert" not in build
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.crt").write_text("")
    (build,) = _cpu()
    assert _option(build, "--wheelhouse") == str(tmp_path / "wheels")
    assert _option(build, "--ca-cert") == str(tmp_path / "ca.crt")


def test_the_first_failing_command_ends_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    commands = [["sh", "-c", "exit 3"], ["touch", str(marker)]]
    assert images.run_all(commands, dry_run=False) == 3
    assert not marker.exists()
    assert capsys.readouterr().out.splitlines() == ["sh -c 'exit 3'"]
    assert images.run_all(commands, dry_run=True) == 0 and not marker.exists()


def _script(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_a_pip_index_a_container_cannot_read_exits_1() -> None:
    proc = _script("cuda", "--dry-run", PIP_INDEX_URL="file:///srv/wheels", PIP_CONFIG_FILE=os.devnull)
    assert proc.returncode == 1, proc.stderr
    assert "file:///srv/wheels" in proc.stderr and "CUDA_TORCH_INDEX=URL" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_dry_run_prints_the_commands() -> None:
    proc = _script("cuda", "--dry-run", "--torch-index", "https://mirror.example/simple", "--cuda", "12.4")
    assert proc.returncode == 0, proc.stderr
    standins, build = proc.stdout.splitlines()
    assert standins.endswith("standins --cuda 12.4")
    assert "--torch 2.6.0 --torch-index https://mirror.example/simple" in build


def test_both_platforms_are_one_build_with_torch_and_wheels_per_platform_and_a_push() -> None:
    fetch, build = _cpu("--platform", "linux/amd64,linux/arm64", "--push", "127.0.0.1:5000/ops/cpu:1")
    assert fetch[-1] == f"torch=={images.ARM64_TORCH}" and _option(fetch, "--dest") == images.ARM64_WHEELHOUSE
    assert _option(build, "--platform") == "linux/amd64,linux/arm64"
    assert _option(build, "--platform-torch") == f"linux/arm64={images.ARM64_TORCH}"
    assert _option(build, "--platform-wheelhouse") == f"linux/arm64={images.ARM64_WHEELHOUSE}"
    # One op list for the index: every op, async_io included, on any host.
    assert _option(build, "--ops") == ",".join(images.our_ops().cpu)
    assert _option(build, "--tag") == "127.0.0.1:5000/ops/cpu:1" and build[-1] == "--push"
    _, picked = _cpu("--platform", "linux/amd64,linux/arm64", "--arm64-ops", "cpu_adam")
    assert _option(picked, "--ops") == "cpu_adam" and "--push" not in picked


def test_both_platforms_name_the_amd64_wheels_as_the_arm64_builds_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(images, "WHEELHOUSE", tmp_path / "wheels")
    _, build = _cpu("--platform", "linux/amd64,linux/arm64")
    assert "--wheelhouse" not in build and "--build-wheelhouse" not in build
    # arm64's spec takes --platform-wheelhouse as its wheelhouse, which its build wheelhouse would
    # default to: the amd64 one is named.
    _, build = _cpu("--platform", "linux/amd64,linux/arm64", "--wheelhouse", "amd64-wheels")
    assert _option(build, "--wheelhouse") == _option(build, "--build-wheelhouse") == "amd64-wheels"


def test_an_arm64_cuda_image_is_cross_compiled_from_both_platforms_standins() -> None:
    amd64, arm64, build = _cuda("--cuda", "13.0", "--platform", "linux/arm64", "--wheelhouse", "/w")
    assert amd64 == [*IMAGEGEN, "standins", "--cuda", "13.0"]  # the devel stage's
    assert arm64 == [*IMAGEGEN, "standins", "--cuda", "13.0", "--platform", "linux/arm64"]  # the runtime's
    assert _option(build, "--platform") == "linux/arm64" and _option(build, "--build-wheelhouse") == "/w"
    # torch 2.15.0's aarch64 build crashes under qemu-user, where the image is checked here.
    assert _option(build, "--torch") == "2.11.0"
