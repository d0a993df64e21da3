"""The transformer op's fake kernels (kernels/transformer/_fakes.py) against the schemas its stable
binding registers: every op has one, each accepts its schema's arguments, and each returns the
shapes and dtypes the PyTorch fallback (which the kernels are tested equal to) returns. The schemas
are read from csrc/bindings.cpp and defined in a namespace of this test's, so no GPU and no built
op are needed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernels.transformer import _fakes
from kernels.transformer.gelu import _gelu_torch
from kernels.transformer.norm import _ln_backward_torch, _ln_forward_torch
from kernels.transformer.residual_norm import _residual_sum_torch

BINDINGS = Path(__file__).resolve().parents[3] / "kernels" / "transformer" / "csrc" / "bindings.cpp"
NAMESPACE = "imagegen_test_transformer_fakes"


def schemas() -> dict[str, str]:
    """Each ``m.def`` of the stable registration, its adjacent string literals joined."""
    text = BINDINGS.read_text()
    block = text[text.index("OP_LIBRARY(m)") : text.index("OP_LIBRARY_IMPL(")]
    found = {}
    for literals in re.findall(r'm\.def\(((?:\s*"[^"]*")+)\s*\)', block):
        schema = "".join(re.findall(r'"([^"]*)"', literals))
        found[schema.split("(", 1)[0]] = schema
    return found


@pytest.fixture(scope="module")
def ops() -> Iterator[Any]:
    library = torch.library.Library(NAMESPACE, "DEF")
    for schema in schemas().values():
        library.define(schema)
    _fakes.register_fakes(NAMESPACE)
    yield getattr(torch.ops, NAMESPACE)
    library._destroy()


def test_every_tensor_op_of_the_binding_has_a_fake() -> None:
    assert set(schemas()) == {*_fakes.FAKES, "has_bf16"}


def _like(got: object, expected: object) -> None:
    if expected is None:
        assert got is None
        return
    assert isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)
    assert (tuple(got.shape), got.dtype) == (tuple(expected.shape), expected.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_fakes_return_what_the_fallback_returns(ops: Any, dtype: torch.dtype) -> None:
    rows, cols = 6, 24
    x = torch.randn(rows, cols, dtype=dtype)
    residual = torch.randn(rows, cols, dtype=dtype)
    w, b = torch.randn(cols, dtype=dtype), torch.randn(cols, dtype=dtype)
    y, mean, rstd = _ln_forward_torch(x, w, b, 1e-5)
    dx, dweight, dbias = _ln_backward_torch(y, x, w, mean, rstd)
    s = _residual_sum_torch(x, residual, b)
    scores = torch.randn(2, 3, 4, 5, dtype=dtype)
    expected = {
        "layer_norm_forward": (y, mean, rstd),
        "layer_norm_backward": (dx, dweight.to(dtype), dbias.to(dtype)),
        "layer_norm_backward_plain": (dx, None, None),
        "residual_layer_norm_forward": (y, s, mean, rstd),
        "residual_layer_norm_backward": (dx, dx, dweight.to(dtype), dbias.to(dtype)),
        "residual_layer_norm_backward_plain": (dx, None, None, None),
        "bias_gelu_forward": _gelu_torch(x + b, "none"),
        "bias_gelu_backward": (dx, b),
        "softmax_forward": scores.softmax(-1),
        "softmax_backward": scores,
    }
    with FakeTensorMode() as mode:
        fx, fres, fw, fb, fmean, frstd, fscores = (
            mode.from_tensor(t) for t in (x, residual, w, b, mean, rstd, scores)
        )
        mask = mode.from_tensor(torch.zeros(1, 3, 4, 5, dtype=torch.bool))
        got = {
            "layer_norm_forward": ops.layer_norm_forward(fx, fw, fb, 1e-5),
            "layer_norm_backward": ops.layer_norm_backward(fx, fx, fw, fmean, frstd, True),
            "layer_norm_backward_plain": ops.layer_norm_backward(fx, fx, None, fmean, frstd, False),
            "residual_layer_norm_forward": ops.residual_layer_norm_forward(fx, fres, fb, fw, fb, 1e-5),
            "residual_layer_norm_backward": ops.residual_layer_norm_backward(
                fx, fx, fw, fmean, frstd, fx, True, True
            ),
            "residual_layer_norm_backward_plain": ops.residual_layer_norm_backward(
                fx, fx, None, fmean, frstd, None, False, False
            ),
            "bias_gelu_forward": ops.bias_gelu_forward(fx, fb, "tanh"),
            "bias_gelu_backward": ops.bias_gelu_backward(fx, fx, fb, "none"),
            "softmax_forward": ops.softmax_forward(fscores, mask, 0.5, True),
            "softmax_backward": ops.softmax_backward(fscores, fscores, 0.5),
        }
    assert set(got) == set(expected)
    for name, want in expected.items():
        result = got[name]
        if isinstance(want, tuple):
            assert isinstance(result, (tuple, list)) and len(result) == len(want), name
            for r, e in zip(result, want, strict=True):
                _like(r, e)
        else:
            _like(result, want)


def test_rows_of_no_columns_have_no_statistics(ops: Any) -> None:
    """As the binding counts rows: none when the last dim is empty."""
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(5, 0))
        _, mean, rstd = ops.layer_norm_forward(x, None, None, 1e-5)
    assert tuple(mean.shape) == tuple(rstd.shape) == (0,)
