"""transformer kernels (LayerNorm, bias + GeLU, scaled masked softmax) against torch, fwd + bwd."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kernels.transformer import _op as transformer_op
from kernels.transformer import bias_gelu, layer_norm, scaled_masked_softmax
from tests.gpu._inputs import offset_view, on_side_stream
from tests.gpu._tolerances import DTYPES, TOLERANCE

HIDDEN = (1, 127, 768, 4097, 8192, 12288)
ROWS = (3, 1001)  # neither is a multiple of the rows a block handles


def _inputs(device: torch.device, dtype: torch.dtype, rows: int, cols: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, cols, device=device, generator=gen) * 2 + 0.5
    w = torch.randn(cols, device=device, generator=gen)
    b = torch.randn(cols, device=device, generator=gen)
    dy = torch.randn(rows, cols, device=device, generator=gen)
    return [t.to(dtype) for t in (x, w, b, dy)]


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_layer_norm(device: torch.device, dtype: torch.dtype, cols: int, rows: int) -> None:
    x, w, b, dy = _inputs(device, dtype, rows, cols, cols + rows)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y = layer_norm(leaves[0], cols, leaves[1], leaves[2], use_kernel=True)
    grads = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [t.float().requires_grad_(True) for t in (x, w, b)]
    ref = F.layer_norm(ref_leaves[0], (cols,), ref_leaves[1], ref_leaves[2])
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy.float())
    assert y.dtype == dtype
    _close(y, ref, dtype)
    if cols == 1:
        # x - mean is exactly 0, and the kernel subtracts from dy * w (rounded once, never
        # fused into the subtraction) the row's mean of that same rounded product: dx is
        # exactly 0. dweight is rounding noise in the reference.
        assert torch.all(grads[0] == 0)
        _close(grads[2], ref_grads[2], dtype, scale=rows)
        return
    _close(grads[0], ref_grads[0], dtype, scale=4)
    # dweight / dbias sum over rows: absolute error grows like sqrt(rows).
    _close(grads[1], ref_grads[1], dtype, scale=math.sqrt(rows) * 4)
    _close(grads[2], ref_grads[2], dtype, scale=math.sqrt(rows) * 4)


def test_layer_norm_without_affine(device: torch.device) -> None:
    x, _, _, dy = _inputs(device, torch.float32, 33, 768, 1)
    leaf = x.clone().requires_grad_(True)
    y = layer_norm(leaf, 768, use_kernel=True)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    ref_leaf = x.clone().requires_grad_(True)
    ref = F.layer_norm(ref_leaf, (768,))
    (ref_dx,) = torch.autograd.grad(ref, ref_leaf, dy)
    _close(y, ref, torch.float32)
    _close(dx, ref_dx, torch.float32, scale=4)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
def test_bias_gelu(device: torch.device, approximate: str, dtype: torch.dtype, cols: int) -> None:
    x, _, b, dy = _inputs(device, dtype, 1001, cols, cols)
    leaves = [x.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    y = bias_gelu(leaves[0], leaves[1], approximate, use_kernel=True)  # type: ignore[arg-type]
    grads = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [x.float().requires_grad_(True), b.float().requires_grad_(True)]
    ref = F.gelu(ref_leaves[0] + ref_leaves[1], approximate=approximate)
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy.float())
    _close(y, ref, dtype)
    _close(grads[0], ref_grads[0], dtype)
    _close(grads[1], ref_grads[1], dtype, scale=math.sqrt(1001) * 4)


def _softmax_reference(x: torch.Tensor, hidden: torch.Tensor, scale: float) -> torch.Tensor:
    y = torch.softmax((x.float() * scale).masked_fill(hidden, -math.inf), dim=-1)
    return torch.nan_to_num(y, nan=0.0)


def _causal(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    q = torch.arange(q_len, device=device)[:, None]
    k = torch.arange(k_len, device=device)[None, :]
    return k > q + (k_len - q_len)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_len", HIDDEN)
@pytest.mark.parametrize("mode", ["mask", "causal", "both"])
def test_softmax(device: torch.device, dtype: torch.dtype, k_len: int, mode: str) -> None:
    gen = torch.Generator(device=device).manual_seed(k_len)
    batch, heads, q_len = 2, 3, 5
    x = (torch.randn(batch, heads, q_len, k_len, device=device, generator=gen) * 3).to(dtype)
    dy = torch.randn(batch, heads, q_len, k_len, device=device, generator=gen).to(dtype)
    mask = None
    hidden = torch.zeros(1, 1, q_len, k_len, dtype=torch.bool, device=device)
    if mode in ("mask", "both"):
        mask = torch.rand(batch, 1, q_len, k_len, device=device, generator=gen) < 0.3
        mask[0, 0, 1] = True  # a row with every key hidden -> zeros
        hidden = hidden | mask
    causal = mode in ("causal", "both")
    if causal:
        hidden = hidden | _causal(q_len, k_len, device)
    leaf = x.clone().requires_grad_(True)
    y = scaled_masked_softmax(leaf, mask, scale=0.125, causal=causal, use_kernel=True)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    ref_leaf = x.float().requires_grad_(True)
    ref = _softmax_reference(ref_leaf, hidden, 0.125)
    (ref_dx,) = torch.autograd.grad(ref, ref_leaf, dy.float())
    _close(y, ref, dtype)
    _close(dx, ref_dx, dtype)
    if mask is not None:
        assert torch.all(y[0, :, 1] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_len", [1, 2, 7, 31, 32, 33, 100, 127, 128, 129, 255, 256])
def test_softmax_short_rows_invariant_under_a_key_permutation(
    device: torch.device, dtype: torch.dtype, k_len: int
) -> None:
    """Rows of up to 256 keys: permuting the keys (and the mask with them) permutes the output
    and its gradient. Each key's exponential is the same computation wherever it sits; only the
    order of the row's sums changes, which moves a result by a few roundings per level of a
    summation tree. So the bound is torch's own error on the same data (torch.softmax on the
    same input dtype against float64, for the plain and the permuted inputs), times the tree's
    depth log2(2 * k_len); a key read from the wrong slot, or a lane's keys counted twice or
    not at all, is off by the values themselves."""
    gen = torch.Generator(device=device).manual_seed(k_len)
    shape = (2, 3, 9, k_len)
    x = (torch.randn(shape, device=device, generator=gen) * 4).to(dtype)
    dy = torch.randn(shape, device=device, generator=gen).to(dtype)
    mask = torch.rand(2, 1, 9, k_len, device=device, generator=gen) < 0.3
    mask[..., 0] = False  # every row keeps a visible key
    perm = torch.randperm(k_len, device=device, generator=gen)

    def run(xs: torch.Tensor, ms: torch.Tensor, dys: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Ours (y, dx), and torch's error on y and dx for these inputs."""
        leaf = xs.clone().requires_grad_(True)
        y = scaled_masked_softmax(leaf, ms, scale=0.5, use_kernel=True)
        (dx,) = torch.autograd.grad(y, leaf, dys)
        exact_leaf = xs.double().requires_grad_(True)
        exact = torch.softmax((exact_leaf * 0.5).masked_fill(ms, -math.inf), dim=-1)
        (exact_dx,) = torch.autograd.grad(exact, exact_leaf, dys.double())
        torch_leaf = xs.clone().requires_grad_(True)
        theirs = torch.softmax((torch_leaf * 0.5).masked_fill(ms, -math.inf), dim=-1)
        (theirs_dx,) = torch.autograd.grad(theirs, torch_leaf, dys)
        error_y = (theirs.double() - exact).abs().max()
        error_dx = (theirs_dx.double() - exact_dx).abs().max()
        return y, dx, error_y, error_dx

    y, dx, error_y, error_dx = run(x, mask, dy)
    yp, dxp, error_yp, error_dxp = run(x[..., perm], mask[..., perm], dy[..., perm])
    depth = math.log2(2 * k_len)
    assert float((yp.double() - y[..., perm].double()).abs().max()) <= depth * float(error_y + error_yp)
    assert float((dxp.double() - dx[..., perm].double()).abs().max()) <= depth * float(error_dx + error_dxp)


