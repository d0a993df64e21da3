"""The CPU optimizer ops (cpu_adam, cpu_adagrad, cpu_lion) and their fronts.

References: torch.optim.Adam / AdamW / Adagrad, a plain uncorrected Adam and a plain Lion
written below. Comparisons run 50 steps on one optimizer holding params of 1, 7 and 1003
elements (below one vector, a tail, many vectors plus a tail) for every instruction set and
option; one test per optimizer does the same with 1,000,003 elements, which splits across
threads with a tail in the last thread's block.

Tolerances for Adam and Adagrad (rtol 1e-5, atol 1e-6): the kernel computes the same
formulas in fp32 but contracts a*b+c into one FMA (one rounding instead of two), so each
step may differ from torch by a few ulp (~1e-7 relative). The updates are smooth functions
of the state, so those differences do not amplify: over 50 steps they stay below ~1e-6
absolute on params of order 1, an order of magnitude under the bounds, while a wrong
formula (missing bias correction, decay applied twice, wrong beta) moves params by
~lr = 1e-2. (eps is 1e-6 rather than 1e-8: where a gradient plus its L2 term cancels to
~1e-8, an ulp of difference there would otherwise change m / (sqrt(v) + eps) by percent, a
property of Adam, not of either implementation.) Lion is compared exactly: its kernel
rounds every product and sum like the reference's chain of torch ops, which matters because
sign() turns an ulp near zero into a full 2 * lr step.
"""

from __future__ import annotations

import copy
import functools
import math
import threading
import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels._op_load import LazyOp
from kernels.optim import cpu as cpu_optim
from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion, set_simd_level
from op_builder import get_builder
from op_builder.errors import OpLoadError

SIZES = (1, 7, 1003)
LARGE_SIZES = (1, 7, 1_000_003)
STEPS = 50
RTOL, ATOL = 1e-5, 1e-6
LEVELS = ("scalar", "avx2", "avx512")
OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion")


@pytest.fixture(scope="module")
def ops() -> dict[str, ModuleType]:
    """The three compiled modules (a JIT build on the first run on a machine, cached after),
    loaded through the front so that set_simd_level reaches them."""
    modules = {name: cpu_optim._OPS[name].load() for name in OPS}
    assert all(modules[name] is get_builder(name).load() for name in OPS)
    return modules


@pytest.fixture(params=LEVELS)
def level(request: pytest.FixtureRequest, ops: dict[str, ModuleType]) -> str:
    """Each instruction set this CPU can run, forced on every op."""
    name: str = request.param
    supported = ops["cpu_adam"].supported_simd_level()
    if LEVELS.index(name) > LEVELS.index(supported):
        pytest.skip(f"this CPU supports up to {supported}, not {name}")
    set_simd_level(name)  # type: ignore[arg-type]
    return name


# ------------------------------------------------------------------ helpers


def make_params(seed: int = 0, sizes: tuple[int, ...] = SIZES) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen) for n in sizes]


def grads_for(step: int, params: list[Tensor]) -> tuple[Tensor, ...]:
    """Deterministic gradients, the same for the optimizer under test and its reference."""
    return _grads(step, tuple(p.numel() for p in params))


@functools.lru_cache(maxsize=64)
def _grads(step: int, sizes: tuple[int, ...]) -> tuple[Tensor, ...]:
    # Cached: the reference and the kernel run read the same ones (nothing writes to grads).
    gen = torch.Generator().manual_seed(1000 + step)
    return tuple(torch.randn(n, generator=gen) for n in sizes)


def run(
    make_opt: Callable[[list[Tensor]], torch.optim.Optimizer],
    steps: int = STEPS,
    seed: int = 0,
    half_dtypes: tuple[torch.dtype, ...] | None = None,
    sizes: tuple[int, ...] = SIZES,
) -> list[Tensor]:
    """Params after ``steps`` steps; with half_dtypes, also checks each step's half copies."""
    params = [p.requires_grad_() for p in make_params(seed, sizes)]
    opt = make_opt(params)
    halves = None
    if half_dtypes is not None:
        halves = [torch.empty(p.shape, dtype=d) for p, d in zip(params, half_dtypes, strict=True)]
    for step in range(1, steps + 1):
        for p, g in zip(params, grads_for(step, params), strict=True):
            p.grad = g
        if halves is None:
            opt.step()
        else:
            opt.step(half_params=halves)  # type: ignore[call-overload]
            for p, h in zip(params, halves, strict=True):
                assert torch.equal(h, p.detach().to(h.dtype)), f"step {step}: {h.dtype} copy differs"
    return [p.detach() for p in params]


