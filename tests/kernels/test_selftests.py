"""Self-tests (each builder's ``selftest``, run by ``op_builder.selftest``) and
``python -m op_builder selftest``.

The CPU ops' self-tests must pass on this machine through the command, with the JSON shape
and the code path (isa) they report; GPU ops must be reported skipped, and so not ok. And the
checks must be able to fail: each CPU op's self-test is run against a deliberately broken
kernel (its compiled module patched to perturb one element, or to corrupt the bytes read back)
and must report it. The GPU ops' self-tests run for real in tests/gpu; here they run once
against the fronts' PyTorch fallbacks on the CPU, which checks the self-tests' own code (the
references, the tolerances, the shapes) where no GPU is available.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from kernels import _gpu_load
from kernels.optim import cpu as cpu_optim
from op_builder import ALL_OPS, get_builder
from op_builder.__main__ import main
from op_builder.manifest import read_installed
from op_builder.report import SelfTestReport
from op_builder.selftest import SelfTestContext, isa_problem, run_selftests, selftest_for
from op_builder.toolchain import probe_library

REPO = Path(__file__).resolve().parents[2]
CPU_OPTIMIZERS = ("cpu_adam", "cpu_adagrad", "cpu_lion")
GPU_OPS = tuple(name for name, builder in ALL_OPS.items() if builder.target == "gpu")
RESULT_KEYS = {"name", "ok", "device", "max_abs_err", "tolerance", "seconds", "isa", "error", "skipped"}
HAS_LIBAIO = probe_library("aio", "libaio.h", "io_submit").ok
CPU_OPS = (*CPU_OPTIMIZERS, *(("async_io",) if HAS_LIBAIO else ()))
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without a GPU reports")


def selftest(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "TORCH_CUDA_ARCH"))}
    clean.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-m", "op_builder", "selftest", *args],
        capture_output=True,
        text=True,
        env=clean,
        cwd=REPO,
    )


def machine_isa() -> str:
    """The best code path this CPU runs, from /proc/cpuinfo (the kernels need FMA and F16C
    beside AVX2), independently of the kernels' own probe."""
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):  # x86, aarch64
            flags.update(line.split(":", 1)[1].split())
            break
    if platform.machine() in ("aarch64", "arm64"):
        return "sve" if "sve" in flags else "neon"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if {"avx2", "fma", "f16c"} <= flags else "scalar"


# ------------------------------------------------------------------ the command


def test_every_op_of_ours_names_a_self_test_that_imports() -> None:
    for name, builder in ALL_OPS.items():
        assert builder.selftest is not None, name
        module_name, _, function = builder.selftest.partition(":")
        assert module_name == f"{type(builder).__module__.rsplit('.', 1)[0]}.selftest", name
        assert callable(getattr(importlib.import_module(module_name), function)), name


def test_cpu_self_tests_pass_through_the_command() -> None:
    done = selftest(*CPU_OPS, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"ok", "device", "ops"}
    assert data["ok"] is True
    assert [op["name"] for op in data["ops"]] == list(CPU_OPS)
    for op in data["ops"]:
        assert set(op) == RESULT_KEYS
        assert op["ok"] is True and op["error"] is None and op["skipped"] is None, op
        assert op["device"] == "cpu"
        assert 0 <= op["max_abs_err"] <= op["tolerance"], op
        assert op["seconds"] >= 0
        assert op["isa"] == (machine_isa() if op["name"] in CPU_OPTIMIZERS else None), op
    assert SelfTestReport.from_json(data).to_json() == data


def test_isa_scalar_runs_the_scalar_path() -> None:
    done = selftest(*CPU_OPTIMIZERS, "--isa", "scalar", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] is True
    assert [op["isa"] for op in data["ops"]] == ["scalar"] * 3


@no_gpu
def test_gpu_ops_are_skipped_and_fail_without_a_gpu() -> None:
    done = selftest("cpu_lion", "fused_adam", "transformer", "--device", "cpu", "--json")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] is False and data["device"] == "cpu"
    lion, *gpu = data["ops"]
    assert lion["ok"] is True
    for op in gpu:
        assert op["ok"] is False
        assert "--device cpu" in op["skipped"]
        assert op["max_abs_err"] is None and op["tolerance"] is None and op["isa"] is None


