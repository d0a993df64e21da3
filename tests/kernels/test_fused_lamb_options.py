"""FusedLamb's options (grad-norm clipping, eps inside the root, trust-ratio bounds) and its
trust ratios, on the PyTorch fallback, against the rule written out in tests/_lamb_reference.py.

tests/gpu/test_gpu_lamb_options.py checks the kernel against the same reference.
"""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.optim.fused_lamb import FusedLamb
from tests._lamb_reference import LambOptions, lamb_reference
from tests.kernels._half_bounds import assert_half_trajectory_close, start_reach, track_reach

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

# Scaled so that the first steps' ratios ||p|| / ||u|| are near 0.05, 1 and 20 (at step 1,
# u is about sign(g), so ||u|| is about sqrt(numel)); the last param starts at zero norm.
SHAPES = [(7,), (3, 127), (2, 5, 33), (4, 9)]
SCALES = [0.05, 1.0, 20.0, 0.0]
STEPS = 4
# The grads' global norm is about sqrt(754) = 27: 1.0 clips every step, 1e3 none.
CLIPPING, NOT_CLIPPING = 1.0, 1e3

CASES = {
    "defaults": LambOptions(),
    "clip_active": LambOptions(max_grad_norm=CLIPPING),
    "clip_inactive": LambOptions(max_grad_norm=NOT_CLIPPING),
    "eps_inside_sqrt": LambOptions(eps=1e-2, eps_inside_sqrt=True),
    "clamp_both": LambOptions(min_coeff=0.2, max_coeff=5.0),
    "clamp_max_only": LambOptions(max_coeff=0.5),
    "clamp_min_only": LambOptions(min_coeff=2.0),
    "all_without_bias_correction": LambOptions(
        bias_correction=False,
        weight_decay=0.1,
        eps=1e-3,
        eps_inside_sqrt=True,
        max_grad_norm=CLIPPING,
        min_coeff=0.2,
        max_coeff=5.0,
    ),
}

Ratios = list[list[float | None]]


def _params(dtypes: list[torch.dtype] | None = None) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    dtypes = dtypes or [torch.float32] * len(SHAPES)
    return [
        torch.nn.Parameter((torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype))
        for shape, scale, dtype in zip(SHAPES, SCALES, dtypes)
    ]


def _clone(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


def _step_grads(params: list[torch.nn.Parameter], step: int) -> list[Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) for p in params]


def _ratios(opt: FusedLamb) -> list[float | None]:
    return [None if r is None else float(r) for r in opt.trust_ratios()]


def _drive(
    opt: FusedLamb, params: list[torch.nn.Parameter], steps: int, reach: list[Tensor] | None = None
) -> tuple[list[list[Tensor]], Ratios]:
    """``steps`` steps on seeded grads; returns each step's grads and the ratios read after it.
    ``reach``, where given, follows each element's largest magnitude (tests/kernels/_half_bounds.py)."""
    grads, ratios = [], []
    for step in range(steps):
        step_grads = _step_grads(params, step)
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
        if reach is not None:
            track_reach(reach, params)
        grads.append(step_grads)
        ratios.append(_ratios(opt))
    return grads, ratios


