"""Every GPU op on tensors of the second GPU while the first is current.

The bindings make the tensors' device current (launches, scratch, the multiprocessor count that
sizes LayerNorm's backward grid and workspace) and launch on that device's current stream; a
launch on the current device's would fault or read another device's memory. Each op is compared
with torch on the same second-GPU tensors, and the first GPU stays current throughout. Skipped
with the reason where fewer than two GPUs are visible.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb
from kernels.transformer import bias_gelu, layer_norm, residual_layer_norm, scaled_masked_softmax

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason=f"needs two GPUs (tensors on the second while the first is current); "
    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} visible",
)


@pytest.fixture
def second() -> Any:
    """cuda:1, with cuda:0 current before and (checked) after the test."""
    with torch.cuda.device(0):
        yield torch.device("cuda", 1)
        assert torch.cuda.current_device() == 0


def _randn(device: torch.device, *shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, device=device, generator=torch.Generator(device=device).manual_seed(seed))


# Register and loop sizes of LayerNorm (the loop path's workspace is sized on the second GPU too).
@pytest.mark.parametrize("cols", [768, 4097, 20000])
def test_layer_norm(second: torch.device, cols: int) -> None:
    x, w, b = _randn(second, 257, cols), _randn(second, cols, seed=1), _randn(second, cols, seed=2)
    dy = _randn(second, 257, cols, seed=3)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y = layer_norm(leaves[0], cols, leaves[1], leaves[2], use_kernel=True)
    grads = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    ref = F.layer_norm(ref_leaves[0], (cols,), ref_leaves[1], ref_leaves[2])
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy)
    assert y.device == second and all(g.device == second for g in grads)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0], ref_grads[0], rtol=1e-4, atol=4e-5)
    for ours, theirs in zip(grads[1:], ref_grads[1:]):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=4e-5 * math.sqrt(257))


def test_residual_layer_norm(second: torch.device) -> None:
    x, r = _randn(second, 33, 4096), _randn(second, 33, 4096, seed=1)
    leaves = [t.clone().requires_grad_(True) for t in (x, r)]
    y, s = residual_layer_norm(leaves[0], leaves[1], 4096, return_sum=True, use_kernel=True)
    dx, dr = torch.autograd.grad(y, leaves, _randn(second, 33, 4096, seed=2))
    assert y.device == s.device == dx.device == dr.device == second
    torch.testing.assert_close(s, x + r)
    torch.testing.assert_close(y, F.layer_norm(x + r, (4096,)), rtol=1e-4, atol=1e-5)
    assert torch.equal(dx, dr)


def test_bias_gelu(second: torch.device) -> None:
    x, b = _randn(second, 65, 4096).requires_grad_(True), _randn(second, 4096, seed=1).requires_grad_(True)
    y = bias_gelu(x, b, use_kernel=True)
    dy = _randn(second, 65, 4096, seed=2)
    dx, db = torch.autograd.grad(y, (x, b), dy)
    ref = F.gelu(x + b)
    ref_dx, ref_db = torch.autograd.grad(ref, (x, b), dy)
    assert y.device == dx.device == db.device == second
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dx, ref_dx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(db, ref_db, rtol=1e-4, atol=1e-4)


def test_scaled_masked_softmax(second: torch.device) -> None:
    x = _randn(second, 2, 3, 17, 300).requires_grad_(True)
    mask = _randn(second, 2, 1, 17, 300, seed=1) > 1.0
    y = scaled_masked_softmax(x, mask, scale=0.5, use_kernel=True)
    dy = _randn(second, 2, 3, 17, 300, seed=2)
    (dx,) = torch.autograd.grad(y, x, dy)
    ref = torch.softmax((x * 0.5).masked_fill(mask, -math.inf), dim=-1)
    (ref_dx,) = torch.autograd.grad(ref, x, dy)
    assert y.device == dx.device == second
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(dx, ref_dx, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (FusedAdam, {"lr": 1e-2, "weight_decay": 0.01}),
        (FusedLamb, {"lr": 1e-2, "weight_decay": 0.01, "max_grad_norm": 1.0}),
        (FusedLion, {"lr": 1e-3, "weight_decay": 0.1}),
    ],
    ids=["adam", "lamb", "lion"],
)
def test_fused_optimizers(
    second: torch.device, cls: type[torch.optim.Optimizer], kwargs: dict[str, Any]
) -> None:
    """The kernel on the second GPU against the PyTorch rule on the same tensors (Lamb with its
    clip factor, a device value of the second GPU)."""
    start = [_randn(second, n, seed=n) for n in (7, 4097, 65536 + 3)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    theirs = [torch.nn.Parameter(t.clone()) for t in start]
    opts = [cls(ours, use_kernel=True, **kwargs), cls(theirs, use_kernel=False, **kwargs)]  # type: ignore[call-arg]
    for step in range(3):
        for params in (ours, theirs):
            for p in params:
                p.grad = _randn(second, p.numel(), seed=100 * step + p.numel())
        for opt in opts:
            opt.step()
    assert opts[0].backend == "kernel"  # type: ignore[attr-defined]
    for p, q in zip(ours, theirs):
        assert p.device == second and opts[0].state[p]["exp_avg"].device == second
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
