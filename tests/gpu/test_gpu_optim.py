"""fused_adam / fused_lamb / fused_lion kernels against torch and the PyTorch rule on the same GPU."""

from __future__ import annotations

import pytest
import torch

from kernels.fused_optim import FusedAdam, FusedLamb, FusedLion
from tests.gpu._tolerances import DTYPES

# Awkward sizes: 1, odd, a vector-friendly one, and one spanning several 64K-element chunks.
SIZES = (1, 127, 768, 4097, 3 * 65536 + 5)


def _params(device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...] = SIZES) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(n, device=device, generator=gen).to(dtype).requires_grad_(True) for n in sizes]


def _clone(params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach().clone().requires_grad_(True) for p in params]


def _steps(opts: list[torch.optim.Optimizer], groups: list[list[torch.Tensor]], steps: int) -> None:
    for step in range(steps):
        gen = torch.Generator(device=groups[0][0].device).manual_seed(10 + step)
        grads = [torch.randn(p.shape, device=p.device, generator=gen).to(p.dtype) for p in groups[0]]
        for params in groups:
            for p, g in zip(params, grads):
                p.grad = g.clone()
        for opt in opts:
            opt.step()


def _assert_same(a: list[torch.Tensor], b: list[torch.Tensor], dtype: torch.dtype) -> None:
    # Both sides do fp32 math; results differ by fp32 rounding, then by at most one
    # rounding step of the param dtype.
    ulp = torch.finfo(dtype).eps
    for x, y in zip(a, b):
        torch.testing.assert_close(x.float(), y.float(), rtol=max(2 * ulp, 1e-5), atol=1e-5)


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_fused_adam_fp32_matches_torch(device: torch.device, adamw_mode: bool) -> None:
    ours = _params(device, torch.float32)
    theirs = _clone(ours)
    kwargs = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}
    reference = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    opt = FusedAdam(ours, adamw_mode=adamw_mode, use_kernel=True, **kwargs)  # type: ignore[arg-type]
    _steps([opt, reference(theirs, fused=True, **kwargs)], [ours, theirs], 5)
    assert opt.backend == "kernel"
    _assert_same(ours, theirs, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias_correction", [True, False])
def test_fused_adam_matches_rule(device: torch.device, dtype: torch.dtype, bias_correction: bool) -> None:
    ours = _params(device, dtype)
    theirs = _clone(ours)
    kwargs = {"lr": 1e-3, "weight_decay": 0.01, "bias_correction": bias_correction}
    opts = [FusedAdam(ours, use_kernel=True, **kwargs), FusedAdam(theirs, use_kernel=False, **kwargs)]  # type: ignore[arg-type]
    _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, dtype)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(
            opts[0].state[p]["exp_avg_sq"], opts[1].state[q]["exp_avg_sq"], rtol=1e-5, atol=1e-8
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_lamb_matches_rule(device: torch.device, dtype: torch.dtype) -> None:
    ours = _params(device, dtype)
    with torch.no_grad():
        ours[1].zero_()  # trust ratio 1 for a zero tensor
    theirs = _clone(ours)
    kwargs = {"lr": 1e-2, "weight_decay": 0.01}
    opts = [FusedLamb(ours, use_kernel=True, **kwargs), FusedLamb(theirs, use_kernel=False, **kwargs)]  # type: ignore[arg-type]
    _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_lion_matches_rule(device: torch.device, dtype: torch.dtype) -> None:
    ours = _params(device, dtype)
    theirs = _clone(ours)
    kwargs = {"lr": 1e-3, "weight_decay": 0.1}
    opts = [FusedLion(ours, use_kernel=True, **kwargs), FusedLion(theirs, use_kernel=False, **kwargs)]  # type: ignore[arg-type]
    _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, dtype)


def test_many_tensors_and_chunks_span_launches(device: torch.device) -> None:
    """More tensors than one launch's table holds (36 for Adam), and more chunks than its
    block map (320): the host splits the work over several launches."""
    sizes = (*([33] * 50), 330 * 65536 + 1, *([5] * 10))
    ours = _params(device, torch.float32, sizes)
    theirs = _clone(ours)
    opts = [FusedAdam(ours, use_kernel=True), FusedAdam(theirs, use_kernel=False)]
    _steps(opts, [ours, theirs], 2)
    _assert_same(ours, theirs, torch.float32)


def test_misaligned_params_take_the_scalar_path(device: torch.device) -> None:
    base = torch.randn(4097 + 1, device=device)
    ours = [base[1:].clone().requires_grad_(True)]  # clone is aligned: keep a misaligned view
    view = torch.nn.Parameter(base[1:])  # storage offset 1: not 16-byte aligned
    theirs = _clone(ours)
    opts = [FusedLion([view], use_kernel=True), FusedLion(theirs, use_kernel=False)]
    _steps(opts, [[view], theirs], 3)
    _assert_same([view], theirs, torch.float32)