def _assert_ratios(ours: Ratios, expected: Ratios, rel: float = 1e-5) -> None:
    for step, (a, b) in enumerate(zip(ours, expected, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if y is None:
                assert x is None, (step, i, x)
            else:
                assert x is not None and x == pytest.approx(y, rel=rel), (step, i, x, y)


def _run_case(options: LambOptions) -> tuple[list[torch.nn.Parameter], Ratios, Any]:
    params = _params()
    start = _clone(params)
    opt = FusedLamb(params, use_kernel=False, **options.kwargs())
    grads, ratios = _drive(opt, params, STEPS)
    return params, ratios, lamb_reference(start, grads, options)


# ------------------------------------------------------------------ the update


@pytest.mark.parametrize("name", list(CASES))
def test_options_match_the_reference(name: str) -> None:
    params, ratios, ref = _run_case(CASES[name])
    for p, expected in zip(params, ref.params):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
    _assert_ratios(ratios, ref.ratios)
    assert ratios[0][3] == 1.0  # the zero param's first step: ||p|| = 0, ratio 1, never clamped


@pytest.mark.parametrize("name", [n for n in CASES if n not in ("defaults", "clip_inactive")])
def test_each_case_changes_the_update(name: str) -> None:
    """Guards the cases above against being vacuous: each option, as set, moves the params."""
    start, grads = _params(), [_step_grads(_params(), s) for s in range(STEPS)]
    plain = lamb_reference(start, grads, CASES["defaults"])
    changed = lamb_reference(start, grads, CASES[name])
    assert any(not torch.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(plain.params, changed.params))


def test_clamp_is_hit_from_both_sides() -> None:
    options = CASES["clamp_both"]
    _, ratios, ref = _run_case(options)
    assert options.min_coeff is not None and options.max_coeff is not None
    below = above = 0
    for step_raw, step_ours in zip(ref.raw_ratios, ratios):
        for raw, ours in zip(step_raw, step_ours):
            if raw is None:
                continue
            if raw < options.min_coeff:
                below += 1
                assert ours == pytest.approx(options.min_coeff, rel=1e-7)
            elif raw > options.max_coeff:
                above += 1
                assert ours == pytest.approx(options.max_coeff, rel=1e-7)
            else:
                assert ours == pytest.approx(raw, rel=1e-5)
    assert below >= STEPS and above >= STEPS


def test_clipping_active_and_inactive() -> None:
    grads = [_step_grads(_params(), s) for s in range(STEPS)]
    norms = [math.sqrt(sum(float((g.double() ** 2).sum()) for g in step)) for step in grads]
    assert all(n > CLIPPING for n in norms) and all(n < NOT_CLIPPING for n in norms)
    plain, plain_ratios, _ = _run_case(CASES["defaults"])
    inactive, inactive_ratios, _ = _run_case(CASES["clip_inactive"])
    active, _, _ = _run_case(CASES["clip_active"])
    # A clip factor of exactly 1: not one bit of the step changes.
    assert all(torch.equal(a, b) for a, b in zip(plain, inactive))
    assert plain_ratios == inactive_ratios
    assert not any(torch.allclose(a, b) for a, b in zip(plain[:3], active[:3]))


def test_clipping_leaves_the_grads_alone() -> None:
    params = _params()
    opt = FusedLamb(params, max_grad_norm=CLIPPING, use_kernel=False)
    grads = _step_grads(params, 0)
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    assert all(p.grad is not None and torch.equal(p.grad, g) for p, g in zip(params, grads))


def test_clip_norm_is_each_groups_own() -> None:
    """Two groups: each is clipped by the norm of its own grads and its own max_grad_norm."""
    params = _params()
    start = _clone(params)
    first, second = LambOptions(max_grad_norm=0.5), LambOptions(max_grad_norm=3.0, min_coeff=0.5)
    groups: list[dict[str, Any]] = [
        {"params": params[:2], "max_grad_norm": first.max_grad_norm},
        {"params": params[2:], "max_grad_norm": second.max_grad_norm, "min_coeff": second.min_coeff},
    ]
    opt = FusedLamb(groups, use_kernel=False, **LambOptions().kwargs())
    grads, ratios = _drive(opt, params, STEPS)
    ref_first = lamb_reference(start[:2], [g[:2] for g in grads], first)
    ref_second = lamb_reference(start[2:], [g[2:] for g in grads], second)
    for p, expected in zip(params, ref_first.params + ref_second.params):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
    _assert_ratios(ratios, [a + b for a, b in zip(ref_first.ratios, ref_second.ratios)])


def test_clip_norm_spans_the_dtypes_of_a_group() -> None:
    """fp64, fp32 and fp16 params in one group: updated in separate buckets, clipped by one norm."""
    dtypes = [torch.float64, torch.float32, torch.float16, torch.float32]
    params = _params(dtypes)
    start = _clone(params)
    options = LambOptions(max_grad_norm=CLIPPING, max_coeff=5.0)
    opt = FusedLamb(params, use_kernel=False, **options.kwargs())
    reach = start_reach(params)
    grads, ratios = _drive(opt, params, STEPS, reach)
    ref = lamb_reference(start, grads, options)
    for p, expected, r in zip(params, ref.params, reach):
        if p.dtype == torch.float16:
            # Rounded every step: an fp32-vs-fp64 difference can tip one rounding, an fp16 ulp at
            # the magnitude the param had then, which stays as the value changes.
            assert_half_trajectory_close(p, expected, r, torch.float16, atol=1e-6)
        else:
            torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
    _assert_ratios(ratios, ref.ratios, rel=1e-3)
    assert all(r is not None and r.dtype == torch.float32 and r.dim() == 0 for r in opt.trust_ratios())


def test_half_grads_norm_is_taken_in_fp32() -> None:
    """fp16 grads whose norm (about 95000) is past fp16's largest value: the clip factor is
    still about 1 / 95000, not 1 / inf (which would zero the grads)."""
    p = torch.nn.Parameter(torch.ones(100_000, dtype=torch.float16))
    p.grad = torch.full_like(p, 300.0)
    opt = FusedLamb([p], max_grad_norm=1.0, use_kernel=False)
    opt.step()
    ref = lamb_reference(
        [torch.ones(100_000, dtype=torch.float16)], [[p.grad]], LambOptions(max_grad_norm=1.0)
    )
    # torch's fp32 norm on the CPU adds 100000 equal squares with a relative error near 7e-5.
    torch.testing.assert_close(opt.state[p]["exp_avg"].double(), ref.exp_avg[0], rtol=2e-4, atol=0)


def test_deepspeed_bias_correction_placement_is_lr_scaling() -> None:
    """DeepSpeed's Lamb corrects outside the trust ratio: u from uncorrected m, v, then
    p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * r * u. That is this rule without bias correction,
    lr scaled per step, as the docstring says (r does not depend on lr)."""
    lr, (b1, b2), eps, wd = 1e-2, (0.9, 0.999), 1e-6, 0.01
    low, high = 0.01, 10.0  # DeepSpeed's default bounds
    params = _params()
    expected = [p.detach().double().clone() for p in params]
    opt = FusedLamb(
        params, lr=lr, eps=eps, weight_decay=wd, bias_correction=False, min_coeff=low, max_coeff=high
    )
    m = [torch.zeros_like(p) for p in expected]
    v = [torch.zeros_like(p) for p in expected]
    for t in range(1, STEPS + 1):
        grads = _step_grads(params, t)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.param_groups[0]["lr"] = lr * math.sqrt(1 - b2**t) / (1 - b1**t)
        opt.step()
        for i, g in enumerate(grads):  # DeepSpeed's rule, written out
            m[i] = b1 * m[i] + (1 - b1) * g.double()
            v[i] = b2 * v[i] + (1 - b2) * g.double() ** 2
            u = m[i] / (v[i].sqrt() + eps) + wd * expected[i]
            p_norm, u_norm = float(expected[i].norm()), float(u.norm())
            coeff = max(min(p_norm / u_norm, high), low) if p_norm > 0 and u_norm > 0 else 1.0
            expected[i] = expected[i] - lr * math.sqrt(1 - b2**t) / (1 - b1**t) * coeff * u
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach().double(), e, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ reading the ratios


def test_trust_ratios_follow_the_params_of_every_group() -> None:
    params = _params()
    idle = torch.nn.Parameter(torch.ones(3))  # never has a grad
    groups: list[dict[str, Any]] = [{"params": params[:2]}, {"params": [idle, *params[2:]]}]
    opt = FusedLamb(groups, use_kernel=False, **LambOptions().kwargs())
    assert opt.trust_ratios() == [None] * 5  # before any step
    grads, ratios = _drive(opt, params, 2)
    ref = lamb_reference(_params(), grads, LambOptions())
    # The order of param_groups: group 0's params, then idle, then the rest.
    _assert_ratios([[r[0], r[1], r[3], r[4]] for r in ratios], ref.ratios)
    assert all(r[2] is None for r in ratios)
    values = opt.trust_ratios()
    assert all(
        r is None or (r.dtype == torch.float32 and r.dim() == 0 and r.device == p.device)
        for r, p in zip(values, [*params[:2], idle, *params[2:]])
    )
    # A param without a grad in the last step has no ratio of that step.
    params[0].grad = None
    opt.step()
    assert opt.trust_ratios()[0] is None and opt.trust_ratios()[1] is not None


# ------------------------------------------------------------------ checks


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_grad_norm": -1.0}, "Invalid max grad norm value: -1.0"),
        ({"max_grad_norm": float("nan")}, "Invalid max grad norm value: nan"),
        ({"min_coeff": -0.1}, "Invalid min coeff value: -0.1"),
        ({"max_coeff": -2.0}, "Invalid max coeff value: -2.0"),
        ({"max_coeff": float("nan")}, "Invalid max coeff value: nan"),
        ({"min_coeff": 2.0, "max_coeff": 1.0}, "Invalid trust ratio bounds: min_coeff 2.0 > max_coeff 1.0"),
    ],
)
def test_bad_options_raise_one_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FusedLamb([torch.nn.Parameter(torch.zeros(3))], **kwargs)


