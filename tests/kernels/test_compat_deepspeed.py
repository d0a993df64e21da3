"""kernels.compat.deepspeed: DeepSpeed's optimizer names, signatures and conventions over our ops.

References: DeepSpeed's signatures as a literal table below (read from deepspeed/ops/adam/
cpu_adam.py and fused_adam.py, adagrad/cpu_adagrad.py, lion/cpu_lion.py and fused_lion.py,
lamb/fused_lamb.py); torch.optim.Adam / AdamW / Adagrad; Lion, uncorrected Adam and DeepSpeed's
LAMB written out below from their formulas (LAMB in float64). Tolerances (rtol 1e-5, atol 1e-6)
are test_cpu_optim.py's: fp32 rounding and FMA contraction move params by a few ulp per step, a
wrong mapping (a swapped argument, a wrong default) by ~lr. Lion is compared exactly, as there.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels import optim as native
from kernels.compat import deepspeed as ds
from tests._lamb_reference import deepspeed_lamb

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

EMPTY = inspect.Parameter.empty
BETAS = (0.9, 0.999)
# DeepSpeed's constructors: every argument, in order, with its default (value and type).
SIGNATURES: dict[str, list[tuple[str, Any]]] = {
    "DeepSpeedCPUAdam": [
        ("model_params", EMPTY), ("lr", 1e-3), ("bias_correction", True), ("betas", BETAS),
        ("eps", 1e-8), ("weight_decay", 0), ("amsgrad", False), ("adamw_mode", True),
        ("fp32_optimizer_states", True),
    ],
    "DeepSpeedCPUAdagrad": [
        ("model_params", EMPTY), ("lr", 1e-2), ("eps", 1e-10), ("weight_decay", 0), ("amsgrad", False),
        ("fp32_optimizer_states", True),
    ],
    "DeepSpeedCPULion": [
        ("model_params", EMPTY), ("lr", 1e-3), ("betas", BETAS), ("weight_decay", 0),
        ("fp32_optimizer_states", True),
    ],
    "FusedAdam": [
        ("params", EMPTY), ("lr", 1e-3), ("bias_correction", True), ("betas", BETAS), ("eps", 1e-8),
        ("adam_w_mode", True), ("weight_decay", 0.0), ("amsgrad", False), ("set_grad_none", True),
    ],
    "FusedLamb": [
        ("params", EMPTY), ("lr", 1e-3), ("bias_correction", True), ("betas", BETAS), ("eps", 1e-8),
        ("eps_inside_sqrt", False), ("weight_decay", 0.0), ("max_grad_norm", 0.0), ("max_coeff", 10.0),
        ("min_coeff", 0.01), ("amsgrad", False),
    ],
    "FusedLion": [
        ("params", EMPTY), ("lr", 1e-3), ("betas", BETAS), ("weight_decay", 0.0), ("set_grad_none", True),
    ],
}  # fmt: skip
CPU_STEP = [("closure", None), ("fp16_param_groups", None)]
FUSED_STEP = [
    ("closure", None), ("grads", None), ("output_params", None), ("scale", None), ("grad_norms", None),
    ("grad_scaler", None),
]  # fmt: skip
STEPS: dict[str, list[tuple[str, Any]]] = {
    "DeepSpeedCPUAdam": CPU_STEP,
    "DeepSpeedCPUAdagrad": CPU_STEP,
    "DeepSpeedCPULion": CPU_STEP,
    "FusedAdam": FUSED_STEP,
    "FusedLion": FUSED_STEP,
    "FusedLamb": [
        ("closure", None),
        ("grads", None),
        ("output_params", None),
        ("scale", 1.0),
        ("grad_norms", None),
    ],
}
# DeepSpeedCPUAdam's ZeRO sub-group API (SuperOffload).
SUBGROUP = {"step_subgroup": [("subgroup_id", EMPTY), ("closure", None)],
            "rollback_subgroup": [("sub_group_id", EMPTY), ("closure", None)]}  # fmt: skip
CPU = ("DeepSpeedCPUAdam", "DeepSpeedCPUAdagrad", "DeepSpeedCPULion")
SIZES = (1, 7, 1003)
RTOL, ATOL = 1e-5, 1e-6


def _described(fn: Callable[..., Any], skip_self: bool) -> list[tuple[str, Any, type, Any]]:
    params = list(inspect.signature(fn).parameters.values())[1 if skip_self else 0 :]
    return [(p.name, p.default, type(p.default), p.kind) for p in params]


def _expected(table: list[tuple[str, Any]]) -> list[tuple[str, Any, type, Any]]:
    return [
        (name, default, type(default), inspect.Parameter.POSITIONAL_OR_KEYWORD) for name, default in table
    ]


def test_exports_exactly_deepspeeds_names() -> None:
    # The optimizers, the builder through which DeepSpeed's code reaches its AIO handle, and the
    # quantizers (test_compat_deepspeed_quant.py) with the config FP_Quantize takes.
    quantizers = ["ds_quantizer", "FP_Quantize", "QuantizationConfig"]
    assert sorted(ds.__all__) == sorted([*SIGNATURES, "AsyncIOBuilder", *quantizers])


@pytest.mark.parametrize("name", SIGNATURES)
def test_signatures_are_deepspeeds(name: str) -> None:
    cls = getattr(ds, name)
    assert _described(cls, skip_self=False) == _expected(SIGNATURES[name])
    assert _described(cls.step, skip_self=True) == _expected(STEPS[name])
    if name == "DeepSpeedCPUAdam":
        for method, table in SUBGROUP.items():
            assert _described(getattr(cls, method), skip_self=True) == _expected(table)


# ------------------------------------------------------------------ results against references


def _params(sizes: tuple[int, ...] = SIZES, seed: int = 0) -> tuple[list[Tensor], list[Tensor]]:
    """Two identical lists of params: one for ours, one for the reference."""
    gen = torch.Generator().manual_seed(seed)
    ours = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in sizes]
    return ours, [torch.nn.Parameter(p.detach().clone()) for p in ours]


def _run(opt: Any, ref: Any, ours: list[Tensor], theirs: list[Tensor], steps: int = 20) -> None:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for a, b in zip(ours, theirs, strict=True):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        opt.step()
        ref.step()


def _assert_close(ours: list[Tensor], theirs: list[Tensor], exact: bool = False) -> None:
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(
            a.detach(), b.detach(), rtol=0 if exact else RTOL, atol=0 if exact else ATOL
        )


class PlainLion(torch.optim.Optimizer):
    """Lion as published, each product and sum rounded on its own (as our kernel does)."""

    def __init__(self, params: list[Tensor], lr: float, betas: tuple[float, float], wd: float) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "wd": wd})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            lr, (b1, b2), wd = group["lr"], group["betas"], group["wd"]
            for p in group["params"]:
                m = self.state[p].setdefault("m", torch.zeros_like(p))
                c = m * b1 + p.grad * (1 - b1)
                p.mul_(1 - lr * wd)
                p.sub_(torch.sign(c) * lr)
                m.copy_(m * b2 + p.grad * (1 - b2))


class PlainAdamUncorrected(torch.optim.Optimizer):
    """AdamW without bias correction: p -= lr * m / (sqrt(v) + eps) after the decoupled decay."""

    def __init__(self, params: list[Tensor], lr: float, eps: float, wd: float) -> None:
        super().__init__(params, {"lr": lr, "eps": eps, "wd": wd})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                m = state.setdefault("m", torch.zeros_like(p))
                v = state.setdefault("v", torch.zeros_like(p))
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                p.mul_(1 - group["lr"] * group["wd"])
                p.sub_(group["lr"] * m / (v.sqrt() + group["eps"]))


@pytest.fixture(params=[None, False], ids=["kernel", "fallback"])
def use_kernel(request: pytest.FixtureRequest) -> bool | None:
    value: bool | None = request.param
    return value


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_cpu_adam_matches_torch(adamw_mode: bool, use_kernel: bool | None) -> None:
    ours, theirs = _params()
    # DeepSpeed's positional order: lr, bias_correction, betas, eps, weight_decay, amsgrad, adamw_mode.
    opt = ds.DeepSpeedCPUAdam(ours, 1e-2, True, (0.8, 0.99), 1e-6, 0.1, False, adamw_mode)
    opt.use_kernel = use_kernel
    torch_cls = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    _run(opt, torch_cls(theirs, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), ours, theirs)
    _assert_close(ours, theirs)


def test_cpu_adam_without_bias_correction(use_kernel: bool | None) -> None:
    ours, theirs = _params()
    opt = ds.DeepSpeedCPUAdam(ours, 1e-2, False, eps=1e-6, weight_decay=0.1)
    opt.use_kernel = use_kernel
    _run(opt, PlainAdamUncorrected(theirs, lr=1e-2, eps=1e-6, wd=0.1), ours, theirs)
    _assert_close(ours, theirs)


def test_cpu_adagrad_matches_torch(use_kernel: bool | None) -> None:
    ours, theirs = _params()
    opt = ds.DeepSpeedCPUAdagrad(ours, 1e-2, 1e-6, 0.1)  # lr, eps, weight_decay: not torch's order
    opt.use_kernel = use_kernel
    _run(opt, torch.optim.Adagrad(theirs, lr=1e-2, eps=1e-6, weight_decay=0.1), ours, theirs)
    _assert_close(ours, theirs)


def test_cpu_lion_matches_the_rule_with_deepspeeds_defaults(use_kernel: bool | None) -> None:
    ours, theirs = _params()
    opt = ds.DeepSpeedCPULion(ours, weight_decay=0.1)
    opt.use_kernel = use_kernel
    _run(opt, PlainLion(theirs, lr=1e-3, betas=BETAS, wd=0.1), ours, theirs)
    _assert_close(ours, theirs, exact=True)


@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_fused_adam_matches_torch(adam_w_mode: bool) -> None:
    ours, theirs = _params()
    opt = ds.FusedAdam(ours, 1e-2, True, (0.8, 0.99), 1e-6, adam_w_mode, 0.1)
    torch_cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    _run(opt, torch_cls(theirs, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), ours, theirs)
    _assert_close(ours, theirs)


def test_fused_lion_matches_the_rule_with_deepspeeds_defaults() -> None:
    ours, theirs = _params()
    _run(ds.FusedLion(ours, weight_decay=0.1), PlainLion(theirs, lr=1e-3, betas=BETAS, wd=0.1), ours, theirs)
    _assert_close(ours, theirs, exact=True)


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_step_runs_the_closure_and_returns_its_loss(name: str) -> None:
    p = torch.nn.Parameter(torch.ones(5))
    opt = getattr(ds, name)([p])

    def closure() -> float:
        p.grad = torch.full_like(p, 0.5)  # the step must use the grads the closure sets
        return 3.5

    assert opt.step(closure) == 3.5
    assert not torch.equal(p.detach(), torch.ones(5))


# ------------------------------------------------------------------ FusedLamb: DeepSpeed's rule


def _lamb_params() -> list[Tensor]:
    """Trust ratios that hit max_coeff (a large param), min_coeff (a tiny one), neither, and a
    zero param (ratio 1)."""
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(1003, generator=gen) * 10, torch.randn(7, generator=gen) * 1e-3]
    values += [torch.randn(50, generator=gen), torch.zeros(5)]
    return [torch.nn.Parameter(v) for v in values]


def _lamb_grads(params: list[Tensor], steps: int, factor: float = 1.0) -> list[list[Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [[torch.randn(p.shape, generator=gen) * factor for p in params] for _ in range(steps)]


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("eps_inside_sqrt", [False, True])
def test_fused_lamb_is_deepspeeds_rule(bias_correction: bool, eps_inside_sqrt: bool) -> None:
    hyper = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.01, "max_coeff": 2.0,
             "min_coeff": 0.1, "bias_correction": bias_correction,
             "eps_inside_sqrt": eps_inside_sqrt}  # fmt: skip
    params = _lamb_params()
    grads = _lamb_grads(params, steps=10)
    expected, expected_coeffs = deepspeed_lamb([p.detach() for p in params], grads, hyper)
    # Guard the test's own strength: every branch of the ratio is taken (the zero param's ratio
    # is 1 on the first step only: its decayed update makes it nonzero).
    assert expected_coeffs[0][3] == 1.0
    assert all(c[:2] == [2.0, 0.1] and 0.1 < c[2] < 2.0 for c in expected_coeffs)
    opt = ds.FusedLamb(params, hyper["lr"], bias_correction, hyper["betas"], 1e-6, eps_inside_sqrt, 0.01,
                       0.0, 2.0, 0.1)  # fmt: skip
    for step_grads, coeffs in zip(grads, expected_coeffs, strict=True):
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()
        assert opt.get_lamb_coeffs() == pytest.approx(coeffs, rel=1e-5)
    _assert_close(params, [e.float() for e in expected])


def test_fused_lamb_scale_grad_norms_grads_and_output_params() -> None:
    """step(grads=fp16 grads, output_params=fp16 copies, scale=, grad_norms=) with max_grad_norm:
    the grads are unscaled and clipped by DeepSpeed's rule, the copies receive the params."""
    hyper = {"lr": 1e-3, "betas": BETAS, "eps": 1e-8, "weight_decay": 0.0, "max_coeff": 10.0,
             "min_coeff": 0.01, "bias_correction": True, "eps_inside_sqrt": False, "scale": 8.0,
             "max_grad_norm": 1.0}  # fmt: skip
    params = [torch.nn.Parameter(torch.randn(n, generator=torch.Generator().manual_seed(n))) for n in (33, 4)]
    grads = [[g.half().float() for g in step] for step in _lamb_grads(params, steps=5, factor=8.0)]
    # Norms of the scaled grads, some clipping (> 1 after unscaling) and the first not.
    norms = [0.5 * 8.0] + [float(torch.cat(step).norm()) for step in grads[1:]]
    assert norms[0] / 8.0 < 1.0 < min(norms[1:]) / 8.0
    expected, _ = deepspeed_lamb([p.detach() for p in params], grads, hyper, norms)
    opt = ds.FusedLamb(params, max_grad_norm=1.0)  # DeepSpeed's defaults otherwise: hyper's
    copies = [torch.zeros(p.shape, dtype=torch.float16) for p in params]
    for step_grads, norm in zip(grads, norms, strict=True):
        opt.step(grads=[g.half() for g in step_grads], output_params=copies, scale=8.0, grad_norms=[norm])
    _assert_close(params, [e.float() for e in expected])
    for p, c in zip(params, copies, strict=True):
        assert torch.equal(c, p.detach().half())


