"""Fake kernels of the stable build's ops, so torch.compile can trace the fronts through them.

A stable build registers its kernels in a namespace of ``torch.ops`` (``op_builder.stable_abi``);
torch.compile runs each op on fake tensors first and needs to know, without running the kernel,
what it returns. These say it: the shapes and dtypes ``csrc/bindings.cpp`` allocates, one entry per
op. A pybind11 build has no ops in torch.ops and gets none.
"""

from __future__ import annotations

import threading
from types import ModuleType

import torch
from torch import Tensor

_registered: set[str] = set()
_lock = threading.Lock()


def _rows(x: Tensor) -> int:
    """Rows as the binding counts them: leading elements over the last dim, 0 when it is empty."""
    cols = x.shape[-1]
    return 0 if cols == 0 else x.numel() // cols


def _stats(x: Tensor) -> Tensor:
    return x.new_empty((_rows(x),), dtype=torch.float32)


def _maybe(wanted: bool, like: Tensor, cols: int) -> Tensor | None:
    return like.new_empty((cols,)) if wanted else None


def layer_norm_forward(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float
) -> tuple[Tensor, ...]:
    return torch.empty_like(x), _stats(x), _stats(x)


def layer_norm_backward(
    grad_output: Tensor, x: Tensor, weight: Tensor | None, mean: Tensor, rstd: Tensor, affine_grads: bool
) -> tuple[Tensor | None, ...]:
    cols = x.shape[-1]
    return torch.empty_like(x), _maybe(affine_grads, x, cols), _maybe(affine_grads, x, cols)


def residual_layer_norm_forward(
    x: Tensor,
    residual: Tensor,
    hidden_bias: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
) -> tuple[Tensor, ...]:
    return torch.empty_like(x), torch.empty_like(x), _stats(x), _stats(x)


def residual_layer_norm_backward(
    grad_output: Tensor,
    sum: Tensor,  # the binding's argument name
    weight: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    grad_sum: Tensor | None,
    affine_grads: bool,
    residual_grad: bool,
) -> tuple[Tensor | None, ...]:
    cols = sum.shape[-1]
    dresidual = torch.empty_like(sum) if residual_grad else None
    return torch.empty_like(sum), dresidual, _maybe(affine_grads, sum, cols), _maybe(affine_grads, sum, cols)


def bias_gelu_forward(x: Tensor, bias: Tensor, approximate: str) -> Tensor:
    return torch.empty_like(x)


def bias_gelu_backward(
    grad_output: Tensor, x: Tensor, bias: Tensor, approximate: str
) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), x.new_empty((x.shape[-1],))


def softmax_forward(x: Tensor, mask: Tensor | None, scale: float, causal: bool) -> Tensor:
    return torch.empty_like(x)


def softmax_backward(grad_output: Tensor, y: Tensor, scale: float) -> Tensor:
    return torch.empty_like(y)


FAKES = {
    fn.__name__: fn
    for fn in (
        layer_norm_forward,
        layer_norm_backward,
        residual_layer_norm_forward,
        residual_layer_norm_backward,
        bias_gelu_forward,
        bias_gelu_backward,
        softmax_forward,
        softmax_backward,
    )
}


def register_fakes(namespace: str) -> None:
    """Give the ops in ``torch.ops.<namespace>`` their fakes; once per namespace and process
    (torch refuses a second fake for one op)."""
    with _lock:
        if namespace in _registered:
            return
        for name, fn in FAKES.items():
            torch.library.register_fake(f"{namespace}::{name}", fn)
        _registered.add(namespace)


def on_load(name: str, module: ModuleType) -> None:
    """``LazyOp``'s hook: a stable module's ops get their fakes when the op first loads."""
    namespace = getattr(module, "op_namespace", None)
    if isinstance(namespace, str):
        register_fakes(namespace)