def test_edge_values_are_accepted() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    FusedLamb([p], min_coeff=1.0, max_coeff=1.0)
    FusedLamb([p], min_coeff=0.0, max_coeff=0.0, max_grad_norm=0.0)
    FusedLamb([p], max_coeff=math.inf)


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        FusedLamb([torch.nn.Parameter(torch.zeros(3))], 1e-3, (0.9, 0.999), 1e-6, 0.01, True, None, 1.0)  # type: ignore[call-arg]


# ------------------------------------------------------------------ saving and loading

OPTIONS = LambOptions(max_grad_norm=CLIPPING, eps=1e-3, eps_inside_sqrt=True, min_coeff=0.2, max_coeff=5.0)
NEW_KEYS = ("max_grad_norm", "eps_inside_sqrt", "min_coeff", "max_coeff")


def test_state_dict_round_trip_keeps_the_options() -> None:
    params = _params()
    opt = FusedLamb(params, use_kernel=False, **OPTIONS.kwargs())
    _drive(opt, params, 2)
    saved = opt.state_dict()
    assert {k: saved["param_groups"][0][k] for k in NEW_KEYS} == {k: getattr(OPTIONS, k) for k in NEW_KEYS}
    assert all("trust_ratio" not in str(key) for state in saved["state"].values() for key in state)
    clone = _clone(params)
    other = FusedLamb(clone, use_kernel=False)  # constructed without the options: the state dict's win
    other.load_state_dict(copy.deepcopy(saved))
    _, ours = _drive(opt, params, 2)
    _, theirs = _drive(other, clone, 2)
    assert all(torch.equal(p, q) for p, q in zip(params, clone))
    assert ours == theirs


