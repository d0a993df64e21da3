"""The CPU optimizers on params and gradients the kernels cannot read directly.

Non-contiguous params (a transposed view, a channels_last weight, a strided slice) and sparse
gradients (CPUAdagrad, as torch.optim.Adagrad). References: torch.optim.AdamW / Adagrad given
the very same tensors (torch updates such params in place), and Lion written out below on
contiguous clones. Tolerances as in test_cpu_optim.py (the kernels contract a*b+c into FMAs);
Lion is compared exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion

RTOL, ATOL = 1e-5, 1e-6
STEPS = 10
LEVELS = ("scalar", "avx2", "avx512")
# torch.optim.Adagrad's own sparse path builds COO tensors without opting in or out of checks.
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")

ADAGRAD: dict[str, Any] = {"lr": 1e-2, "lr_decay": 0.01, "initial_accumulator_value": 0.1, "eps": 1e-10}


def plain_lion_step(
    p: Tensor, m: Tensor, g: Tensor, lr: float, wd: float, b1: float = 0.9, b2: float = 0.99
) -> None:
    c = m * b1 + g * (1 - b1)
    p.mul_(1 - lr * wd)
    p.sub_(torch.sign(c) * lr)
    m.copy_(m * b2 + g * (1 - b2))


# ------------------------------------------------------------------ non-contiguous params


def _layouts() -> dict[str, Callable[[torch.Generator], Tensor]]:
    """Non-contiguous params of about a thousand elements (vectors plus a tail)."""
    return {
        "transposed": lambda gen: torch.randn(29, 37, generator=gen).t(),
        "channels_last": lambda gen: torch.randn(3, 7, 5, 11, generator=gen).to(
            memory_format=torch.channels_last
        ),
        "strided_slice": lambda gen: torch.randn(31, 66, generator=gen)[:, ::2],
    }


@pytest.mark.parametrize("layout", list(_layouts()))
@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
def test_non_contiguous_params_match_the_reference(path: bool, layout: str, kind: str) -> None:
    gen = torch.Generator().manual_seed(0)
    data = _layouts()[layout](gen)
    assert not data.is_contiguous()
    base = data._base if data._base is not None else data
    base_before = base.clone()
    ours = torch.nn.Parameter(data)  # the same storage and strides
    theirs = torch.nn.Parameter(data.clone(memory_format=torch.preserve_format))
    half = torch.empty(data.shape, dtype=torch.bfloat16)
    if kind == "adam":
        opt: Any = CPUAdam([ours], lr=1e-2, eps=1e-6, weight_decay=0.1, use_kernel=path)
        ref: Any = torch.optim.AdamW([theirs], lr=1e-2, eps=1e-6, weight_decay=0.1)
    elif kind == "adagrad":
        opt = CPUAdagrad([ours], weight_decay=0.1, use_kernel=path, **ADAGRAD)
        ref = torch.optim.Adagrad([theirs], weight_decay=0.1, **ADAGRAD)
    else:
        opt = CPULion([ours], lr=1e-2, weight_decay=0.1, use_kernel=path)
        theirs = torch.nn.Parameter(data.contiguous())  # the reference runs on a contiguous copy
        momentum = torch.zeros_like(theirs)
    for _ in range(STEPS):
        g = torch.randn(data.shape, generator=gen)
        ours.grad = g.clone(memory_format=torch.preserve_format)
        theirs.grad = g.clone()
        opt.step(half_params=[half])
        if kind == "lion":
            with torch.no_grad():
                plain_lion_step(theirs, momentum, g, lr=1e-2, wd=0.1)
        else:
            ref.step()
        assert torch.equal(half, ours.detach().to(torch.bfloat16))
    assert ours.data_ptr() == data.data_ptr() and ours.stride() == data.stride()  # updated in place
    if kind == "lion":
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=0)
    else:
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=RTOL, atol=ATOL)
    if layout == "strided_slice":  # the columns between the param's stay as they were
        assert torch.equal(base[:, 1::2], base_before[:, 1::2])


@pytest.mark.parametrize("torch_cls", [torch.optim.AdamW, torch.optim.Adagrad], ids=["adamw", "adagrad"])
def test_state_from_torch_in_the_params_layout_is_taken(torch_cls: type[torch.optim.Optimizer]) -> None:
    """torch keeps the state of a channels_last param in channels_last; a state dict of such a
    state loads into ours and the training continues as torch's does."""
    gen = torch.Generator().manual_seed(1)
    data = torch.randn(2, 8, 3, 5, generator=gen).to(memory_format=torch.channels_last)
    theirs = torch.nn.Parameter(data.clone(memory_format=torch.preserve_format))
    kw: dict[str, Any] = {"lr": 1e-2, "weight_decay": 0.1}
    ref = torch_cls([theirs], **kw)
    grads = [torch.randn(data.shape, generator=gen) for _ in range(6)]
    for g in grads[:3]:
        theirs.grad = g.clone()
        ref.step()
    ours = torch.nn.Parameter(theirs.detach().clone(memory_format=torch.preserve_format))
    opt: Any = (CPUAdam if torch_cls is torch.optim.AdamW else CPUAdagrad)([ours], use_kernel=True, **kw)
    saved = copy.deepcopy(ref.state_dict())
    assert not saved["state"][0]["exp_avg" if torch_cls is torch.optim.AdamW else "sum"].is_contiguous()
    opt.load_state_dict(saved)
    for g in grads[3:]:
        theirs.grad, ours.grad = g.clone(), g.clone()
        ref.step()
        opt.step()
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ sparse gradients (Adagrad)


