"""The GPU fronts' edge cases that the PyTorch fallbacks define and the kernels must match
(issue 12): NaN and infinities, tiny quantization groups, empty inputs, non-contiguous
optimizer params; and the quantizers' IEEE build flags.

These run without a GPU. tests/gpu runs the kernels against the same fallbacks there.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb
from kernels.quantization import dequantize, dequantize_fp8, quantize, quantize_fp8
from kernels.transformer import bias_gelu, layer_norm, scaled_masked_softmax
from op_builder.context import OpFlags
from op_builder.plan import make_plan
from tests.kernels.test_gpu_fallbacks import _fp8_encode, _int_reference, _lamb_numpy
from tests.unit.fakes import host

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

NAN, INF = math.nan, math.inf

# ----------------------------------------------------------------------------- quantizers


def _non_finite() -> torch.Tensor:
    """One group per case, 4 elements each."""
    return torch.tensor(
        [
            [1.0, NAN, -2.0, 3.0],
            [1.0, INF, -2.0, 3.0],
            [1.0, -INF, -2.0, 3.0],
            [INF, -INF, -2.0, 3.0],
            [INF, INF, INF, INF],
            [NAN, INF, -2.0, 3.0],
            [1.0, 0.5, -2.0, 3.0],  # finite: untouched by its neighbours
        ]
    )


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantize_nan_and_inf(bits: int, symmetric: bool) -> None:
    """torch's amin / amax keep NaN and IEEE division does the rest: NaN scale for a NaN,
    infinite for an infinity (NaN for inf - inf), code 0 throughout (inf / inf is NaN, which
    the rule stores as 0), NaN once dequantized."""
    x = _non_finite()
    q = quantize(x, bits, 4, symmetric)
    scale = q.scale.tolist()
    assert math.isnan(scale[0]) and math.isnan(scale[5])
    assert scale[1] == scale[2] == scale[3] == INF
    assert (scale[4] == INF) if symmetric else math.isnan(scale[4])  # max - min is inf - inf
    if not symmetric:
        assert q.offset is not None
        offsets = q.offset.tolist()
        assert math.isnan(offsets[0]) and offsets[1] == -2.0 and offsets[2] == -INF and offsets[4] == INF
    assert torch.all(q.data[:6] == 0)
    restored = dequantize(q)
    assert torch.all(torch.isnan(restored[:6]))
    # The finite group as it quantizes alone.
    alone = quantize(x[6:], bits, 4, symmetric)
    assert torch.equal(q.data[6:], alone.data) and torch.equal(restored[6:], dequantize(alone))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantize_nan_and_inf(fmt: str) -> None:
    """NaN scale and codes 0 for a NaN; for an infinity an infinite scale, a NaN code for the
    infinite element (inf / inf, kept by the clamp) and signed zeros for the finite ones."""
    x = _non_finite()
    q = quantize_fp8(x, 4, fmt)  # type: ignore[arg-type]
    codes = q.data.float()
    bits = q.data.view(torch.uint8)
    scale = q.scale.tolist()
    assert (
        math.isnan(scale[0]) and math.isnan(scale[5]) and torch.all(bits[0] == 0) and torch.all(bits[5] == 0)
    )
    assert scale[1] == INF and torch.isnan(codes[1, 1])
    assert bits[1, [0, 3]].tolist() == [0x00, 0x00] and bits[1, 2].item() == 0x80  # -2 / inf is -0
    assert torch.all(torch.isnan(codes[4]))
    assert torch.all(torch.isnan(dequantize_fp8(q)[:6]))
    alone = quantize_fp8(x[6:], 4, fmt)  # type: ignore[arg-type]
    assert torch.equal(bits[6:], alone.data.view(torch.uint8))


def _tiny(seed: int) -> torch.Tensor:
    """Groups of 8 whose absmax is about 3e-33 ... 3e-40: scales deep in the fp32 denormals."""
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(seed))
    return x * torch.tensor([1e-33, 1e-36, 1e-37, 1e-38, 1e-40])[:, None]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantize_tiny_groups_match_loop_reference(bits: int, symmetric: bool) -> None:
    """Denormal scales are ordinary numbers to the rules (numpy keeps denormals): no group
    collapses to zeros, as it did in a flush-to-zero kernel build."""
    x = _tiny(bits)
    q = quantize(x, bits, 8, symmetric)
    codes, scales, offsets = _int_reference(x.flatten().tolist(), 8, bits, symmetric)
    assert q.scale.tolist() == scales and all(s > 0 for s in scales)
    assert min(scales) < np.finfo(np.float32).tiny  # the case is about denormal scales
    unpacked = q.data.to(torch.int32)
    if bits == 4:
        nibbles = torch.stack((unpacked & 0xF, unpacked >> 4), dim=-1).reshape(5, 8)
        unpacked = (nibbles ^ 8) - 8 if symmetric else nibbles
    assert unpacked.flatten().tolist() == codes
    assert all(any(codes[g * 8 : g * 8 + 8]) for g in range(5))
    if not symmetric:
        assert q.offset is not None and q.offset.tolist() == offsets


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantize_tiny_groups_match_loop_reference(fmt: str) -> None:
    x = _tiny(3)
    q = quantize_fp8(x, 8, fmt)  # type: ignore[arg-type]
    fmax = 448.0 if fmt == "e4m3" else 57344.0
    codes = q.data.view(torch.uint8).tolist()
    scales = []
    for g, group in enumerate(x.tolist()):
        values = [np.float32(v) for v in group]
        scale = np.float32(max(abs(v) for v in values)) / np.float32(fmax)
        scales.append(scale)
        assert scale > 0 and q.scale[g].item() == float(scale)
        for i, v in enumerate(values):
            assert codes[g][i] == _fp8_encode(float(min(max(v / scale, -fmax), fmax)), fmt), (g, i)
        assert any(codes[g])
    assert min(scales) < np.finfo(np.float32).tiny  # the case is about denormal scales


def _planned_flags() -> dict[str, OpFlags]:
    env = {
        "DS_ACCELERATOR": "cuda",
        "TORCH_CUDA_ARCH_LIST": "8.0;9.0",
        "DS_BUILD_QUANTIZER": "1",
        "DS_BUILD_FP_QUANTIZER": "1",
        "DS_BUILD_TRANSFORMER": "1",
    }
    plan = make_plan(env, host(torch_cuda="12.4", toolkit="12.4"))
    assert plan.ok, plan.errors
    return {op.name: op.flags for op in plan.ops}


def test_quantizers_build_without_flush_to_zero() -> None:
    """--use_fast_math implies -ftz=true; the quantizers override it (and only they)."""
    flags = _planned_flags()
    for name in ("quantizer", "fp_quantizer"):
        device = flags[name].device
        assert "--use_fast_math" in device and "-ftz=false" in device and "-prec-div=true" in device
    assert "-ftz=false" not in flags["transformer"].device


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc not found: cannot compile the quantizers to PTX"
)
@pytest.mark.parametrize("name", ["quantizer", "fp_quantizer"])
def test_quantizer_ptx_has_no_flush_to_zero_instruction(tmp_path: Path, name: str) -> None:
    """The op's real device code (every .cu file) under its own flags holds no .ftz fp32
    instruction; the same sources under the flags without the override do (the check can fail)."""
    flags = _planned_flags()[name]
    sources = [s for s in flags.sources if s.endswith(".cu")]
    common = [f for f in flags.device if not f.startswith(("-gencode", "--threads"))]
    without = [f for f in common if f not in ("-ftz=false", "-prec-div=true")]
    includes = [f"-I{d}" for d in flags.include_dirs]
    ftz = re.compile(r"^\s*\S+\.ftz\.", re.MULTILINE)
    outputs = {
        (source, label): (tmp_path / f"{label}{i}.ptx", device)
        for i, source in enumerate(sources)
        for label, device in (("ours", common), ("fast_math", without))
    }

    def compile_ptx(key: tuple[str, str]) -> None:
        out, device = outputs[key]
        command = ["nvcc", *device, *includes, "-arch=compute_80", "-ptx", key[0], "-o", str(out)]
        subprocess.run(command, check=True, capture_output=True)

    # Two compiles at once (nvcc compiles one file on one core): fp_quantizer's four take ~40 s
    # one after the other on 2 cores.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(compile_ptx, outputs))
    for source in sources:
        ptx = {label: outputs[source, label][0].read_text() for label in ("ours", "fast_math")}
        assert "div.rn.f32" in ptx["ours"] and not ftz.search(ptx["ours"]), source
        assert ftz.search(ptx["fast_math"]), source


# ----------------------------------------------------------------------------- transformer


def test_softmax_visible_inf_or_nan_makes_the_row_nan() -> None:
    """As torch.softmax: a visible +inf or NaN score makes its whole row NaN; a hidden one (by
    the mask or causality) changes nothing; -inf is a hidden key; no visible key: zeros."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 4, 6, generator=gen)
    x[0, 0, 0, 1] = INF
    x[0, 0, 1, 2] = NAN
    x[0, 1, 0, 5] = INF  # hidden by causality (query 0 sees keys 0..2)
    x[0, 1, 1, 0] = INF
    mask = torch.zeros(1, 1, 4, 6, dtype=torch.bool)
    mask[0, 0, 1, 0] = True  # hides x[0, 1, 1, 0]'s +inf
    x[0, 0, 3, :] = -INF  # no visible key
    y = scaled_masked_softmax(x, mask, scale=0.5, causal=True)
    hidden = mask | (torch.arange(6)[None, :] > torch.arange(4)[:, None] + 2)
    ref = torch.softmax((x * 0.5).masked_fill(hidden, -INF), dim=-1)
    ref[0, 0, 3] = 0.0  # our contract for a row without a visible key; torch has NaN
    torch.testing.assert_close(y, ref, equal_nan=True)
    assert torch.all(torch.isnan(y[0, 0, 0])) and torch.all(torch.isnan(y[0, 0, 1]))
    assert not torch.any(torch.isnan(y[0, 1]))