def test_old_state_dict_group_takes_the_options_off() -> None:
    """A group saved before the options existed ran without them, and keeps doing so, even in
    an optimizer constructed with them."""
    params = _params()
    start = _clone(params)
    opt = FusedLamb(params, use_kernel=False, **LambOptions().kwargs())
    grads, _ = _drive(opt, params, 2)
    saved = opt.state_dict()
    for key in NEW_KEYS:
        del saved["param_groups"][0][key]
    clone = _clone(params)
    other = FusedLamb(clone, use_kernel=False, **OPTIONS.kwargs())
    other.load_state_dict(saved)
    group = other.param_groups[0]
    assert {k: group[k] for k in NEW_KEYS} == {k: getattr(LambOptions(), k) for k in NEW_KEYS}
    more, _ = _drive(other, clone, 2)
    ref = lamb_reference(start, grads + more, LambOptions())
    for p, expected in zip(clone, ref.params):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)


def test_old_pickle_loads_with_the_options_off() -> None:
    """An optimizer pickled by a version without the options: its defaults and groups lack
    them; unpickled, both have them off, and a group added afterwards does too."""
    params = _params()
    opt = FusedLamb(params, use_kernel=False)
    _drive(opt, params, 1)
    state = opt.__getstate__()
    for key in NEW_KEYS:
        del state["defaults"][key]
        del state["param_groups"][0][key]
    old = FusedLamb.__new__(FusedLamb)
    old.__setstate__(state)
    assert {k: old.defaults[k] for k in NEW_KEYS} == {k: getattr(LambOptions(), k) for k in NEW_KEYS}
    extra = torch.nn.Parameter(torch.ones(5))
    old.add_param_group({"params": [extra]})
    assert old.param_groups[1]["max_coeff"] is None and old.param_groups[1]["max_grad_norm"] == 0.0
    assert old.trust_ratios() == [None] * (len(params) + 1)
    _drive(old, params, 1)
    assert all(r is not None for r in old.trust_ratios()[: len(params)])


def test_pickle_round_trip_keeps_options_not_ratios() -> None:
    params = _params()
    opt = FusedLamb(params, use_kernel=False, **OPTIONS.kwargs())
    _drive(opt, params, 2)
    restored = pickle.loads(pickle.dumps(opt))
    assert {k: restored.defaults[k] for k in NEW_KEYS} == {k: getattr(OPTIONS, k) for k in NEW_KEYS}
    assert all(restored.param_groups[0][k] == getattr(OPTIONS, k) for k in NEW_KEYS)
    assert restored.trust_ratios() == [None] * len(params)
    copies = restored.param_groups[0]["params"]
    _, ours = _drive(opt, params, 2)
    _, theirs = _drive(restored, copies, 2)
    assert all(torch.equal(p, q) for p, q in zip(params, copies))
    assert ours == theirs


def test_reference_without_clipping_is_the_default_rule() -> None:
    """The options at their off values are the rule as it was: the reference says the same
    with and without them spelled out (a check of the reference itself)."""
    start, grads = _params(), [_step_grads(_params(), s) for s in range(2)]
    off = replace(LambOptions(), max_grad_norm=0.0, min_coeff=None, max_coeff=None, eps_inside_sqrt=False)
    a, b = lamb_reference(start, grads, LambOptions()), lamb_reference(start, grads, off)
    assert all(torch.equal(x, y) for x, y in zip(a.params, b.params))