def test_fused_lamb_per_param_grad_norms_that_clip_differently() -> None:
    """grad_norms with one norm per param (DeepSpeed zips them with the params): each param is
    clipped by its own, one clipping and one not. eps is large against the grads: LAMB's update
    is otherwise nearly blind to a grad scale, clipped or not."""
    hyper = {"lr": 1e-2, "betas": BETAS, "eps": 0.1, "weight_decay": 0.01, "max_coeff": 10.0,
             "min_coeff": 0.01, "bias_correction": True, "eps_inside_sqrt": False,
             "max_grad_norm": 1.0}  # fmt: skip
    params = [torch.nn.Parameter(torch.randn(n, generator=torch.Generator().manual_seed(n))) for n in (40, 9)]
    grads = _lamb_grads(params, steps=4, factor=0.3)
    norms = [[5.0, 0.5] for _ in grads]  # the first param's grads clip (clip 5), the second's do not
    expected = []
    for i, p in enumerate(params):  # DeepSpeed's rule is per param: one reference run each
        own_grads, own_norms = [[step[i]] for step in grads], [n[i] for n in norms]
        expected.append(deepspeed_lamb([p.detach()], own_grads, hyper, own_norms)[0][0])
    opt = ds.FusedLamb(params, lr=1e-2, eps=0.1, weight_decay=0.01, max_grad_norm=1.0)
    for step_grads, step_norms in zip(grads, norms, strict=True):
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step(grad_norms=[step_norms])
    _assert_close(params, [e.float() for e in expected])
    for p, g in zip(params, grads[-1], strict=True):
        assert torch.equal(p.grad, g)  # the caller's grads are left as they were