def _sparse_grad(gen: torch.Generator, shape: tuple[int, ...], sparse_dim: int, nnz: int) -> Tensor:
    """An uncoalesced COO gradient with repeated indices (the first two entries name one row)."""
    indices = torch.stack([torch.randint(0, shape[d], (nnz,), generator=gen) for d in range(sparse_dim)])
    if nnz >= 2:
        indices[:, 1] = indices[:, 0]
    values = torch.randn(nnz, *shape[sparse_dim:], generator=gen)
    grad = torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)
    assert nnz == 0 or not grad.is_coalesced()
    return grad


@pytest.mark.parametrize(
    ("shape", "sparse_dim", "nnz"),
    [((50, 8), 1, 12), ((40, 3, 33), 1, 9), ((6, 5), 2, 7), ((20, 4), 1, 0)],
    ids=["rows", "rows_of_matrices", "elements", "empty"],
)
def test_sparse_gradients_match_torch_adagrad(
    path: bool, shape: tuple[int, ...], sparse_dim: int, nnz: int
) -> None:
    gen = torch.Generator().manual_seed(2)
    initial = torch.randn(shape, generator=gen)
    ours, theirs = torch.nn.Parameter(initial.clone()), torch.nn.Parameter(initial.clone())
    opt = CPUAdagrad([ours], use_kernel=path, **ADAGRAD)
    ref = torch.optim.Adagrad([theirs], **ADAGRAD)
    touched = torch.zeros(shape, dtype=torch.bool)
    half = torch.empty(shape, dtype=torch.float16)
    for _ in range(STEPS):
        grad = _sparse_grad(gen, shape, sparse_dim, nnz)
        touched |= grad.to_dense() != 0
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt.step(half_params=[half])
        ref.step()
        assert torch.equal(half, ours.detach().to(torch.float16))
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(opt.state[ours]["sum"], ref.state[theirs]["sum"], rtol=RTOL, atol=0)
    assert torch.equal(ours.detach()[~touched], initial[~touched])  # rows never named: untouched
    assert float(opt.state[ours]["step"]) == STEPS


def test_sparse_embedding_gradient_through_autograd() -> None:
    """nn.Embedding(sparse=True) with a repeated index, end to end, against torch."""
    torch.manual_seed(3)
    ours, theirs = torch.nn.Embedding(30, 17, sparse=True), torch.nn.Embedding(30, 17, sparse=True)
    theirs.load_state_dict(ours.state_dict())
    opt = CPUAdagrad(ours.parameters(), use_kernel=True, **ADAGRAD)
    ref = torch.optim.Adagrad(theirs.parameters(), **ADAGRAD)
    for step in range(5):
        tokens = torch.tensor([1, 1, 2, 29, step])
        for module, o in ((ours, opt), (theirs, ref)):
            o.zero_grad()
            (module(tokens) ** 2).sum().backward()
            o.step()
    torch.testing.assert_close(ours.weight.detach(), theirs.weight.detach(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "fallback"])
def test_sparse_gradients_refused_where_torch_refuses_them(use_kernel: bool) -> None:
    grad = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2, 3), (4, 3))
    p = torch.nn.Parameter(torch.zeros(4, 3))
    p.grad = grad
    with pytest.raises(ValueError, match="weight_decay is not compatible with sparse gradients"):
        CPUAdagrad([p], weight_decay=0.1, use_kernel=use_kernel).step()
    with pytest.raises(RuntimeError, match="weight_decay option is not compatible with sparse"):
        torch.optim.Adagrad([p], weight_decay=0.1).step()  # what the message mirrors
    for cls in (CPUAdam, CPULion):
        with pytest.raises(ValueError, match="sparse gradients are not supported"):
            cls([p], use_kernel=use_kernel).step()
    assert torch.equal(p.detach(), torch.zeros(4, 3))