def test_softmax_rows_not_multiple_of_block(device: torch.device) -> None:
    x = torch.randn(7, 3, 37, 31, device=device)
    y = scaled_masked_softmax(x, use_kernel=True)
    _close(y, torch.softmax(x, dim=-1), torch.float32)


def test_softmax_additive_inf_in_the_input(device: torch.device) -> None:
    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(2, 4, 8, 200, device=device, generator=gen)
    hidden = torch.rand(2, 4, 8, 200, device=device, generator=gen) < 0.5
    hidden[1, 2, 3] = True  # a row of only -inf
    y = scaled_masked_softmax(x.masked_fill(hidden, -math.inf), scale=0.3, use_kernel=True)
    _close(y, _softmax_reference(x, hidden, 0.3), torch.float32)


# ----------------------------------------------------------------------------- awkward inputs


def _leaves(tensors: list[torch.Tensor], offset: int) -> list[torch.Tensor]:
    """Leaves requiring grad at storage offset ``offset`` (0: plain clones)."""
    placed = [offset_view(t, offset) if offset else t.clone() for t in tensors]
    return [t.requires_grad_(True) for t in placed]


@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", (768, 4097))
def test_layer_norm_misaligned_inputs(
    device: torch.device, offset: int, dtype: torch.dtype, cols: int
) -> None:
    """x, weight, bias and grad_output at storage offset 1 (2): no vector access they do not allow."""
    x, w, b, dy = _inputs(device, dtype, 33, cols, 7)
    leaves = _leaves([x, w, b], offset)
    y = layer_norm(leaves[0], cols, leaves[1], leaves[2], use_kernel=True)
    grads = torch.autograd.grad(y, leaves, offset_view(dy, offset))
    torch.cuda.synchronize(device)
    ref_leaves = [t.float().requires_grad_(True) for t in (x, w, b)]
    ref = F.layer_norm(ref_leaves[0], (cols,), ref_leaves[1], ref_leaves[2])
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy.float())
    _close(y, ref, dtype)
    _close(grads[0], ref_grads[0], dtype, scale=4)
    _close(grads[1], ref_grads[1], dtype, scale=math.sqrt(33) * 4)
    _close(grads[2], ref_grads[2], dtype, scale=math.sqrt(33) * 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_backward_without_rows(device: torch.device, dtype: torch.dtype) -> None:
    """x of shape (0, C): dweight and dbias are zeros, not whatever the allocator handed out."""
    cols = 768
    # Leave freed blocks of the outputs' size full of NaN: uninitialized outputs would show it.
    stale = [torch.full((cols,), math.nan, device=device, dtype=dtype) for _ in range(16)]
    del stale
    module = transformer_op.OP.load()
    x = torch.empty(0, cols, device=device, dtype=dtype)
    w = torch.randn(cols, device=device).to(dtype)
    stats = torch.empty(0, device=device)
    dx, dw, db = module.layer_norm_backward(x, x, w, stats, stats, True)
    assert dx.shape == (0, cols)
    assert torch.equal(dw, torch.zeros_like(w)) and torch.equal(db, torch.zeros_like(w))
    # Through the front and autograd: zeros, as torch gives.
    leaves = [t.clone().requires_grad_(True) for t in (x, w, w)]
    y = layer_norm(leaves[0], cols, leaves[1], leaves[2], use_kernel=True)
    grads = torch.autograd.grad(y, leaves, torch.empty_like(y))
    assert grads[0].shape == (0, cols)
    assert torch.equal(grads[1], torch.zeros_like(w)) and torch.equal(grads[2], torch.zeros_like(w))


@pytest.mark.parametrize(
    ("rows", "cols", "parts"),
    [
        (256, 131072, lambda sms: min(4, sms)),
        (256, 1 << 20, lambda sms: min(4, sms)),
        (1001, 768, lambda sms: min(math.ceil(1001 / 16), sms)),
    ],
    ids=["loop", "loop_1m_columns", "register"],
)
def test_layer_norm_backward_workspace_is_what_its_path_writes(
    device: torch.device, rows: int, cols: int, parts: Any
) -> None:
    """The backward's scratch is sized by the path it takes: the loop path writes 2 * min(ceil(rows
    / 64), SMs) partial rows of fp32 (256 x 131072 fp16: 4 MiB, where 2 * min(rows, SMs) rows were
    allocated, 132 MiB on an H100's 132 SMs; 256 x 1M: 32 MiB, not 1.03 GiB); the register path
    one pair per block of its persistent grid (768 fp16 columns: one warp a row, 16 rows a
    block). Measured as the peak the call adds beyond dx, dweight and dbias."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    module = transformer_op.OP.load()
    x, w, b, dy = _inputs(device, torch.float16, rows, cols, 5)
    _, mean, rstd = module.layer_norm_forward(x, w, b, 1e-5)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    dx, dw, db = module.layer_norm_backward(dy, x, w, mean, rstd, True)
    torch.cuda.synchronize(device)
    outputs = sum(t.numel() * t.element_size() for t in (dx, dw, db))
    scratch = torch.cuda.max_memory_allocated(device) - before - outputs
    expected = 2 * parts(sms) * cols * 4
    # The caching allocator rounds each block up (to 2 MiB for large ones): at most one round-up.
    assert expected <= scratch <= expected + (2 << 20), (scratch, expected)
    ref_leaves = [t.float().requires_grad_(True) for t in (x, w, b)]
    ref_grads = torch.autograd.grad(
        F.layer_norm(ref_leaves[0], (cols,), ref_leaves[1], ref_leaves[2]), ref_leaves, dy.float()
    )
    _close(dw, ref_grads[1], torch.float16, scale=math.sqrt(rows) * 4)
    _close(db, ref_grads[2], torch.float16, scale=math.sqrt(rows) * 4)


@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", (768, 4097))
def test_bias_gelu_misaligned_inputs(
    device: torch.device, offset: int, dtype: torch.dtype, cols: int
) -> None:
    x, _, b, dy = _inputs(device, dtype, 65, cols, 8)
    leaves = _leaves([x, b], offset)
    y = bias_gelu(leaves[0], leaves[1], use_kernel=True)
    grads = torch.autograd.grad(y, leaves, offset_view(dy, offset))
    torch.cuda.synchronize(device)
    ref_leaves = [x.float().requires_grad_(True), b.float().requires_grad_(True)]
    ref = F.gelu(ref_leaves[0] + ref_leaves[1])
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy.float())
    _close(y, ref, dtype)
    _close(grads[0], ref_grads[0], dtype)
    _close(grads[1], ref_grads[1], dtype, scale=math.sqrt(65) * 4)


def _softmax_case(
    device: torch.device, dtype: torch.dtype, shape: tuple[int, int, int, int], seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = (torch.randn(shape, device=device, generator=gen) * 3).to(dtype)
    dy = torch.randn(shape, device=device, generator=gen).to(dtype)
    return x, dy


def _check_softmax(
    x: torch.Tensor,
    dy: torch.Tensor,
    mask: torch.Tensor | None,
    hidden: torch.Tensor,
    causal: bool,
    leaf: torch.Tensor | None = None,
    grad_output: torch.Tensor | None = None,
) -> None:
    """The kernel (on ``leaf``, default a clone of x) against torch.softmax on fp32 copies
    with the hidden keys at -inf, forward and backward. Forward: NaN where torch has NaN (a
    visible +inf or NaN score), except that a row with no visible key (all -inf) is zeros,
    our contract, where torch has NaN. Backward: torch's gradient of a row it makes NaN means
    nothing (it even depends on how the mask entered its graph), so those rows are checked
    against the contract only: 0 for a row without visible keys, NaN for the others."""
    leaf = x.clone().requires_grad_(True) if leaf is None else leaf
    y = scaled_masked_softmax(leaf, mask, scale=0.125, causal=causal, use_kernel=True)
    (dx,) = torch.autograd.grad(y, leaf, dy if grad_output is None else grad_output)
    ref_leaf = x.float().requires_grad_(True)
    s = (ref_leaf * 0.125).masked_fill(hidden, -math.inf)
    raw = torch.softmax(s, dim=-1)
    (ref_dx,) = torch.autograd.grad(raw, ref_leaf, dy.float())
    no_key = (s == -math.inf).all(dim=-1, keepdim=True).expand_as(raw)
    nan_row = torch.isnan(raw).any(dim=-1, keepdim=True).expand_as(raw) & ~no_key
    ref = torch.where(no_key, torch.zeros_like(raw), raw).detach()
    rtol, atol = TOLERANCE[x.dtype]
    torch.testing.assert_close(y.float(), ref, rtol=rtol, atol=atol, equal_nan=True)
    usable = ~(no_key | nan_row)
    torch.testing.assert_close(dx.float()[usable], ref_dx[usable], rtol=rtol, atol=atol)
    assert torch.all(dx[no_key] == 0)
    assert torch.all(torch.isnan(dx[nan_row]))


@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_len", (128, 4097))
def test_softmax_misaligned_inputs(device: torch.device, offset: int, dtype: torch.dtype, k_len: int) -> None:
    x, dy = _softmax_case(device, dtype, (2, 3, 5, k_len), k_len)
    gen = torch.Generator(device=device).manual_seed(1)
    mask = torch.rand(2, 3, 5, k_len, device=device, generator=gen) < 0.3
    leaf = offset_view(x, offset).requires_grad_(True)
    hidden = mask | _causal(5, k_len, device)
    _check_softmax(x, dy, offset_view(mask, offset), hidden, True, leaf, offset_view(dy, offset))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_len", (1, 127, 768))
def test_softmax_rows_with_inf_and_nan(device: torch.device, dtype: torch.dtype, k_len: int) -> None:
    """A visible +inf or NaN score makes its row NaN, as torch.softmax; hidden ones (mask,
    causal) change nothing; -inf is a hidden key."""
    x, dy = _softmax_case(device, dtype, (2, 3, 6, k_len), k_len + 1)
    gen = torch.Generator(device=device).manual_seed(2)
    mask = torch.rand(2, 1, 6, k_len, device=device, generator=gen) < 0.2
    mask[:, :, :, 0] = False
    x[0, 0, 0, 0] = math.inf  # visible: NaN row
    x[0, 1, 1, -1] = math.nan  # visible unless causal hides the last key
    x[1, 2, 2, 0] = -math.inf  # a hidden key
    x[1, 0, 3, 0] = math.inf
    mask[1, 0, 3, 0] = True  # the +inf hidden by the mask: a normal row
    x[1, 1, 4, :] = math.inf  # every key +inf
    for causal in (False, True):
        hidden = mask | _causal(6, k_len, device) if causal else mask
        _check_softmax(x, dy, mask, hidden, causal)
    y = scaled_masked_softmax(x, mask, scale=0.125, use_kernel=True)
    assert torch.all(torch.isnan(y[0, 0, 0])) and torch.all(torch.isnan(y[1, 1, 4]))
    assert not torch.any(torch.isnan(y[1, 0, 3]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(1, 3, 5, 40), (2, 1, 1, 40), (2, 3, 1, 40), (5, 40), (40,)])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8])
def test_softmax_mask_shapes(
    device: torch.device, dtype: torch.dtype, mask_shape: tuple[int, ...], mask_dtype: torch.dtype
) -> None:
    """Masks that broadcast over batch, heads or queries, boolean or uint8 (non-zero: hidden)."""
    x, dy = _softmax_case(device, dtype, (2, 3, 5, 40), 5)
    gen = torch.Generator(device=device).manual_seed(len(mask_shape))
    codes = torch.randint(0, 4, mask_shape, device=device, generator=gen)  # 0 visible, 1..3 hidden
    codes[..., :1] = 0  # at least one visible key per row
    mask = codes.to(torch.uint8) if mask_dtype == torch.uint8 else codes > 0
    _check_softmax(x, dy, mask, codes > 0, False)
    _check_softmax(x, dy, mask, (codes > 0) | _causal(5, 40, device), True)


def test_softmax_uint8_mask_straight_to_the_kernel(device: torch.device) -> None:
    """The binding takes uint8 masks as they are: any non-zero byte hides the key."""
    x, _ = _softmax_case(device, torch.float32, (2, 3, 5, 40), 9)
    gen = torch.Generator(device=device).manual_seed(9)
    codes = torch.randint(0, 256, (2, 1, 5, 40), device=device, generator=gen, dtype=torch.uint8)
    codes[..., 0] = 0
    y = transformer_op.OP.load().softmax_forward(x, codes, 0.5, False)
    ref = torch.softmax((x * 0.5).masked_fill(codes != 0, -math.inf), dim=-1)
    _close(y, ref, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("q_len", "k_len"), [(7, 4), (9, 1), (33, 31)])
def test_softmax_causal_more_queries_than_keys(
    device: torch.device, dtype: torch.dtype, q_len: int, k_len: int
) -> None:
    """Query i sees keys j <= i - (q_len - k_len): the first q_len - k_len rows see none (zeros)."""
    x, dy = _softmax_case(device, dtype, (2, 3, q_len, k_len), q_len * k_len)
    hidden = _causal(q_len, k_len, device)
    assert torch.all(hidden[: q_len - k_len])
    _check_softmax(x, dy, None, hidden, True)
    y = scaled_masked_softmax(x, causal=True, use_kernel=True)
    assert torch.all(y[:, :, : q_len - k_len] == 0)


def test_empty_inputs(device: torch.device) -> None:
    x = torch.empty(0, 768, device=device, requires_grad=True)
    b = torch.zeros(768, device=device, requires_grad=True)
    y = bias_gelu(x, b, use_kernel=True)
    dx, db = torch.autograd.grad(y, (x, b), torch.empty_like(y))
    assert dx.shape == (0, 768) and torch.equal(db, torch.zeros_like(b))
    for shape in ((4, 0), (2, 0, 3), (0,)):  # no columns or no rows: F.gelu's empty result
        x = torch.empty(shape, device=device, requires_grad=True)
        b = torch.zeros(shape[-1], device=device, requires_grad=True)
        y = bias_gelu(x, b, use_kernel=True)
        dx, db = torch.autograd.grad(y, (x, b), torch.ones_like(y))
        assert y.shape == dx.shape == shape and torch.equal(db, torch.zeros_like(b))
    s = torch.empty(0, 3, 5, 7, device=device, requires_grad=True)
    out = scaled_masked_softmax(s, causal=True, use_kernel=True)
    (ds,) = torch.autograd.grad(out, s, torch.empty_like(out))
    assert out.shape == ds.shape == (0, 3, 5, 7)


def test_transformer_ops_use_the_current_stream(device: torch.device) -> None:
    x, w, b, dy = _inputs(device, torch.float32, 129, 768, 11)
    mask = torch.rand(129, 768, device=device) < 0.2

    def run() -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
        y = layer_norm(leaves[0], 768, leaves[1], leaves[2], use_kernel=True)
        g = bias_gelu(y, leaves[2], use_kernel=True)
        s = scaled_masked_softmax(g.view(1, 1, 129, 768), mask.view(1, 1, 129, 768), 0.5, use_kernel=True)
        return [s, *torch.autograd.grad(s.view(129, 768), leaves, dy)]

    ours = on_side_stream(device, [x, w, b, dy, mask], run)
    ref_leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    z = F.gelu(F.layer_norm(ref_leaves[0], (768,), ref_leaves[1], ref_leaves[2]) + ref_leaves[2])
    ref_s = torch.softmax((z * 0.5).masked_fill(mask, -math.inf), dim=-1)
    refs = [ref_s.view(1, 1, 129, 768), *torch.autograd.grad(ref_s, ref_leaves, dy)]
    for got, want, scale in zip(ours, refs, (1, 4, 4 * math.sqrt(129), 4 * math.sqrt(129))):
        _close(got, want, torch.float32, scale=scale)