def test_fused_lamb_max_grad_norm_needs_grad_norms() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    with pytest.raises(ValueError, match="grad_norms"):
        ds.FusedLamb([p], max_grad_norm=1.0).step()


def test_native_fused_lamb_keeps_its_own_rule() -> None:
    """The compat class must not have changed ours: native FusedLamb with the same options is
    not DeepSpeed's rule (bias correction inside the ratio, no clamp)."""
    hyper = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.01, "max_coeff": 10.0,
             "min_coeff": 0.01, "bias_correction": True, "eps_inside_sqrt": False}  # fmt: skip
    params = _lamb_params()[2:3]
    grads = _lamb_grads(params, steps=3)
    expected, _ = deepspeed_lamb([p.detach() for p in params], grads, hyper)
    opt = native.FusedLamb(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01)
    for step_grads in grads:
        params[0].grad = step_grads[0].clone()
        opt.step()
    assert not torch.allclose(params[0].detach(), expected[0].float(), rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------------ options and refusals


def _stepped_state(opt: Any, p: Tensor) -> dict[str, Any]:
    p.grad = torch.ones_like(p)
    opt.step()
    state: dict[str, Any] = opt.state[p]
    return state


@pytest.mark.parametrize(
    ("param_dtype", "fp32_states", "state_dtype"),
    [
        (torch.bfloat16, False, torch.bfloat16),
        (torch.float16, False, torch.bfloat16),  # DeepSpeed: fp16; our kernels keep bf16
        (torch.float32, False, torch.float32),  # DeepSpeed: the param's dtype, fp32
        (torch.bfloat16, True, torch.float32),
    ],
)
def test_cpu_adam_fp32_optimizer_states(
    param_dtype: torch.dtype, fp32_states: bool, state_dtype: torch.dtype
) -> None:
    p = torch.nn.Parameter(torch.randn(37).to(param_dtype))
    state = _stepped_state(ds.DeepSpeedCPUAdam([p], fp32_optimizer_states=fp32_states), p)
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == state_dtype


@pytest.mark.parametrize("name", ["DeepSpeedCPUAdagrad", "DeepSpeedCPULion"])
def test_fp32_states_off_warns_where_only_fp32_state_exists(name: str) -> None:
    p = torch.nn.Parameter(torch.randn(37).to(torch.bfloat16))
    with pytest.warns(UserWarning, match="keeps the state in float32"):
        opt = getattr(ds, name)([p], fp32_optimizer_states=False)
    state = _stepped_state(opt, p)
    assert all(t.dtype == torch.float32 for t in state.values() if isinstance(t, Tensor) and t.dim())


@pytest.mark.parametrize("name", ["DeepSpeedCPUAdam", "DeepSpeedCPUAdagrad", "FusedAdam", "FusedLamb"])
def test_amsgrad_is_refused(name: str) -> None:
    p = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(RuntimeError, match=rf"{name} does not support the AMSGrad variant"):
        getattr(ds, name)([p], amsgrad=True)
    if name.startswith("DeepSpeedCPU"):  # in a param group too
        with pytest.raises(RuntimeError, match="AMSGrad"):
            getattr(ds, name)([{"params": [p], "amsgrad": True}])


@pytest.mark.parametrize("name", ["DeepSpeedCPUAdam", "FusedLamb"])
@pytest.mark.parametrize("bad", [{"lr": -1.0}, {"eps": -1e-8}, {"betas": (1.0, 0.999)}])
def test_bad_hyperparameters_are_refused(name: str, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Invalid"):
        getattr(ds, name)([torch.nn.Parameter(torch.ones(3))], **bad)


@pytest.mark.parametrize("name", ["FusedAdam", "FusedLion"])
@pytest.mark.parametrize("argument", ["grads", "output_params", "scale", "grad_norms"])
def test_fused_step_refuses_apexs_old_arguments(name: str, argument: str) -> None:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    opt = getattr(ds, name)([p])
    with pytest.raises(RuntimeError, match=f"{name} has been updated"):
        opt.step(**{argument: [torch.ones(3)]})
    opt.step(grad_scaler=object())  # accepted and ignored, as in DeepSpeed
    assert not torch.equal(p.detach(), torch.ones(3))


@pytest.mark.parametrize("name", ["FusedAdam", "FusedLion"])
def test_set_grad_none(name: str) -> None:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    getattr(ds, name)([p]).zero_grad()
    assert p.grad is None
    p.grad = torch.ones(3)
    opt = getattr(ds, name)([p], set_grad_none=False)
    opt.zero_grad()
    assert p.grad is not None and torch.equal(p.grad, torch.zeros(3))
    opt.zero_grad(set_to_none=True)
    assert p.grad is None


# ------------------------------------------------------------------ fp16_param_groups


def test_cpu_step_writes_fp16_param_groups(use_kernel: bool | None) -> None:
    a, b, c = (torch.nn.Parameter(torch.randn(n)) for n in (1003, 7, 5))
    opt = ds.DeepSpeedCPUAdam([{"params": [a, b]}, {"params": [c]}])
    opt.use_kernel = use_kernel
    for p in (a, b):
        p.grad = torch.randn(p.shape)
    # A bf16 CPU copy (written in the kernel's pass), an fp32 one (copied after the step, as a GPU
    # copy would be), and one for a param without a gradient, which must stay untouched.
    copies = [
        [torch.zeros(1003, dtype=torch.bfloat16), torch.zeros(7)],
        [torch.zeros(5, dtype=torch.float16)],
    ]
    opt.step(fp16_param_groups=copies)
    assert torch.equal(copies[0][0], a.detach().bfloat16())
    assert torch.equal(copies[0][1], b.detach())
    assert torch.equal(copies[1][0], torch.zeros(5, dtype=torch.float16))


@pytest.mark.parametrize("form", ["flat list", "tensor"])
def test_fp16_param_groups_single_group_forms(form: str) -> None:
    p = torch.nn.Parameter(torch.randn(9))
    p.grad = torch.randn(9)
    copy_ = torch.zeros(9, dtype=torch.float16)
    ds.DeepSpeedCPULion([p]).step(fp16_param_groups=[copy_] if form == "flat list" else copy_)
    assert torch.equal(copy_, p.detach().half())


def test_fp16_param_groups_missing_entry_is_an_error() -> None:
    a, b = torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(4))
    a.grad, b.grad = torch.ones(3), torch.ones(4)
    with pytest.raises(ValueError, match="no entry for param 1 of group 0"):
        ds.DeepSpeedCPUAdam([a, b]).step(fp16_param_groups=[[torch.zeros(3, dtype=torch.float16)]])


# ------------------------------------------------------------------ ZeRO sub-groups

HYPER: dict[str, dict[str, Any]] = {
    "DeepSpeedCPUAdam": {"lr": 1e-2, "eps": 1e-6, "weight_decay": 0.1},
    "DeepSpeedCPUAdagrad": {"lr": 1e-2, "eps": 1e-6, "weight_decay": 0.1},
    "DeepSpeedCPULion": {"lr": 1e-2, "weight_decay": 0.1},
}


def _reference(name: str, params: list[Tensor]) -> torch.optim.Optimizer:
    if name == "DeepSpeedCPUAdam":
        return torch.optim.AdamW(params, **HYPER[name])
    if name == "DeepSpeedCPUAdagrad":
        return torch.optim.Adagrad(params, **HYPER[name])
    return PlainLion(params, lr=1e-2, betas=BETAS, wd=0.1)


def _assert_same(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(actual[key], value) if isinstance(value, Tensor) else actual[key] == value, key


@pytest.mark.parametrize("name", CPU)
def test_subgroups_as_zero_offload_steps_them(name: str, use_kernel: bool | None) -> None:
    """SuperOffload's worker: one param group, refilled for every sub-group step and rollback with
    a fresh Parameter over that sub-group's fp32 partition; the optimizer keeps the state under
    the sub-group id. An overflow in iteration 3 rolls every sub-group back."""
    gen = torch.Generator().manual_seed(0)
    partitions = [torch.randn(n, generator=gen) for n in (1003, 7, 1)]
    ref_params = [torch.nn.Parameter(t.clone()) for t in partitions]
    refs = [_reference(name, [p]) for p in ref_params]
    opt = getattr(ds, name)([{"params": []}], **HYPER[name])
    opt.use_kernel = use_kernel

    def task(sid: int, grad: Tensor, rollback: bool = False) -> None:
        fresh = torch.nn.Parameter(partitions[sid])  # shares the partition's storage
        fresh.grad = grad.clone()
        opt.param_groups[0]["params"] = [fresh]
        (opt.rollback_subgroup if rollback else opt.step_subgroup)(sid)
        opt.param_groups[0]["params"] = []

    for iteration in range(6):
        grads = [torch.randn(t.shape, generator=gen) for t in partitions]
        if iteration == 3:
            before = [t.clone() for t in partitions]
            states = copy.deepcopy([opt.state[sid] for sid in range(3)])
            for sid, grad in enumerate(grads):
                task(sid, grad)
            for sid, grad in reversed(list(enumerate(grads))):
                task(sid, grad, rollback=True)
            for sid in range(3):
                assert torch.equal(partitions[sid], before[sid])
                _assert_same(opt.state[sid], states[sid])
            continue
        for sid, grad in enumerate(grads):
            task(sid, grad)
            ref_params[sid].grad = grad.clone()
            refs[sid].step()
    assert set(opt.state) == {0, 1, 2}
    _assert_close(partitions, ref_params, exact=name == "DeepSpeedCPULion")


def test_subgroup_step_and_rollback_on_one_param() -> None:
    """DeepSpeed's own usage: DeepSpeedCPUAdam([param]); step_subgroup(0); rollback_subgroup(0)."""
    p = torch.nn.Parameter(torch.randn(64))
    p.grad = torch.randn(64)
    opt = ds.DeepSpeedCPUAdam([p])
    initial = p.detach().clone()
    opt.step_subgroup(0)
    after_one = p.detach().clone()
    assert not torch.equal(after_one, initial)
    assert opt.state[0]["step"] == 1 and "exp_avg" in opt.state[0] and p not in opt.state
    opt.step_subgroup(0)
    assert opt.state[0]["step"] == 2
    opt.rollback_subgroup(0)
    assert torch.equal(p.detach(), after_one) and opt.state[0]["step"] == 1
    with pytest.raises(RuntimeError, match=r"rollback_subgroup\(0\): the sub-group has no step to roll back"):
        opt.rollback_subgroup(0)  # one level only


def test_subgroup_errors() -> None:
    a, b = torch.nn.Parameter(torch.randn(64)), torch.nn.Parameter(torch.randn(10))
    opt = ds.DeepSpeedCPUAdam([{"params": [a]}, {"params": [b]}])
    assert opt.step_subgroup(0, closure=lambda: 2.0) == 2.0  # no gradient: nothing to step
    assert 0 not in opt.state
    with pytest.raises(RuntimeError, match="no step to roll back"):
        opt.rollback_subgroup(5)
    a.grad, b.grad = torch.ones(64), torch.ones(10)
    with pytest.raises(RuntimeError, match="2 params have a gradient"):
        opt.step_subgroup(0)
    b.grad = None
    opt.step_subgroup(0)
    a.grad, b.grad = None, torch.ones(10)
    with pytest.raises(RuntimeError, match="holds 64 elements but the param with a gradient has 10"):
        opt.step_subgroup(0)


# ------------------------------------------------------------------ DeepSpeed's state dicts


def _deepspeed_state_dict(name: str, ref: torch.optim.Optimizer, params: list[Tensor], steps: int) -> Any:
    """What DeepSpeed's optimizer would have saved at the reference's point: its key names, int
    step counts, and its param group keys (adamw_mode is not one: DeepSpeed keeps it aside)."""
    state: dict[int, dict[str, Any]] = {}
    for i, p in enumerate(params):
        held = ref.state[p]
        if name == "DeepSpeedCPUAdam":
            state[i] = {
                "step": steps,
                "exp_avg": held["exp_avg"].clone(),
                "exp_avg_sq": held["exp_avg_sq"].clone(),
            }
        elif name == "DeepSpeedCPUAdagrad":
            state[i] = {"step": steps, "exp_avg_sq": held["sum"].clone()}
        else:  # DeepSpeed's Lion allocates an exp_avg_sq it never reads
            state[i] = {"step": steps, "exp_avg": held["m"].clone(), "exp_avg_sq": torch.zeros_like(p)}
    group = {**HYPER[name], "params": list(range(len(params)))}
    extra = {
        "DeepSpeedCPUAdam": {"betas": BETAS, "bias_correction": True, "amsgrad": False},
        "DeepSpeedCPUAdagrad": {"amsgrad": False},
        "DeepSpeedCPULion": {"betas": BETAS},
    }
    group.update(extra[name])
    return {"state": state, "param_groups": [group]}


@pytest.mark.parametrize("name", CPU)
def test_loads_deepspeeds_state_dicts(name: str, use_kernel: bool | None) -> None:
    ours, theirs = _params()
    ref = _reference(name, theirs)
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        for p in theirs:
            p.grad = torch.randn(p.shape, generator=gen)
        ref.step()
    with torch.no_grad():
        for a, b in zip(ours, theirs, strict=True):
            a.copy_(b)
    opt = getattr(ds, name)(ours, lr=0.5)  # the loaded groups' options replace these
    opt.use_kernel = use_kernel
    opt.load_state_dict(_deepspeed_state_dict(name, ref, theirs, steps=5))
    assert "exp_avg_sq" not in opt.state[ours[0]] or name == "DeepSpeedCPUAdam"
    _run(opt, ref, ours, theirs, steps=5)
    _assert_close(ours, theirs, exact=name == "DeepSpeedCPULion")


def test_async_io_builder_gives_a_handle_with_deepspeeds_calls(tmp_path: Any) -> None:
    from kernels.compat.deepspeed import AsyncIOBuilder

    builder = AsyncIOBuilder()
    assert builder.is_compatible()
    handle = builder.load().aio_handle(1 << 20, 8, False, False, 1)
    data = torch.arange(4096, dtype=torch.float32)
    path = str(tmp_path / "t.bin")
    assert handle.pwrite(data, path, False, False) >= 0
    back = torch.empty_like(data)
    handle.pread(back, path, False, False)
    assert torch.equal(back, data)
    assert handle.get_block_size() == 1 << 20 and handle.get_queue_depth() == 8
