"""The GPU fronts' PyTorch fallbacks (what runs without a GPU) against independent references.

The fallbacks implement the same formulas as the CUDA / ROCm kernels (two-pass
LayerNorm statistics, explicit backward formulas, quantizer rounding rules), so
these tests check the math the kernels implement; tests/gpu checks the kernels
against the same references on a GPU.
"""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernels import _gpu_load
from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb
from kernels.quantization import dequantize, dequantize_fp8, quantize, quantize_fp8
from kernels.transformer import (
    FusedBiasGelu,
    FusedLayerNorm,
    FusedScaledMaskedSoftmax,
    bias_gelu,
    layer_norm,
    scaled_masked_softmax,
)
from op_builder.registry import get_builder
from tests.kernels._half_bounds import assert_half_trajectory_close

# The header search path the op is compiled with (its family's includes/, then the shared one).
FP_INCLUDES = [f"-I{d}" for d in get_builder("fp_quantizer").include_paths()]
SHAPES = [(7,), (3, 127), (2, 5, 33)]  # odd sizes: no vector-friendly multiples

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")


def _params(dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]


def _set_grads(params: list[torch.nn.Parameter], step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def _run(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int) -> None:
    for step in range(steps):
        _set_grads(params, step)
        opt.step()


# ----------------------------------------------------------------------------- optimizers


@pytest.mark.parametrize(("adamw_mode", "reference"), [(True, torch.optim.AdamW), (False, torch.optim.Adam)])
def test_fused_adam_matches_torch(adamw_mode: bool, reference: type[torch.optim.Optimizer]) -> None:
    ours, theirs = _params(), _params()
    kwargs = {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-7, "weight_decay": 0.05}
    _run(FusedAdam(ours, adamw_mode=adamw_mode, **kwargs), ours, 6)  # type: ignore[arg-type]
    _run(reference(theirs, **kwargs), theirs, 6)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _adam_numpy(
    p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float, eps: float
) -> np.ndarray:
    """Adam without bias correction, float64, element by element."""
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for g in grads:
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * m / (np.sqrt(v) + eps)
    return p


def test_fused_adam_without_bias_correction() -> None:
    params = _params()
    start = [p.detach().double().numpy().copy() for p in params]
    opt = FusedAdam(params, lr=1e-2, eps=1e-6, bias_correction=False)
    grads: list[list[np.ndarray]] = [[] for _ in params]
    for step in range(4):
        _set_grads(params, step)
        for i, p in enumerate(params):
            assert p.grad is not None
            grads[i].append(p.grad.double().numpy().copy())
        opt.step()
    for p, p0, gs in zip(params, start, grads):
        expected = _adam_numpy(p0, gs, 1e-2, 0.9, 0.999, 1e-6)
        np.testing.assert_allclose(p.detach().double().numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_params_keep_fp32_state(dtype: torch.dtype) -> None:
    """Half-precision params: fp32 state and math, the param rounded once per step."""
    params = _params(dtype)
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = FusedAdam(params, lr=1e-2, weight_decay=0.01)
    ref = torch.optim.AdamW(master, lr=1e-2, weight_decay=0.01)
    for step in range(3):
        _set_grads(params, step)
        for p, q in zip(params, master):
            assert p.grad is not None
            q.grad = p.grad.float()
        opt.step()
        ref.step()
        with torch.no_grad():
            for p, q in zip(params, master):
                # One step from the same start: the fp32 results differ by fp32 roundings (the
                # fallback's mul/add against torch's lerp, whose vector code differs between
                # CPUs), which can tip the rounding to the param dtype by one ulp, no more.
                assert_half_trajectory_close(p, q.to(dtype), q.abs(), dtype, ulps=1.0, atol=1e-7)
                q.copy_(p.float())  # the reference continues from the rounded param, as ours does
    for p in params:
        assert opt.state[p]["exp_avg"].dtype == torch.float32
        assert opt.state[p]["exp_avg_sq"].dtype == torch.float32
        assert p.dtype == dtype


def _lamb_numpy(
    p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float, eps: float, wd: float
) -> np.ndarray:
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * p
        p_norm, u_norm = np.linalg.norm(p), np.linalg.norm(update)
        trust = p_norm / u_norm if p_norm > 0 and u_norm > 0 else 1.0
        p = p - lr * trust * update
    return p


def _lion_numpy(
    p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float, wd: float
) -> np.ndarray:
    out = p.copy().ravel()
    m = np.zeros_like(out)
    for g in grads:
        flat = g.ravel()
        for i in range(out.size):  # element by element: the rule as written
            c = b1 * m[i] + (1 - b1) * flat[i]
            out[i] = out[i] * (1 - lr * wd) - lr * (1.0 if c > 0 else -1.0 if c < 0 else 0.0)
            m[i] = b2 * m[i] + (1 - b2) * flat[i]
    return out.reshape(p.shape)


def _collect(
    opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int
) -> list[list[np.ndarray]]:
    grads: list[list[np.ndarray]] = [[] for _ in params]
    for step in range(steps):
        _set_grads(params, step)
        for i, p in enumerate(params):
            assert p.grad is not None
            grads[i].append(p.grad.double().numpy().copy())
        opt.step()
    return grads


def test_fused_lamb_matches_reference() -> None:
    params = _params()
    with torch.no_grad():
        params[0].zero_()  # ||p|| == 0: trust ratio 1
    start = [p.detach().double().numpy().copy() for p in params]
    grads = _collect(FusedLamb(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.1), params, 4)
    for p, p0, gs in zip(params, start, grads):
        expected = _lamb_numpy(p0, gs, 1e-2, 0.9, 0.99, 1e-6, 0.1)
        np.testing.assert_allclose(p.detach().double().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_fused_lion_matches_rule() -> None:
    params = _params()
    start = [p.detach().double().numpy().copy() for p in params]
    grads = _collect(FusedLion(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1), params, 4)
    for p, p0, gs in zip(params, start, grads):
        expected = _lion_numpy(p0, gs, 1e-3, 0.9, 0.99, 0.1)
        np.testing.assert_allclose(p.detach().double().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_fallback_warns_once_with_reason() -> None:
    params = _params()
    opt = FusedAdam(params)
    FusedAdam.op._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(opt, params, 3)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert "fused_adam" in messages[0] and "tensors are on cpu" in messages[0]
    assert opt.backend == "fallback"


def test_use_kernel_true_refuses_cpu_tensors() -> None:
    params = _params()
    _set_grads(params, 0)
    with pytest.raises(RuntimeError, match="tensors are on cpu"):
        FusedLion(params, use_kernel=True).step()


def test_state_dict_round_trip_restores_fp32_state() -> None:
    params = _params(torch.float16)
    opt = FusedAdam(params, lr=1e-2)
    _run(opt, params, 2)
    clone = [torch.nn.Parameter(p.detach().clone()) for p in params]
    other = FusedAdam(clone, lr=1e-2)
    other.load_state_dict(opt.state_dict())  # torch casts the state to the params' fp16 here
    _run(opt, params, 1)
    _run(other, clone, 1)
    for p, q in zip(params, clone):
        assert other.state[q]["exp_avg"].dtype == torch.float32
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-3)


def test_optimizer_rejects_bad_input() -> None:
    p = torch.nn.Parameter(torch.zeros(4))
    with pytest.raises(ValueError, match="betas"):
        FusedAdam([p], betas=(1.0, 0.9))
    p.grad = torch.zeros(4).to_sparse()
    with pytest.raises(ValueError, match="sparse"):
        FusedAdam([p]).step()


# ----------------------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("cols", [1, 127, 768])
def test_layer_norm_forward_backward(cols: int) -> None:
    gen = torch.Generator().manual_seed(cols)
    x = (torch.randn(3, 5, cols, generator=gen) * 2 + 0.5).requires_grad_(True)
    weight = torch.randn(cols, generator=gen).requires_grad_(True)
    bias = torch.randn(cols, generator=gen).requires_grad_(True)
    dy = torch.randn(3, 5, cols, generator=gen)
    ours = layer_norm(x, cols, weight, bias, eps=1e-5)
    ours_grads = torch.autograd.grad(ours, (x, weight, bias), dy)
    ref = F.layer_norm(x, (cols,), weight, bias, eps=1e-5)
    ref_grads = torch.autograd.grad(ref, (x, weight, bias), dy)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    # With one column, x - mean is exactly 0 here but rounding noise in torch, times
    # rstd = 1 / sqrt(eps): compare the gradients more loosely there.
    atol = 1e-4 if cols > 1 else 1e-3
    for a, b in zip(ours_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=atol)


def test_layer_norm_large_mean_small_spread() -> None:
    """The two-pass statistics keep fp32 accurate where raw sums of squares cancel."""
    x = 1000.0 + torch.randn(4, 4097, generator=torch.Generator().manual_seed(1)) * 0.01
    exact = F.layer_norm(x.double(), (4097,))
    ours_error = (layer_norm(x, 4097).double() - exact).abs().max().item()
    torch_error = (F.layer_norm(x, (4097,)).double() - exact).abs().max().item()
    assert ours_error < 1e-4
    assert ours_error <= torch_error


def test_layer_norm_gradcheck_and_module() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: layer_norm(x, 6, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x: layer_norm(x, 6), (x,))
    module = FusedLayerNorm((2, 3), elementwise_affine=True)
    y = module(torch.randn(5, 2, 3, generator=gen))
    assert y.shape == (5, 2, 3)
    with pytest.raises(ValueError, match="does not end with"):
        layer_norm(torch.zeros(2, 4), 5)


def test_layer_norm_bf16_close_to_fp32() -> None:
    x = torch.randn(8, 768, generator=torch.Generator().manual_seed(3))
    ours = layer_norm(x.bfloat16(), 768)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), F.layer_norm(x, (768,)), rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------- bias + GeLU


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("cols", [1, 127, 768])
def test_bias_gelu_forward_backward(approximate: str, cols: int) -> None:
    gen = torch.Generator().manual_seed(cols)
    x = (torch.randn(4, 3, cols, generator=gen) * 3).requires_grad_(True)
    b = torch.randn(cols, generator=gen).requires_grad_(True)
    dy = torch.randn(4, 3, cols, generator=gen)
    ours = bias_gelu(x, b, approximate)  # type: ignore[arg-type]
    ref = F.gelu(x + b, approximate=approximate)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    for a, r in zip(torch.autograd.grad(ours, (x, b), dy), torch.autograd.grad(ref, (x, b), dy)):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_gradcheck_and_module(approximate: str) -> None:
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b: bias_gelu(x, b, approximate), (x, b))  # type: ignore[arg-type]
    module = FusedBiasGelu(5, approximate)  # type: ignore[arg-type]
    torch.testing.assert_close(module(x.float()), F.gelu(x.float(), approximate=approximate))
    with pytest.raises(ValueError, match="approximate"):
        bias_gelu(x, b, "fast")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- softmax


def _softmax_reference(x: torch.Tensor, hidden: torch.Tensor, scale: float) -> torch.Tensor:
    s = (x * scale).masked_fill(hidden, -math.inf)
    y = torch.softmax(s, dim=-1)
    return torch.nan_to_num(y, nan=0.0)  # all-hidden rows: NaN in torch, zeros by our contract


def test_softmax_explicit_mask_forward_backward() -> None:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 4, 33, generator=gen).requires_grad_(True)
    mask = torch.rand(2, 1, 4, 33, generator=gen) < 0.3
    mask[1, 0, 2, :] = True  # one row with every key hidden
    dy = torch.randn(2, 3, 4, 33, generator=gen)
    ours = scaled_masked_softmax(x, mask, scale=0.37)
    ref = _softmax_reference(x, mask, 0.37)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    assert torch.all(ours[1, :, 2] == 0)
    (g_ours,) = torch.autograd.grad(ours, x, dy)
    (g_ref,) = torch.autograd.grad(ref, x, dy)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("q_len", "k_len"), [(5, 5), (3, 7), (6, 4)])
