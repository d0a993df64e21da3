"""``python -m op_builder``: exit codes, JSON shapes, one-line errors (real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.op_package_files import square_package, unique

REPO = Path(__file__).resolve().parents[3]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "TORCH_CUDA_ARCH"))}
    clean.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-m", "op_builder", *args], capture_output=True, text=True, env=clean, cwd=REPO
    )


def test_report_json_lists_every_op() -> None:
    done = run("report", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    from op_builder import ALL_OPS

    assert [op["name"] for op in data["ops"]] == list(ALL_OPS)
    for op in data["ops"]:
        assert set(op) >= {"name", "target", "installed", "compatible", "reason"}
        assert op["compatible"] == (op["reason"] is None)
    gpu = [op for op in data["ops"] if op["target"] == "gpu"]
    assert data["accelerator"] == "cpu" and all(not op["compatible"] for op in gpu)


def test_report_says_which_kind_of_module_each_op_gets(tmp_path: Path) -> None:
    import torch

    # An op package whose builder declares no stable target: a module per torch release.
    package = square_package(tmp_path, unique("per_torch_ops"), "per_torch_op")
    done = run("report", "--json", DS_OP_SOURCES=str(package))
    assert done.returncode == 0, done.stderr
    abi = {op["name"]: op["abi"] for op in json.loads(done.stdout)["ops"]}
    # torch 2.10 or newer here: the ops with a stable binding, all of ours, get one module for every torch.
    for name in ("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io"):
        assert abi[name] == {"kind": "stable", "torch": ">=2.10"}
    assert abi["per_torch_op"] == {"kind": "torch", "torch": torch.__version__}
    text = run("report", DS_OP_SOURCES=str(package)).stdout
    assert "stable: torch >=2.10" in text and f"torch {torch.__version__} only" in text


def test_report_says_when_libaio_is_missing(tmp_path: Path) -> None:
    # A compiler wrapper that hides libaio's header: what a host without libaio-dev sees.
    wrapper = tmp_path / "c++"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in *probe.cpp) grep -q libaio.h "$a" && '
        '{ echo "fatal error: libaio.h: No such file or directory" >&2; exit 1; };; esac; done\n'
        'exec /usr/bin/c++ "$@"\n'
    )
    wrapper.chmod(0o755)
    data = json.loads(run("report", "--json", CXX=str(wrapper)).stdout)
    aio = next(op for op in data["ops"] if op["name"] == "async_io")
    assert aio["compatible"] is False
    assert "libaio" in aio["reason"] and "libaio-dev" in aio["reason"]


def test_plan_seed_scenario_json() -> None:
    done = run(
        "plan",
        "--json",
        "--cuda",
        "12.4",
        DS_ACCELERATOR="cuda",
        TORCH_CUDA_ARCH_LIST="7.0;8.0;9.0+PTX",
        DS_BUILD_OPS="1",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    archs = {op["name"]: op["archs"] for op in data["ops"]}
    assert archs["fp_quantizer"] == ["8.0", "9.0+PTX"]
    assert archs["quantizer"] == archs["transformer"] == ["7.0", "8.0", "9.0+PTX"]
    for op in data["ops"]:
        device = op["flags"]["device"]
        for arch in op["archs"]:
            number = arch.split("+")[0].replace(".", "")
            assert sum(f.endswith(f"code=sm_{number}") for f in device) == 1
        assert sum(f.endswith("code=compute_90") for f in device) == (1 if op["target"] == "gpu" else 0)


def test_flags_json() -> None:
    done = run(
        "flags",
        "fp_quantizer",
        "--json",
        "--cuda",
        "12.4",
        DS_ACCELERATOR="cuda",
        TORCH_CUDA_ARCH_LIST="7.0;8.0;9.0+PTX",
    )
    data = json.loads(done.stdout)
    assert data["archs"] == ["8.0", "9.0+PTX"] and data["device_compiler"] == "nvcc"
    assert "-DBF16_AVAILABLE" in data["device"] and not any("sm_70" in f for f in data["device"])
    assert all(Path(s).is_absolute() for s in data["sources"])


def test_archs_json() -> None:
    data = json.loads(run("archs", "Ampere;9.0+PTX", "--cuda", "12.1", "--json").stdout)
    assert data["archs"] == ["8.0", "8.6", "9.0+PTX"] and data["bf16"] is True
    assert data["nvcc_flags"][-1] == "-gencode=arch=compute_90,code=compute_90"


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (("flags", "cpu_adamw"), {}, "did you mean 'cpu_adam'"),
        (("archs", "8.O"), {}, "malformed CUDA arch"),
        (("archs", "7.0", "--cuda", "13.0"), {}, "dropped after CUDA 12.9"),
        (("archs", "8.0", "--cuda", "twelve"), {}, "not a CUDA version"),
        (("plan",), {"DS_BUILD_CPU_ADAMW": "1"}, "DS_BUILD_CPU_ADAM"),
        (("plan",), {"DS_BUILD_FUSED_ADAM": "1", "DS_ACCELERATOR": "cpu"}, "cannot be built"),
        (("report",), {"DS_ACCELERATOR": "tpu"}, "DS_ACCELERATOR"),
    ],
)
def test_bad_input_exit_2_one_message_no_traceback(
    args: tuple[str, ...], env: dict[str, str], fragment: str
) -> None:
    done = run(*args, **env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_bad_input_json_error_object() -> None:
    done = run("flags", "nope", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["exit_code"] == 2


def test_verify_without_installed_ops_fails_clearly() -> None:
    done = run("verify", "cpu_adam", "--json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["ok"] is False and data["ops"][0]["source"] is None
    assert "DS_DISABLE_JIT=1" in data["ops"][0]["error"]
    assert set(data) == {"ok", "torch", "cuda", "hip", "machine", "ops"}
    assert set(data["ops"][0]) == {
        "name",
        "ok",
        "source",
        "seconds",
        "error",
        "selftest",
        "binary",
        "machine",
    }
    assert data["ops"][0]["selftest"] is None  # an op that did not load is not self-tested


def test_verify_of_an_unknown_op_is_bad_input_with_a_suggestion() -> None:
    done = run("verify", "cpu_adma")
    assert done.returncode == 2
    assert "unknown op 'cpu_adma'" in done.stderr and "did you mean 'cpu_adam'" in done.stderr
    assert "Traceback" not in done.stderr
    as_json = run("verify", "--json", "cpu_adma")
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["error"]["exit_code"] == 2


@pytest.mark.parametrize(
    ("command", "version"),
    [("plan", "99.9"), ("flags", "99.9"), ("plan", "12.12"), ("report", "10.9"), ("archs", "99.9")],
)
def test_an_unknown_cuda_release_is_bad_input(command: str, version: str) -> None:
    args = [command, "--cuda", version] + (["fused_adam"] if command == "flags" else [])
    done = run(*args, DS_BUILD_FUSED_ADAM="1", DS_ACCELERATOR="cuda")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--cuda {version}" in done.stderr and "known CUDA releases" in done.stderr


@pytest.mark.parametrize("version", ["11.8", "12.9", "13.0", "13.2"])
def test_known_cuda_releases_are_accepted(version: str) -> None:
    done = run("plan", "--cuda", version, "--json", DS_BUILD_FUSED_ADAM="1", DS_ACCELERATOR="cuda")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ops"][0]["name"] == "fused_adam"
