"""The GPU ops' self-tests on a GPU: they pass through ``python -m op_builder selftest --device
cuda``, and each fails against a deliberately broken kernel (its compiled module patched to
perturb one element of its result)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from op_builder import ALL_OPS, get_builder
from op_builder.selftest import run_selftests

REPO = Path(__file__).resolve().parents[2]
GPU_OPS = tuple(name for name, builder in ALL_OPS.items() if builder.target == "gpu")
RESULT_KEYS = {"name", "ok", "device", "max_abs_err", "tolerance", "seconds", "isa", "error", "skipped"}


def _runnable(op: str) -> bool:
    # fp_quantizer's FP8 kernels need sm_80 or newer (ROCm: no such limit here).
    return (
        op != "fp_quantizer" or torch.version.hip is not None or torch.cuda.get_device_capability() >= (8, 0)
    )


def selftest(*args: str) -> subprocess.CompletedProcess[str]:
    # The arch list stays: without it the command would target the detected GPU, a build key
    # other than the one this session's ops were JIT-built under, and build them all again.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "op_builder", "selftest", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )


def test_gpu_self_tests_pass_through_the_command() -> None:
    ops = [op for op in GPU_OPS if _runnable(op)]
    done = selftest(*ops, "--device", "auto", "--json")
    data = json.loads(done.stdout)
    assert done.returncode == 0, json.dumps(data, indent=2) + done.stderr
    assert data["ok"] is True and data["device"] == "cuda"
    assert [op["name"] for op in data["ops"]] == ops
    for op in data["ops"]:
        assert set(op) == RESULT_KEYS
        assert op["ok"] is True and op["error"] is None and op["skipped"] is None, op
        assert op["device"] == "cuda" and op["isa"] is None
        assert 0 <= op["max_abs_err"] <= op["tolerance"], op


@pytest.mark.parametrize("op", GPU_OPS)
def test_each_gpu_self_test_passes(op: str) -> None:
    if not _runnable(op):
        pytest.skip("fp_quantizer needs sm_80 or newer")
    (result,) = run_selftests([op], "cuda").ops
    assert result.ok, result


# ------------------------------------------------------------------ the checks can fail


def _perturb_params(real: Callable[..., Any]) -> Callable[..., Any]:
    """An optimizer kernel (grads, params, *state, *scalars) that also moves one element of
    the largest param by 1e-2 (a fifth of one step)."""

    def broken(grads: list[torch.Tensor], params: list[torch.Tensor], *rest: Any) -> Any:
        result = real(grads, params, *rest)
        largest = max(params, key=lambda p: p.numel())
        if largest.numel() > 100_000:
            largest.view(-1)[123_457] += 1e-2
        return result

    return broken


def _perturb_layer_norm(real: Callable[..., Any]) -> Callable[..., Any]:
    def broken(*args: Any) -> Any:
        y, mean, rstd = real(*args)
        y.view(-1)[-1] += 4.0  # far beyond even bf16's tolerance
        return y, mean, rstd

    return broken


def _flip_first_code(real: Callable[..., Any]) -> Callable[..., Any]:
    """A quantizer whose first code has its lowest bit flipped (group 0 is zeros: code 0 -> 1)."""

    def broken(*args: Any) -> Any:
        codes, *rest = real(*args)
        codes.view(-1).view(torch.uint8)[0] ^= 1
        return (codes, *rest)

    return broken


BREAKAGES: dict[str, tuple[str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "fused_adam": ("adam", _perturb_params),
    "fused_lamb": ("lamb", _perturb_params),
    "fused_lion": ("lion", _perturb_params),
    "transformer": ("layer_norm_forward", _perturb_layer_norm),
    "quantizer": ("quantize", _flip_first_code),
    "fp_quantizer": ("quantize", _flip_first_code),
}


@pytest.mark.parametrize("op", GPU_OPS)
def test_a_broken_gpu_kernel_fails(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    if not _runnable(op):
        pytest.skip("fp_quantizer needs sm_80 or newer")
    module = get_builder(op).load()
    name, breaker = BREAKAGES[op]
    monkeypatch.setattr(module, name, breaker(getattr(module, name)))
    (result,) = run_selftests([op], "cuda").ops
    assert result.name == op and result.ok is False, result
    assert result.max_abs_err is not None and result.tolerance is not None, result
    assert result.max_abs_err > result.tolerance, result
    assert result.error is not None and "tolerance" in result.error