def assert_params_close(actual: list[Tensor], expected: list[Tensor], exact: bool = False) -> None:
    for a, e in zip(actual, expected, strict=True):
        if exact:
            torch.testing.assert_close(a, e, rtol=0, atol=0)
        else:
            torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL)


class PlainAdam(torch.optim.Optimizer):
    """Adam/AdamW without bias correction, written out (torch has no switch for it)."""

    def __init__(
        self,
        params: list[Tensor],
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        adamw: bool,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "wd": weight_decay})
        self.adamw = adamw

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                g = p.grad
                if self.adamw:
                    p.mul_(1 - group["lr"] * group["wd"])
                else:
                    g = g + group["wd"] * p
                st["m"].mul_(b1).add_((1 - b1) * g)
                st["v"].mul_(b2).add_((1 - b2) * g * g)
                p.sub_(group["lr"] * st["m"] / (st["v"].sqrt() + group["eps"]))


class PlainLion(torch.optim.Optimizer):
    """Lion as published: c = b1*m + (1-b1)*g; p = p*(1-lr*wd) - lr*sign(c); m = b2*m + (1-b2)*g."""

    def __init__(
        self, params: list[Tensor], lr: float, betas: tuple[float, float], weight_decay: float
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "wd": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, wd = group["lr"], group["wd"]
            for p in group["params"]:
                m = self.state[p].setdefault("m", torch.zeros_like(p))
                g = p.grad
                c = m * b1 + g * (1 - b1)
                p.mul_(1 - lr * wd)
                p.sub_(torch.sign(c) * lr)
                m.copy_(m * b2 + g * (1 - b2))


# ------------------------------------------------------------------ against the references


@pytest.mark.parametrize("adamw", [True, False], ids=["adamw", "adam"])
@pytest.mark.parametrize("wd", [0.0, 0.1], ids=["wd0", "wd"])
def test_adam_matches_torch(level: str, adamw: bool, wd: float) -> None:
    kw: dict[str, Any] = {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": wd}
    ref_cls = torch.optim.AdamW if adamw else torch.optim.Adam
    expected = run(lambda ps: ref_cls(ps, **kw))
    opt_holder: list[CPUAdam] = []

    def make(ps: list[Tensor]) -> CPUAdam:
        opt_holder.append(CPUAdam(ps, adamw_mode=adamw, use_kernel=True, **kw))
        return opt_holder[0]

    assert_params_close(run(make), expected)
    assert opt_holder[0].backend == "kernel"
    assert cpu_optim._MODULES["cpu_adam"].simd_level() == level


@pytest.mark.parametrize("adamw", [True, False], ids=["adamw", "adam"])
def test_adam_without_bias_correction(level: str, adamw: bool) -> None:
    kw: dict[str, Any] = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.05}
    expected = run(lambda ps: PlainAdam(ps, adamw=adamw, **kw))
    actual = run(lambda ps: CPUAdam(ps, adamw_mode=adamw, bias_correction=False, use_kernel=True, **kw))
    assert_params_close(actual, expected)


@pytest.mark.parametrize("wd", [0.0, 0.1], ids=["wd0", "wd"])
def test_adagrad_matches_torch(level: str, wd: float) -> None:
    kw: dict[str, Any] = {
        "lr": 1e-2,
        "lr_decay": 0.01,
        "weight_decay": wd,
        "initial_accumulator_value": 0.1,
        "eps": 1e-10,
    }
    expected = run(lambda ps: torch.optim.Adagrad(ps, **kw))
    assert_params_close(run(lambda ps: CPUAdagrad(ps, use_kernel=True, **kw)), expected)


@pytest.mark.parametrize("wd", [0.0, 0.1], ids=["wd0", "wd"])
def test_lion_matches_reference_exactly(level: str, wd: float) -> None:
    kw: dict[str, Any] = {"lr": 1e-2, "betas": (0.9, 0.99), "weight_decay": wd}
    expected = run(lambda ps: PlainLion(ps, **kw))
    assert_params_close(run(lambda ps: CPULion(ps, use_kernel=True, **kw)), expected, exact=True)


@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
def test_large_tensor_matches_reference(ops: dict[str, ModuleType], kind: str) -> None:
    """A million-element param across threads, and its half copy at every step.

    The references use torch's fused CPU kernels where torch has one: the same algorithm as
    the default implementation, fast enough to run 50 steps here.
    """
    refs: dict[str, Callable[[list[Tensor]], torch.optim.Optimizer]] = {
        "adam": lambda ps: torch.optim.AdamW(ps, lr=1e-2, eps=1e-6, weight_decay=0.1, fused=True),
        "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=1e-2, weight_decay=0.1, fused=True),
        "lion": lambda ps: PlainLion(ps, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1),
    }
    cls: Any = {"adam": functools.partial(CPUAdam, eps=1e-6), "adagrad": CPUAdagrad, "lion": CPULion}[kind]
    actual = run(
        lambda ps: cls(ps, lr=1e-2, weight_decay=0.1, use_kernel=True),
        half_dtypes=(torch.bfloat16, torch.float16, torch.bfloat16),
        sizes=LARGE_SIZES,
    )
    assert_params_close(actual, run(refs[kind], sizes=LARGE_SIZES), exact=kind == "lion")


def test_levels_agree_with_each_other(ops: dict[str, ModuleType]) -> None:
    """Scalar and the best vector path agree to the ulp level on the same inputs."""
    best = ops["cpu_adam"].supported_simd_level()
    if best == "scalar":
        pytest.skip("this CPU has no vector path to compare")
    results = {}
    for name in ("scalar", best):
        set_simd_level(name)
        results[name] = run(lambda ps: CPUAdam(ps, lr=1e-2, weight_decay=0.1, use_kernel=True), steps=10)
    assert_params_close(results[best], results["scalar"])


# ------------------------------------------------------------------ half copy-out


def _make_cpu_opt(
    kind: str, use_kernel: bool, grouped: bool = False
) -> Callable[[list[Tensor]], torch.optim.Optimizer]:
    """A CPU optimizer over ps; grouped: two param groups, the second with its own lr."""
    cls: Any = {"adam": CPUAdam, "adagrad": CPUAdagrad, "lion": CPULion}[kind]

    def make(ps: list[Tensor]) -> torch.optim.Optimizer:
        params: Any = [{"params": ps[:2]}, {"params": ps[2:], "lr": 2e-2}] if grouped else ps
        opt: torch.optim.Optimizer = cls(params, lr=1e-2, weight_decay=0.1, use_kernel=use_kernel)
        return opt

    return make


@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
@pytest.mark.parametrize(
    "dtypes",
    [(torch.bfloat16,) * 3, (torch.float16,) * 3, (torch.float16, torch.bfloat16, torch.float16)],
    ids=["bf16", "fp16", "mixed"],
)
def test_half_copy_equals_to_dtype(level: str, kind: str, dtypes: tuple[torch.dtype, ...]) -> None:
    run(_make_cpu_opt(kind, use_kernel=True), steps=3, half_dtypes=dtypes)


@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
def test_half_copy_into_unaligned_views(level: str, kind: str) -> None:
    """Copies that start off a vector boundary take the ordinary-store path; same values."""
    params = [p.requires_grad_() for p in make_params(2, LARGE_SIZES)]
    bf16 = torch.empty(sum(SIZES) + 3, dtype=torch.bfloat16)
    fp16 = torch.empty(LARGE_SIZES[2] + 1, dtype=torch.float16)
    halves = [bf16[1:2], bf16[3:10], fp16[1:]]  # 2-byte offsets from 64-byte aligned storage
    opt: Any = _make_cpu_opt(kind, use_kernel=True)(params)
    for step in (1, 2):
        for p, g in zip(params, grads_for(step, params), strict=True):
            p.grad = g
        opt.step(half_params=halves)
        for p, h in zip(params, halves, strict=True):
            assert torch.equal(h, p.detach().to(h.dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_half_copy_rounds_every_kind_of_value(level: str, dtype: torch.dtype) -> None:
    """Ties, subnormals, overflow, infinities, NaN: the copy equals p.to(dtype) bit for bit.

    Lion with lr = 0 leaves params unchanged, so the copy-out sees exactly these values.
    """
    gen = torch.Generator().manual_seed(7)
    random_bits = torch.randint(-(2**31), 2**31 - 1, (100_003,), generator=gen, dtype=torch.int64)
    special = torch.tensor(
        [
            0.0,
            -0.0,
            1.0,
            1.00390625,
            1.01171875,
            65504.0,
            65520.0,
            65519.996,
            1e-8,
            6e-8,
            2.0**-149,
            3.3895314e38,
            math.inf,
            -math.inf,
            math.nan,
            1e-40,
            -1e-45,
        ],
        dtype=torch.float32,
    )
    # 0x3F808000: exactly halfway between two bf16 values (ties to even); 0x3F818000 likewise.
    ties_bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F800001, 0x3F807FFF], dtype=torch.int32)
    ties = ties_bits.view(torch.float32)
    values = torch.cat([random_bits.to(torch.int32).view(torch.float32), special, ties]).contiguous()
    p = values.clone().requires_grad_()
    p.grad = torch.zeros_like(values)
    half = torch.empty(values.shape, dtype=dtype)
    CPULion([p], lr=0.0, use_kernel=True).step(half_params=[half])
    expected = values.to(dtype)
    nan = expected.isnan()
    assert torch.equal(half.isnan(), nan)
    assert torch.equal(half[~nan].view(torch.int16), expected[~nan].view(torch.int16))


# ------------------------------------------------------------------ fallback


@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
def test_fallback_matches_reference(kind: str) -> None:
    refs: dict[str, Callable[[list[Tensor]], torch.optim.Optimizer]] = {
        "adam": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
        "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=1e-2, weight_decay=0.1),
        "lion": lambda ps: PlainLion(ps, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1),
    }
    holder: list[torch.optim.Optimizer] = []

    def make(ps: list[Tensor]) -> torch.optim.Optimizer:
        holder.append(_make_cpu_opt(kind, use_kernel=False)(ps))
        return holder[0]

    actual = run(make, half_dtypes=(torch.bfloat16, torch.float16, torch.bfloat16))
    assert getattr(holder[0], "backend", None) == "fallback"
    assert_params_close(actual, run(refs[kind]), exact=kind == "lion")


def test_fallback_warns_once_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot_load() -> ModuleType:
        raise OpLoadError("cpu_adam: no C++ compiler found", hint="install g++")

    op = LazyOp("cpu_adam")  # a fresh load state: nothing loaded, failed or warned yet
    monkeypatch.setattr(op, "_import", cannot_load)
    monkeypatch.setitem(cpu_optim._OPS, "cpu_adam", op)
    p = torch.ones(5, requires_grad=True)
    p.grad = torch.ones(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = CPUAdam([p])
        first.step()
        first.step()
        CPUAdam([p]).step()
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "no C++ compiler found" in str(ours[0].message) and "fallback" in str(ours[0].message)
    assert ours[0].filename == __file__  # points at the caller's step(), not at torch internals
    assert first.backend == "fallback"
    with pytest.raises(OpLoadError, match="no C\\+\\+ compiler"):
        CPUAdam([p], use_kernel=True).step()


def test_step_releases_the_gil() -> None:
    """A Python thread keeps running while a kernel step is in progress."""
    n = 16 << 20
    p = torch.randn(n).requires_grad_()
    p.grad = torch.randn(n)
    opt = CPUAdam([p], use_kernel=True)
    opt.step()
    seen: list[float] = []
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            seen.append(time.perf_counter())

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # leave a core to the spinning thread
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter()
        opt.step()
        end = time.perf_counter()
    finally:
        stop.set()
        spinner.join()
        torch.set_num_threads(threads)
    # Holding the GIL through the kernel would leave no iteration inside the call, apart from
    # the Python work at its start; skip that margin.
    margin = 0.2 * (end - start)
    assert any(start + margin < t < end - margin for t in seen), (
        f"no Python ran during a {end - start:.3f}s step"
    )


# ------------------------------------------------------------------ state dict


@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "fallback"])
def test_state_dict_round_trip(kind: str, use_kernel: bool) -> None:
    """Stop after 5 steps, load the state into a fresh optimizer, continue: same as 10 straight."""
    make = _make_cpu_opt(kind, use_kernel, grouped=True)
    uninterrupted = run(make, steps=10, seed=3)

    params = [p.requires_grad_() for p in make_params(3)]
    opt = make(params)
    for step in range(1, 6):
        for p, g in zip(params, grads_for(step, params), strict=True):
            p.grad = g
        opt.step()
    saved = copy.deepcopy(opt.state_dict())
    resumed = make(params)
    resumed.load_state_dict(saved)
    for step in range(6, 11):
        for p, g in zip(params, grads_for(step, params), strict=True):
            p.grad = g
        resumed.step()
    assert_params_close([p.detach() for p in params], uninterrupted, exact=True)