def test_softmax_causal(q_len: int, k_len: int) -> None:
    gen = torch.Generator().manual_seed(q_len * 10 + k_len)
    x = torch.randn(2, 2, q_len, k_len, generator=gen)
    hidden = torch.ones(q_len, k_len, dtype=torch.bool)
    for i in range(q_len):  # the rule, one query at a time
        for j in range(k_len):
            hidden[i, j] = j > i + (k_len - q_len)
    torch.testing.assert_close(
        FusedScaledMaskedSoftmax(scale=2.0, causal=True)(x), _softmax_reference(x, hidden, 2.0)
    )


def test_softmax_additive_inf_mask_in_the_input() -> None:
    """-inf already in the scores hides those keys; a row of only -inf gives zeros."""
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(1, 2, 3, 9, generator=gen)
    hidden = torch.rand(1, 2, 3, 9, generator=gen) < 0.4
    hidden[0, 1, 2] = True
    scores = x.masked_fill(hidden, -math.inf)
    torch.testing.assert_close(scaled_masked_softmax(scores, scale=0.5), _softmax_reference(x, hidden, 0.5))


def test_softmax_gradcheck_and_shapes() -> None:
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[:, 4] = True
    assert torch.autograd.gradcheck(lambda x: scaled_masked_softmax(x, mask, 0.5, causal=True), (x,))
    x5 = torch.randn(2, 2, 2, 3, 4, generator=gen)
    m5 = torch.rand(2, 1, 1, 3, 4, generator=gen) < 0.5
    torch.testing.assert_close(scaled_masked_softmax(x5, m5), _softmax_reference(x5, m5, 1.0))
    with pytest.raises(ValueError, match="broadcast"):
        scaled_masked_softmax(x5, torch.zeros(3, 3, dtype=torch.bool))