@no_gpu
def test_device_auto_is_cpu_and_device_cuda_says_there_is_no_gpu() -> None:
    auto = json.loads(selftest("quantizer", "--json").stdout)
    assert auto["device"] == "cpu" and auto["ok"] is False
    cuda = selftest("fp_quantizer", "--device", "cuda", "--json")
    assert cuda.returncode == 1
    (op,) = json.loads(cuda.stdout)["ops"]
    assert op["ok"] is False and "needs a GPU" in op["skipped"]


def test_human_table_names_every_op() -> None:
    done = selftest("cpu_lion", "fused_lion", "--device", "cpu")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["op", "result"]
    assert any(line.startswith("cpu_lion") and " pass " in line for line in lines)
    assert any(line.startswith("fused_lion") and " skipped " in line for line in lines)


def test_unknown_op_is_bad_input() -> None:
    done = selftest("cpu_adamm")
    assert done.returncode == 2
    assert "unknown op 'cpu_adamm'" in done.stderr and "cpu_adam" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(
    (lambda m: m is not None and "cpu_adam" in m.ops)(read_installed()),
    reason="cpu_adam is installed ahead of time here",
)
def test_an_op_that_does_not_load_fails_with_the_load_error() -> None:
    done = selftest("cpu_adam", "--json", DS_DISABLE_JIT="1")
    assert done.returncode == 1
    (op,) = json.loads(done.stdout)["ops"]
    assert op["ok"] is False and op["skipped"] is None
    assert op["error"].startswith("load failed: cpu_adam:") and "DS_DISABLE_JIT" in op["error"]


@pytest.mark.parametrize(
    ("requested", "supported", "ok"),
    [
        ("auto", "scalar", True),
        ("scalar", "scalar", True),
        ("avx2", "scalar", False),
        ("scalar", "avx2", True),
        ("avx2", "avx2", True),
        ("avx512", "avx2", False),
        ("avx512", "avx512", True),
        ("neon", "sve", True),
        ("sve", "sve", True),
        ("sve", "neon", False),
        ("scalar", "neon", True),
        # another architecture's level
        ("neon", "avx512", False),
        ("avx2", "sve", False),
    ],
)
def test_isa_problem(requested: str, supported: str, ok: bool) -> None:
    assert (isa_problem(requested, supported) is None) == ok


def test_an_isa_the_cpu_cannot_run_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An AVX2-only CPU, as its kernel's probe would report it.
    monkeypatch.setattr(get_builder("cpu_adam").load(), "supported_simd_level", lambda: "avx2")
    assert main(["selftest", "cpu_adam", "--isa", "avx512"]) == 2
    err = capsys.readouterr().err
    assert "cannot run the avx512 code path" in err and "--isa avx2" in err


# ------------------------------------------------------------------ the checks can fail


@pytest.fixture(scope="module")
def loaded() -> dict[str, ModuleType]:
    return {name: cpu_optim._OPS[name].load() for name in CPU_OPTIMIZERS}


@pytest.mark.parametrize(
    ("op", "kernel_fn"), [(op, op.removeprefix("cpu_") + "_steps") for op in CPU_OPTIMIZERS]
)
def test_a_kernel_that_perturbs_one_element_fails(
    loaded: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch, op: str, kernel_fn: str
) -> None:
    # The self-test's param steps through the list form, as a param group's plain tensors do.
    real = getattr(loaded[op], kernel_fn)

    def broken(params: list[torch.Tensor], *rest: Any) -> Any:
        result = real(params, *rest)
        for p in params:
            if p.numel() > 100_000:
                p.view(-1)[123_457] += 1e-3  # one element of a million, a tenth of a step
        return result

    monkeypatch.setattr(loaded[op], kernel_fn, broken)
    (result,) = run_selftests([op], "cpu").ops
    assert result.name == op and result.ok is False
    assert result.max_abs_err is not None and result.tolerance is not None
    assert result.max_abs_err > result.tolerance and result.max_abs_err >= 1e-3
    assert result.error is not None and "param (n=1000003)" in result.error