def test_param_groups_use_their_own_options() -> None:
    def make_ref(ps: list[Tensor]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            [{"params": ps[:2], "lr": 1e-2}, {"params": ps[2:], "lr": 3e-2, "weight_decay": 0.2}],
            weight_decay=0.0,  # torch's AdamW defaults to 0.01, CPUAdam to 0
        )

    def make(ps: list[Tensor]) -> torch.optim.Optimizer:
        return CPUAdam(
            [{"params": ps[:2], "lr": 1e-2}, {"params": ps[2:], "lr": 3e-2, "weight_decay": 0.2}],
            use_kernel=True,
        )

    assert_params_close(run(make, steps=10), run(make_ref, steps=10))


@pytest.mark.parametrize("torch_cls", [torch.optim.AdamW, torch.optim.Adam], ids=["AdamW", "Adam"])
def test_loads_a_torch_adam_state_dict(torch_cls: type[torch.optim.Optimizer]) -> None:
    """State keys follow torch, so training can move from torch.optim.Adam(W) to CPUAdam,
    which takes Adam vs AdamW from the state dict (its own default is AdamW)."""
    torch_params = [p.requires_grad_() for p in make_params(5)]
    torch_opt = torch_cls(torch_params, lr=1e-2, eps=1e-6, weight_decay=0.1)
    for step in range(1, 6):
        for p, g in zip(torch_params, grads_for(step, torch_params), strict=True):
            p.grad = g
        torch_opt.step()
    ours_params = [p.detach().clone().requires_grad_() for p in torch_params]
    ours = CPUAdam(ours_params, use_kernel=True)
    ours.load_state_dict(copy.deepcopy(torch_opt.state_dict()))
    assert ours.param_groups[0]["adamw_mode"] == (torch_cls is torch.optim.AdamW)
    for step in range(6, 11):
        for a, b, g in zip(torch_params, ours_params, grads_for(step, torch_params), strict=True):
            a.grad, b.grad = g, g
        torch_opt.step()
        ours.step()
    assert_params_close([p.detach() for p in ours_params], [p.detach() for p in torch_params])