# ----------------------------------------------------------------------------- integer quantizer


def _f32(value: float) -> float:
    return float(np.float32(value))


def _int_reference(
    values: list[float], group_size: int, bits: int, symmetric: bool
) -> tuple[list[int], list[float], list[float]]:
    """Codes, scales, offsets of each group, in float32 arithmetic, one element at a time."""
    codes: list[int] = []
    scales: list[float] = []
    offsets: list[float] = []
    for start in range(0, len(values), group_size):
        group = [np.float32(v) for v in values[start : start + group_size]]
        low, high = min(group), max(group)
        if symmetric:
            qmax = (1 << (bits - 1)) - 1
            scale = np.float32(max(-low, high)) / np.float32(qmax)
            lo_code, hi_code, base = -qmax, qmax, np.float32(0)
        else:
            scale = np.float32(high - low) / np.float32((1 << bits) - 1)
            lo_code, hi_code, base = 0, (1 << bits) - 1, low
        scales.append(float(scale))
        offsets.append(float(low))
        for v in group:
            if scale == 0:
                codes.append(0)
                continue
            q = round(float(np.float32(v - base) / scale))  # Python's round(): half to even
            codes.append(min(max(q, lo_code), hi_code))
    return codes, scales, offsets


def _packed_reference(codes: list[int], bits: int) -> list[int]:
    if bits == 8:
        return codes
    return [(codes[i] & 0xF) | ((codes[i + 1] & 0xF) << 4) for i in range(0, len(codes), 2)]