def test_layer_norm_backward_without_rows() -> None:
    x = torch.empty(0, 5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    y = layer_norm(x, 5, w, b)
    grads = torch.autograd.grad(y, (x, w, b), torch.empty_like(y))
    ref = torch.autograd.grad(F.layer_norm(x, (5,), w, b), (x, w, b), torch.empty_like(y))
    assert grads[0].shape == (0, 5)
    for ours, theirs in zip(grads[1:], ref[1:]):
        assert torch.equal(ours, torch.zeros(5)) and torch.equal(theirs, torch.zeros(5))


@pytest.mark.parametrize("shape", [(4, 0), (0, 5), (2, 0, 3), (3, 2, 0), (0,)])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_of_empty_inputs(shape: tuple[int, ...], approximate: str) -> None:
    """No rows or no columns: F.gelu's empty result, and empty or zero gradients as autograd's."""
    x = torch.empty(shape, requires_grad=True)
    bias = torch.zeros(shape[-1], requires_grad=True)
    y = bias_gelu(x, bias, approximate)  # type: ignore[arg-type]
    ref = F.gelu(x + bias, approximate=approximate)
    assert y.shape == ref.shape == shape
    grads = torch.autograd.grad(y, (x, bias), torch.ones_like(y))
    expected = torch.autograd.grad(ref, (x, bias), torch.ones_like(ref))
    for ours, theirs in zip(grads, expected):
        assert ours.shape == theirs.shape and torch.equal(ours, theirs)


def test_bias_gelu_refuses_a_scalar() -> None:
    with pytest.raises(ValueError, match="at least one dimension"):
        bias_gelu(torch.tensor(1.0), torch.zeros(1))


def test_layer_norm_one_column_dx_is_exactly_zero() -> None:
    """x - mean is exactly 0 and dy * w minus its own row mean is exactly 0: dx is 0 (the
    kernel keeps that product unfused so this holds there too)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(7, 1, generator=gen).requires_grad_(True)
    w = torch.randn(1, generator=gen).requires_grad_(True)
    (dx,) = torch.autograd.grad(layer_norm(x, 1, w), x, torch.randn(7, 1, generator=gen))
    assert torch.all(dx == 0)


# ----------------------------------------------------------------------------- optimizers


def _layouts(gen: torch.Generator) -> list[torch.Tensor]:
    """Non-contiguous params: transposed, channels_last, a strided slice."""
    return [
        torch.randn(9, 13, generator=gen).t(),
        torch.randn(3, 7, 5, 4, generator=gen).to(memory_format=torch.channels_last),
        torch.randn(11, 30, generator=gen)[:, ::2],
    ]


def _grads(params: list[torch.nn.Parameter], step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(50 + step)
    return [torch.randn(p.shape, generator=gen) for p in params]


def test_fused_adam_non_contiguous_params_match_torch() -> None:
    data = _layouts(torch.Generator().manual_seed(0))
    ours = [torch.nn.Parameter(t) for t in data]
    theirs = [torch.nn.Parameter(t.clone(memory_format=torch.preserve_format)) for t in data]
    pointers = [(p.data_ptr(), p.stride()) for p in ours]
    kwargs = {"lr": 1e-2, "eps": 1e-6, "weight_decay": 0.1}
    opt, ref = FusedAdam(ours, **kwargs), torch.optim.AdamW(theirs, **kwargs)  # type: ignore[arg-type]
    for step in range(4):
        for group, g in ((ours, _grads(ours, step)), (theirs, _grads(theirs, step))):
            for p, gi in zip(group, g):
                p.grad = gi
        opt.step()
        ref.step()
    assert [(p.data_ptr(), p.stride()) for p in ours] == pointers  # updated in place
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lamb", "lion"])
def test_fused_lamb_and_lion_non_contiguous_params_match_the_rules(kind: str) -> None:
    data = _layouts(torch.Generator().manual_seed(1))
    start = [t.double().numpy().copy() for t in data]
    params = [torch.nn.Parameter(t) for t in data]
    opt: torch.optim.Optimizer
    if kind == "lamb":
        opt = FusedLamb(params, lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1)
    else:
        opt = FusedLion(params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    grads: list[list[np.ndarray]] = [[] for _ in params]
    for step in range(3):
        for i, (p, g) in enumerate(zip(params, _grads(params, step))):
            p.grad = g
            grads[i].append(g.double().numpy())
        opt.step()
    for p, p0, gs in zip(params, start, grads):
        assert not p.is_contiguous()
        if kind == "lamb":
            expected = _lamb_numpy(p0, gs, 1e-2, 0.9, 0.999, 1e-6, 0.1)
        else:
            expected = _lion_rule(p0, gs, 1e-2, 0.9, 0.99, 0.1)
        np.testing.assert_allclose(p.detach().double().numpy(), expected, rtol=1e-5, atol=1e-6)


def _lion_rule(
    p: np.ndarray, grads: list[np.ndarray], lr: float, b1: float, b2: float, wd: float
) -> np.ndarray:
    m = np.zeros_like(p)
    for g in grads:
        p = p * (1 - lr * wd) - lr * np.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
    return p


@pytest.mark.parametrize("cls", [FusedAdam, FusedLamb, FusedLion])
def test_zero_element_params_in_the_list(cls: type[torch.optim.Optimizer]) -> None:
    """Empty params step without error, and the others as they would without them."""
    gen = torch.Generator().manual_seed(2)
    values = [torch.randn(n, generator=gen) for n in (0, 5, 0, 33)]
    ours = [torch.nn.Parameter(v.clone()) for v in values]
    theirs = [torch.nn.Parameter(v.clone()) for v in values if v.numel()]
    opts = [cls(ours, lr=1e-2), cls(theirs, lr=1e-2)]  # type: ignore[call-arg]
    for step in range(3):
        for group in (ours, theirs):
            for p in group:
                p.grad = torch.full(p.shape, 0.1 * (step + 1))
        for opt in opts:
            opt.step()
    assert ours[0].numel() == 0 and ours[2].numel() == 0
    for a, b in zip([p for p in ours if p.numel()], theirs):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------- Lion near zero


def _lion_cancelling_inputs(n: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Momenta and grads with beta1 * m + (1 - beta1) * g at or near zero: g = -m * 0.9 / 0.1
    rounded to fp32 (the sum is a few ulps of the products, of either sign, or 0), a quarter of
    them scaled to denormal products."""
    gen = torch.Generator().manual_seed(21)
    m = torch.randn(n, generator=gen)
    m[: n // 4] *= 1e-38
    g = (-m.double() * 0.9 / (1 - 0.9)).float()
    return m, g


def _lion_chain(p: np.ndarray, m: np.ndarray, g: np.ndarray, fused: bool) -> tuple[np.ndarray, np.ndarray]:
    """One Lion step in fp32, element by element (numpy's float32 scalars round every product and
    sum and keep denormals); ``fused``: beta1 * m + (1 - beta1) * g as one fused multiply-add."""
    b1, b2, lr, decay = np.float32(0.9), np.float32(0.99), np.float32(1e-3), np.float32(1 - 1e-3 * 0.1)
    one_b1, one_b2 = np.float32(1 - 0.9), np.float32(1 - 0.99)
    p, m = p.copy(), m.copy()
    for i in range(p.size):
        if fused:  # the fp32 product is exact in fp64: one rounding of the whole sum (nearly)
            c = np.float32(np.float64(m[i]) * np.float64(b1) + np.float64(g[i] * one_b1))
        else:
            c = m[i] * b1 + g[i] * one_b1
        p[i] = p[i] * decay - lr * np.float32(np.sign(c))
        m[i] = m[i] * b2 + g[i] * one_b2
    return p, m


def test_fused_lion_fallback_rounds_each_product_near_zero() -> None:
    """The fallback's direction near zero is the unfused chain's, bit for bit (the kernel rounds
    the same way); a fused multiply-add flips or zeroes the direction of some of these inputs."""
    m0, g = _lion_cancelling_inputs()
    p = torch.nn.Parameter(torch.randn(m0.shape, generator=torch.Generator().manual_seed(22)))
    p0 = p.detach().numpy().copy()
    opt = FusedLion([p], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, use_kernel=False)
    opt.state[p]["exp_avg"] = m0.clone()
    p.grad = g.clone()
    opt.step()
    expected_p, expected_m = _lion_chain(p0, m0.numpy(), g.numpy(), fused=False)
    assert np.array_equal(p.detach().numpy(), expected_p)
    assert np.array_equal(opt.state[p]["exp_avg"].numpy(), expected_m)
    fused_p, _ = _lion_chain(p0, m0.numpy(), g.numpy(), fused=True)
    assert (fused_p != expected_p).sum() > 10  # the inputs do tell the two roundings apart