def test_a_kernel_with_a_wrong_beta_fails(
    loaded: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subtler bug: the momentum decays with 0.89 instead of 0.9, everywhere."""
    real = loaded["cpu_adam"].adam_steps

    def broken(*args: Any) -> Any:
        # (params, grads, exp_avg, exp_avg_sq, steps, lr, beta1, ...): CPUAdam._kernel_scalars
        values = list(args)
        values[6] -= 0.01
        return real(*values)

    monkeypatch.setattr(loaded["cpu_adam"], "adam_steps", broken)
    (result,) = run_selftests(["cpu_adam"], "cpu").ops
    assert result.ok is False and result.max_abs_err is not None and result.tolerance is not None
    assert result.max_abs_err > result.tolerance


class CorruptingHandle:
    """The compiled AsyncIOHandle, with one byte of every read (or write) flipped."""

    def __init__(self, real: Any, where: str, *args: Any) -> None:
        self._handle = real(*args)
        self._where = where
        self._keep: list[torch.Tensor] = []  # written copies stay alive until wait()

    def _flip(self, tensor: torch.Tensor) -> None:
        tensor.view(-1).view(torch.uint8)[-1] ^= 0x5A

    def async_pwrite(self, tensor: torch.Tensor, path: Any) -> int:
        if self._where == "write":
            tensor = tensor.clone()
            self._flip(tensor)
            self._keep.append(tensor)
        return int(self._handle.async_pwrite(tensor, path))

    def sync_pread(self, tensor: torch.Tensor, path: Any) -> int:
        done = int(self._handle.sync_pread(tensor, path))
        if self._where == "read":
            self._flip(tensor)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


@pytest.mark.skipif(not HAS_LIBAIO, reason="libaio is not installed here (apt-get install libaio-dev)")
@pytest.mark.parametrize(("where", "check"), [("read", "sync read back"), ("write", "file written")])
def test_async_io_mismatch_fails(monkeypatch: pytest.MonkeyPatch, where: str, check: str) -> None:
    module = get_builder("async_io").load()
    real = module.AsyncIOHandle
    monkeypatch.setattr(module, "AsyncIOHandle", lambda *args: CorruptingHandle(real, where, *args))
    (result,) = run_selftests(["async_io"], "cpu").ops
    assert result.name == "async_io" and result.ok is False
    assert result.max_abs_err is not None and result.max_abs_err > 0 and result.tolerance == 0
    assert result.error is not None and result.error.startswith(check)


def test_an_exception_in_a_self_test_is_its_result(
    loaded: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    def raising(*args: Any) -> None:
        raise RuntimeError("illegal instruction, say")

    monkeypatch.setattr(loaded["cpu_lion"], "lion_steps", raising)
    (result,) = run_selftests(["cpu_lion"], "cpu").ops
    assert result.ok is False and result.error == "RuntimeError: illegal instruction, say"


# ------------------------------------------------------------------ GPU self-tests, dry run


@pytest.mark.parametrize("op", GPU_OPS)
def test_gpu_self_test_code_runs_against_the_fallback(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """No GPU here: run the GPU self-test's own code on the CPU with every front falling back,
    so a typo or a wrong reference in it fails now rather than on the GPU machine. Proves
    nothing about the kernels (tests/gpu does), only that references and fallbacks agree."""
    monkeypatch.setattr(_gpu_load.GpuOp, "resolve", lambda self, tensors, use_kernel=None, dtypes=(): None)
    ctx = SelfTestContext(torch.device("cpu"), (torch.float32, torch.float16, torch.bfloat16))
    selftest_for(op).run(ctx)
    assert ctx.checks
    failed = [c for c in ctx.checks if not (c.max_abs_err is not None and c.max_abs_err <= c.tolerance)]
    assert not failed, failed[:5]