def _quantizer_input() -> torch.Tensor:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 10, generator=gen) * 3
    x[1] = 0.0  # scale 0
    # Exact ties at scale 1 (symmetric int8): round half to even.
    x[2] = torch.tensor([-127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 3.5, 126.5, 100.0, 127.0])
    x[3] = 5.0  # asymmetric: max == min
    return x


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantize_matches_loop_reference(bits: int, symmetric: bool) -> None:
    x = _quantizer_input()
    q = quantize(x, bits=bits, group_size=10, symmetric=symmetric)
    codes, scales, offsets = _int_reference(x.flatten().tolist(), 10, bits, symmetric)
    data = q.data.flatten().tolist()
    if bits == 8:
        assert q.data.dtype == (torch.int8 if symmetric else torch.uint8)
        assert data == codes
    else:
        assert q.data.dtype == torch.uint8 and q.data.shape == (6, 5)
        assert data == _packed_reference(codes, 4)
    assert q.scale.tolist() == scales
    if symmetric:
        assert q.offset is None
    else:
        assert q.offset is not None and q.offset.tolist() == offsets
    expected = [
        _f32(_f32(c * scales[i // 10]) + (0.0 if symmetric else offsets[i // 10]))
        for i, c in enumerate(codes)
    ]
    restored = dequantize(q)
    assert restored.shape == x.shape and restored.dtype == x.dtype
    assert restored.flatten().tolist() == expected


def test_int_quantize_error_bound_and_options() -> None:
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(4, 64, generator=gen).half()
    for bits, levels in ((8, 127), (4, 7)):
        q = quantize(x, bits=bits)  # default: one group per row
        assert q.group_size == 64
        err = (dequantize(q).float() - x.float()).abs().amax(-1)
        assert torch.all(err <= q.scale * 0.5 + 1e-3), (bits, levels)
    assert dequantize(quantize(x), dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ValueError, match="even"):
        quantize(torch.zeros(9), bits=4, group_size=3)
    with pytest.raises(ValueError, match="multiple"):
        quantize(torch.zeros(10), group_size=4)


# ----------------------------------------------------------------------------- FP8

_FP8_SPEC = {"e4m3": (4, 3, 7, False), "e5m2": (5, 2, 15, True)}


def _fp8_decode(code: int, fmt: str) -> float:
    exp_bits, man_bits, bias, has_inf = _FP8_SPEC[fmt]
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = code & ((1 << man_bits) - 1)
    top = (1 << exp_bits) - 1
    if has_inf and exponent == top:
        return sign * math.inf if mantissa == 0 else math.nan
    if not has_inf and exponent == top and mantissa == (1 << man_bits) - 1:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + mantissa / (1 << man_bits)) * 2.0 ** (exponent - bias)


def _fp8_encode(value: float, fmt: str) -> int:
    """Nearest finite code, ties to the even code, saturating: a brute-force search."""
    if math.isnan(value):
        return 0x7F if fmt == "e4m3" else 0x7E
    finite = [(c, _fp8_decode(c, fmt)) for c in range(256)]
    finite = [(c, v) for c, v in finite if math.isfinite(v) and (v != 0 or c == 0 or c == 0x80)]
    best = min(abs(v - value) for _, v in finite)
    ties = [c for c, v in finite if abs(v - value) == best]
    if len(ties) > 1:
        ties = [c for c in ties if c & 1 == 0] or ties
        if value < 0 or (value == 0 and math.copysign(1, value) < 0):
            ties = [c for c in ties if c & 0x80] or ties
        else:
            ties = [c for c in ties if not c & 0x80] or ties
    return ties[0]


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantize_matches_loop_reference(fmt: str) -> None:
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(5, 16, generator=gen) * 10
    x[1] = 0.0
    x[2, :4] = torch.tensor([1e-6, -1e-6, 1.0, -448.0])  # tiny values land in subnormals
    q = quantize_fp8(x, group_size=16, format=fmt)  # type: ignore[arg-type]
    fmax = 448.0 if fmt == "e4m3" else 57344.0
    codes = q.data.view(torch.uint8).flatten().tolist()
    restored = dequantize_fp8(q).flatten().tolist()
    for g in range(5):
        group = [np.float32(v) for v in x[g].tolist()]
        scale = np.float32(max(abs(v) for v in group)) / np.float32(fmax)
        assert q.scale[g].item() == float(scale)
        for i, v in enumerate(group):
            scaled = 0.0 if scale == 0 else float(min(max(v / scale, -fmax), fmax))
            code = _fp8_encode(scaled, fmt)
            assert codes[g * 16 + i] == code, (fmt, g, i, scaled)
            assert restored[g * 16 + i] == _f32(_fp8_decode(code, fmt) * float(scale))


def test_fp8_types_and_errors() -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(10)).bfloat16()
    q = quantize_fp8(x)
    assert q.data.dtype == torch.float8_e4m3fn and q.group_size == 8
    assert dequantize_fp8(q).dtype == torch.bfloat16
    assert quantize_fp8(x, format="e5m2").data.dtype == torch.float8_e5m2
    with pytest.raises(ValueError, match="format"):
        quantize_fp8(x, format="e3m4")  # type: ignore[arg-type]


_CODEC_MAIN = r"""
#include <cstdio>
#include "gpu_fp8.h"
int main() {
  float v;
  while (std::scanf("%a", &v) == 1) {
    std::printf("%d %d\n", gpu_fp8::encode<4, 3>(v), gpu_fp8::encode<5, 2>(v));
  }
  for (int c = 0; c < 256; ++c) {
    std::printf("%a %a\n", gpu_fp8::decode<4, 3>(static_cast<uint8_t>(c)),
                gpu_fp8::decode<5, 2>(static_cast<uint8_t>(c)));
  }
}
"""


@pytest.mark.skipif(
    shutil.which("g++") is None,
    reason="g++ not found: cannot build the codec test program (apt-get install g++)",
)
def test_software_fp8_codec_matches_reference(tmp_path: Path) -> None:
    """gpu_fp8.h (the ROCm build's FP8 conversions), compiled for the host."""
    source = tmp_path / "codec.cpp"
    source.write_text(_CODEC_MAIN)
    binary = tmp_path / "codec"
    subprocess.run(["g++", "-O1", "-std=c++17", *FP_INCLUDES, str(source), "-o", str(binary)], check=True)
    gen = torch.Generator().manual_seed(11)
    samples = torch.cat(
        [
            torch.randn(300, generator=gen) * 100,
            torch.randn(200, generator=gen) * 1e-3,  # e4m3 subnormals
            torch.randn(100, generator=gen) * 1e-6,  # e5m2 subnormals
            torch.randn(100, generator=gen) * 3e4,
            torch.tensor([0.0, -0.0, 448.0, 464.0, 480.0, 1e9, -1e9, 57344.0, 61440.0, math.inf, -math.inf]),
            # exact midpoints between neighbouring codes: ties go to even
            torch.tensor([1.0625, 1.1875, 0.009765625 * 1.5, 2.0**-9 * 0.5, 2.0**-16 * 0.5, 1.125, 1.375]),
        ]
    ).tolist()
    samples.append(math.nan)
    text = "".join(float(np.float32(v)).hex() + "\n" for v in samples)
    out = subprocess.run([str(binary)], input=text, capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )
    for line, v in zip(out, samples):
        e4m3, e5m2 = map(int, line.split())
        if math.isnan(v):
            assert e4m3 & 0x7F == 0x7F and e5m2 & 0x7F == 0x7E
            continue
        e4_value = min(max(v, -448.0), 448.0)
        e5_value = min(max(v, -57344.0), 57344.0)
        assert e4m3 == _fp8_encode(e4_value, "e4m3"), v
        assert e5m2 == _fp8_encode(e5_value, "e5m2"), v
    decoded = out[len(samples) : len(samples) + 256]
    for code, line in enumerate(decoded):
        a, b = (float.fromhex(t) if "nan" not in t else math.nan for t in line.split())
        for got, fmt in ((a, "e4m3"), (b, "e5m2")):
            want = _fp8_decode(code, fmt)
            assert (math.isnan(got) and math.isnan(want)) or got == want, (code, fmt, got, want)


def test_gpu_op_reasons() -> None:
    """The fallback reasons the fronts print: device, dtype."""
    op = _gpu_load.GpuOp("transformer")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert op.resolve([torch.zeros(2)]) is None
        assert op.resolve([torch.zeros(2)]) is None
    assert len(caught) == 1 and "tensors are on cpu" in str(caught[0].message)
    assert op.resolve([torch.zeros(2)], use_kernel=False) is None
    reason = _gpu_load._unsupported([torch.zeros(2, dtype=torch.float64)], _gpu_load.KERNEL_DTYPES)
    assert reason is not None and "tensors are on cpu" in reason
    assert struct.calcsize("f") == 4


# ----------------------------------------------------------------------------- host-side packing

_PACKING_MAIN = r"""
#include <cstdio>
#include <vector>
#include "gpu_runtime.h"
// No GPU here: the packing logic runs on the host, and "launches" only record their packs.
#undef gpuGetLastError
#define gpuGetLastError() gpuSuccess
#include "gpu_multi_tensor.h"
int main() {
  int n = 0;
  if (std::scanf("%d", &n) != 1) return 1;
  std::vector<long long> sizes(n);
  std::vector<int64_t> sizes64(n);
  std::vector<void*> lists[4];
  for (int t = 0; t < n; ++t) {
    std::scanf("%lld", &sizes[t]);
    sizes64[t] = sizes[t];
    for (int d = 0; d < 4; ++d) lists[d].push_back(reinterpret_cast<void*>((t + 1) * 16 + d));
  }
  MtTable<4> table{n, {lists[0].data(), lists[1].data(), lists[2].data(), lists[3].data()}, sizes64.data()};
  multi_tensor_apply<4>(table, [&](const TensorListMeta<4>& meta, int blocks) {
    std::printf("launch %d %d\n", blocks, meta.count);
    for (int b = 0; b < blocks; ++b) {
      const int slot = mt_block_slot(meta, b);
      const long long chunk = static_cast<long long>(mt_block_chunk(meta, b));
      std::printf("%d %d %lld %lld", slot, meta.tensor_index[slot], chunk,
                  static_cast<long long>(meta.sizes[slot]));
      for (int d = 0; d < 4; ++d) std::printf(" %lld", reinterpret_cast<long long>(meta.addresses[d][slot]));
      std::printf("\n");
    }
  });
}
"""


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc not found: cannot build the packing test program"
)
def test_multi_tensor_packing_covers_every_chunk_once(tmp_path: Path) -> None:
    """The optimizers' host-side packing (gpu_multi_tensor.h): every chunk of every tensor
    goes to exactly one block, with its tensor's pointers, within one launch's capacity
    (TensorListMeta<4>::kTensors = 76 tensors, any number of blocks), and the blocks of all
    launches come in (tensor, chunk) order: fused_lamb numbers its per-chunk norm partials
    by that order to add them in a fixed one."""
    source = tmp_path / "packing.cu"
    source.write_text(_PACKING_MAIN)
    binary = tmp_path / "packing"
    includes = [f"-I{d}" for d in get_builder("fused_adam").include_paths()]
    subprocess.run(["nvcc", "-std=c++17", *includes, str(source), "-o", str(binary)], check=True)
    chunk = 65536
    sizes = [0, 1, chunk, chunk + 1, 5, 330 * chunk + 1, *([33] * 50), 0, 3 * chunk - 1, *([7] * 140)]
    text = f"{len(sizes)} " + " ".join(map(str, sizes))
    out = subprocess.run([str(binary)], input=text, capture_output=True, text=True, check=True).stdout
    seen: dict[tuple[int, int], int] = {}
    order: list[tuple[int, int]] = []
    launches = 0
    for line in out.splitlines():
        if line.startswith("launch"):
            launches += 1
            _, blocks, count = line.split()
            assert 0 < int(blocks) <= 1 << 22 and 0 < int(count) <= 76
            slots: set[int] = set()
            continue
        slot, tensor, chunk_index, size, *addresses = map(int, line.split())
        slots.add(slot)
        assert slot < int(count)
        assert size == sizes[tensor]
        assert addresses == [(tensor + 1) * 16 + d for d in range(4)]
        seen[(tensor, chunk_index)] = seen.get((tensor, chunk_index), 0) + 1
        order.append((tensor, chunk_index))
    expected = {(t, c) for t, n in enumerate(sizes) for c in range(-(-n // chunk))}
    assert set(seen) == expected
    assert all(count == 1 for count in seen.values())
    assert order == sorted(expected)
    assert launches == 3  # 196 non-empty tensors, 76 a launch
