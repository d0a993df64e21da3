"""Ahead of time for real: build a wheel with exactly one op, install it in a fresh venv,
and load that op with JIT disabled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagegen.building.build_inputs import copy_build_inputs

REPO = Path(__file__).resolve().parents[2]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def cpu_adam_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = copy_build_inputs(REPO, tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(out),
            ".",
        ],
        cwd=src,
        env=_clean_env(DS_BUILD_OPS="0", DS_BUILD_CPU_ADAM="1", MAX_JOBS="2"),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # pip runs setup.py three times (egg_info, dist_info, bdist_wheel); only the last plans.
    assert (done.stdout + done.stderr).count("op_builder: will build cpu_adam") == 1
    wheels = list(out.glob("imagegen-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_holds_exactly_the_requested_op(cpu_adam_wheel: Path) -> None:
    assert "linux_x86_64" in cpu_adam_wheel.name or "linux" in cpu_adam_wheel.name  # not a pure wheel
    with zipfile.ZipFile(cpu_adam_wheel) as wheel:
        names = wheel.namelist()
        data = json.loads(wheel.read("kernels/_ops/manifest.json"))
    compiled = sorted(n for n in names if n.endswith(".so"))
    assert len(compiled) == 1 and compiled[0].startswith("kernels/_ops/cpu_adam")
    assert list(data["ops"]) == ["cpu_adam"]
    import torch

    assert data["torch"] == torch.__version__ and data["accelerator"] == "cpu"
    # Sources ship too, so other ops can still compile just in time.
    assert "kernels/optim/csrc/cpu_lion.cpp" in names
    assert "kernels/optim/includes/cpu_simd.h" in names and "kernels/includes/gpu_runtime.h" in names


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DS_BUILD_FUSED_ADAM": "1", "DS_ACCELERATOR": "cpu"},
            "DS_BUILD_FUSED_ADAM=1 but fused_adam cannot be built",
        ),
        (
            {"DS_BUILD_CPU_ADAMW": "1"},
            "unknown build variable DS_BUILD_CPU_ADAMW (hint: did you mean 'DS_BUILD_CPU_ADAM'",
        ),
    ],
)
def test_a_build_that_cannot_be_done_fails_before_compiling(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    src = copy_build_inputs(REPO, tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path), "."],
        cwd=src,
        env=_clean_env(**env),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
    assert "building op" not in done.stdout + done.stderr
    assert not list(tmp_path.glob("*.whl"))


def test_installed_wheel_loads_with_jit_disabled(cpu_adam_wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    torch_spec = f"torch=={__import__('torch').__version__.split('+')[0]}"
    # No bytecode: writing it for torch's thousands of modules is most of the install's time.
    pip = [python, "-m", "pip", "install", "-q", "--no-compile"]
    subprocess.run([*pip, torch_spec], check=True, env=_clean_env())
    subprocess.run([*pip, str(cpu_adam_wheel)], check=True, env=_clean_env())
    env = _clean_env(DS_DISABLE_JIT="1", TORCH_EXTENSIONS_DIR=str(tmp_path / "no-jit-here"))
    done = subprocess.run(
        [python, "-m", "op_builder", "verify", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [(op["name"], op["source"], op["ok"]) for op in data["ops"]] == [("cpu_adam", "aot", True)]
    # Verification ran the installed kernel's self-test too; a CPU op has no device code to audit.
    selftest = data["ops"][0]["selftest"]
    assert selftest["ok"] is True and selftest["isa"] in ("scalar", "avx2", "avx512")
    assert data["ops"][0]["binary"] is None
    # The op is not in the wheel: verify names why and fails.
    done = subprocess.run(
        [python, "-m", "op_builder", "verify", "cpu_lion", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert (
        done.returncode == 1 and "not installed ahead of time" in json.loads(done.stdout)["ops"][0]["error"]
    )
    # The preflight of the installed ops: a CPU op runs wherever its image does.
    preflight = [python, "-m", "op_builder", "preflight", "--json"]
    done = subprocess.run(preflight, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(op["name"], op["ok"]) for op in json.loads(done.stdout)["ops"]] == [("cpu_adam", True)]
    # The user-facing front runs on the installed kernel.
    script = (
        "import torch; from kernels.optim import CPUAdam\n"
        "p = torch.nn.Parameter(torch.ones(7)); p.grad = torch.ones(7)\n"
        "opt = CPUAdam([p], lr=0.1); opt.step(); print(opt.backend, p.detach().tolist())\n"
    )
    done = subprocess.run([python, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    backend, values = done.stdout.split(" ", 1)
    assert backend == "kernel"
    assert json.loads(values) == pytest.approx([0.9] * 7, abs=1e-6)  # Adam's first step moves by lr
    assert not (tmp_path / "no-jit-here").exists()


def test_an_op_package_outside_the_project_builds_into_the_wheel(tmp_path: Path) -> None:
    """setuptools refuses absolute source paths: the build reaches the package through a link."""
    from tests.op_package_files import square_package, unique

    op = unique("aot_sq")
    package = square_package(tmp_path / "elsewhere", unique("aot_pkg"), op)
    # Where the build finds the package's source is under test, not what the op computes: a module
    # of pybind11 alone compiles in a few seconds, the square op (torch's C++ headers) in ~40 s.
    (package / "csrc" / "square.cpp").write_text(
        "#include <pybind11/pybind11.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n"
    )
    src = copy_build_inputs(REPO, tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path), "."],
        cwd=src,
        env=_clean_env(DS_BUILD_OPS="0", DS_OP_SOURCES=str(package), **{f"DS_BUILD_{op.upper()}": "1"}),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel_path,) = tmp_path.glob("imagegen-*.whl")
    with zipfile.ZipFile(wheel_path) as wheel:
        compiled = sorted(n for n in wheel.namelist() if n.endswith(".so"))
        data = json.loads(wheel.read("kernels/_ops/manifest.json"))
    assert len(compiled) == 1 and compiled[0].startswith(f"kernels/_ops/{op}.")
    assert list(data["ops"]) == [op]
    assert data["ops"][op]["flags"]["sources"] == [str(package / "csrc" / "square.cpp")]