def test_refuses_a_state_dict_with_amsgrad() -> None:
    p = torch.zeros(3, requires_grad=True)
    saved = torch.optim.Adam([p], amsgrad=True).state_dict()
    with pytest.raises(ValueError, match="amsgrad"):
        CPUAdam([p]).load_state_dict(saved)


# ------------------------------------------------------------------ bad input


def test_binding_rejects_bad_tensors(ops: dict[str, ModuleType]) -> None:
    adam = ops["cpu_adam"]
    n = 10
    p, g, m, v = (torch.zeros(n) for _ in range(4))

    def step(p: Tensor = p, g: Tensor = g, m: Tensor = m, v: Tensor = v, half: Tensor | None = None) -> None:
        adam.adam_step(p, g, m, v, half, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)

    with pytest.raises(RuntimeError, match="params must be float32, bfloat16 or float16, got float64"):
        step(p=torch.zeros(n, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="grads must be bfloat16, got float32"):
        step(p=torch.zeros(n, dtype=torch.bfloat16))  # half params take grads of their dtype
    with pytest.raises(RuntimeError, match="exp_avg must be float32 or bfloat16, got float16"):
        step(m=m.half(), v=v.half())
    with pytest.raises(RuntimeError, match="exp_avg_sq must be bfloat16, got float32"):
        step(m=m.bfloat16())  # bf16 moments: both of them
    with pytest.raises(RuntimeError, match="a half copy is for float32 params; these params are float16"):
        hp = torch.zeros(n, dtype=torch.float16)
        step(p=hp, g=hp.clone(), half=torch.zeros(n, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="grads must be float32, got float64"):
        step(g=torch.zeros(n, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="params must be contiguous"):
        step(p=torch.zeros(n, 2).t())
    with pytest.raises(RuntimeError, match=r"exp_avg_sq has shape \[11\] but params have shape \[10\]"):
        step(v=torch.zeros(n + 1))
    with pytest.raises(RuntimeError, match="half copy must be bfloat16 or float16, got float32"):
        step(half=torch.zeros(n))
    with pytest.raises(RuntimeError, match="half copy has 9 elements but params have 10"):
        step(half=torch.zeros(n - 1, dtype=torch.bfloat16))
    # A stable module's checks cross torch.ops as RuntimeError (the front checks values first).
    value_error = RuntimeError if hasattr(adam, "op_namespace") else ValueError
    with pytest.raises(value_error, match="step must be >= 1"):
        adam.adam_step(p, g, m, v, None, 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(RuntimeError, match="cpu_adagrad: state_sum has shape"):
        ops["cpu_adagrad"].adagrad_step(p, g, torch.zeros(3), None, 1, 1e-2, 0.0, 1e-10, 0.0)
    with pytest.raises(RuntimeError, match="cpu_lion: grads must be float32"):
        ops["cpu_lion"].lion_step(p, g.bfloat16(), m, None, 1e-4, 0.9, 0.99, 0.0)
    with pytest.raises(RuntimeError, match="cpu_lion: exp_avg must be float32, got bfloat16"):
        ops["cpu_lion"].lion_step(p, g, m.bfloat16(), None, 1e-4, 0.9, 0.99, 0.0)


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "fallback"])
def test_front_rejects_bad_input(use_kernel: bool) -> None:
    double_param = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    double_param.grad = torch.zeros(4, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"params must be float32, bfloat16 or float16, got torch\.float64"):
        CPUAdam([double_param], use_kernel=use_kernel).step()
    half_param = torch.zeros(4, dtype=torch.float16, requires_grad=True)
    half_param.grad = torch.zeros(4, dtype=torch.float16)
    with pytest.raises(
        TypeError, match=r"half_params are copies of float32 params; this param is torch\.float16"
    ):
        CPUAdam([half_param], use_kernel=use_kernel).step(half_params=[torch.zeros(4, dtype=torch.bfloat16)])

    p = torch.zeros(4, requires_grad=True)
    p.grad = torch.zeros(4)
    opt = CPULion([p], use_kernel=use_kernel)
    with pytest.raises(ValueError, match="half_params has 2 entries but the optimizer has 1 params"):
        opt.step(half_params=[None, None])
    with pytest.raises(ValueError, match="has 3 elements but its param has 4"):
        opt.step(half_params=[torch.zeros(3, dtype=torch.bfloat16)])
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        opt.step(half_params=[torch.zeros(4, dtype=torch.float64)])
    with pytest.raises(ValueError, match="Invalid beta"):
        CPUAdam([p], betas=(0.9, 1.0))


def test_simd_level_controls(ops: dict[str, ModuleType]) -> None:
    with pytest.raises(ValueError, match="unknown SIMD level"):
        set_simd_level("sse9")  # type: ignore[arg-type]
    supported = ops["cpu_lion"].supported_simd_level()
    set_simd_level("scalar")
    assert {m.simd_level() for m in ops.values()} == {"scalar"}
    set_simd_level("auto")
    assert {m.simd_level() for m in ops.values()} == {supported}
    if supported != "avx512":
        with pytest.raises(ValueError, match="'avx512' is not supported by this CPU"):
            ops["cpu_adam"].set_simd_level("avx512")
