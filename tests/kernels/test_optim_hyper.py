"""The optimizers' shared hyperparameters: defaults, checks, signatures and the AdamW-mode spelling.

Reference defaults come from the torch optimizer each one mirrors (read off a live torch
instance), never from our own code. Everything here runs on the fallbacks (no compiler needed).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any

import pytest
import torch

from kernels.optim import CPUAdagrad, CPUAdam, CPULion, FusedAdam, FusedLamb, FusedLion

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

# type[Any]: torch.optim.Optimizer's own constructor takes other arguments than its subclasses'.
OptimizerClass = type[Any]

ADAM_KEYS = ("lr", "betas", "eps", "weight_decay")
ADAGRAD_KEYS = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")


def _param() -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros(3))


def _torch_defaults(cls: OptimizerClass) -> dict[str, Any]:
    return dict(cls([_param()]).defaults)


# ------------------------------------------------------------------ defaults


@pytest.mark.parametrize("ours", [CPUAdam, FusedAdam])
def test_adam_defaults_are_torchs(ours: OptimizerClass) -> None:
    adam, adamw = _torch_defaults(torch.optim.Adam), _torch_defaults(torch.optim.AdamW)
    defaults = ours([_param()]).defaults
    assert {k: defaults[k] for k in ADAM_KEYS} == {k: adam[k] for k in ADAM_KEYS}
    # AdamW mode by default, as DeepSpeed's Adams; lr, betas and eps are AdamW's too, but the
    # weight decay stays Adam's 0 (AdamW's is 0.01), so turning the mode off changes nothing else.
    assert defaults["adamw_mode"] is True and adamw["decoupled_weight_decay"] is True
    assert {k: defaults[k] for k in ("lr", "betas", "eps")} == {k: adamw[k] for k in ("lr", "betas", "eps")}
    assert defaults["bias_correction"] is True


def test_adagrad_defaults_are_torchs() -> None:
    reference = _torch_defaults(torch.optim.Adagrad)
    defaults = CPUAdagrad([_param()]).defaults
    assert {k: defaults[k] for k in ADAGRAD_KEYS} == {k: reference[k] for k in ADAGRAD_KEYS}


@pytest.mark.parametrize(("cpu", "gpu"), [(CPUAdam, FusedAdam), (CPULion, FusedLion)])
def test_cpu_and_gpu_fronts_of_one_rule_share_their_defaults(
    cpu: OptimizerClass, gpu: OptimizerClass
) -> None:
    assert cpu([_param()]).defaults == gpu([_param()]).defaults


@pytest.mark.parametrize("cls", [CPUAdam, CPUAdagrad, CPULion, FusedAdam, FusedLamb, FusedLion])
def test_signature_defaults_are_the_param_group_defaults(cls: OptimizerClass) -> None:
    signature = inspect.signature(cls)
    from_signature = {
        name: p.default for name, p in signature.parameters.items() if name not in ("params", "use_kernel")
    }
    assert cls([_param()]).defaults == from_signature


# Positional order is public: a call like FusedAdam(params, 1e-3, (0.9, 0.999), 1e-8, 0.0, False)
# must keep meaning what it meant. "|" marks where the keyword-only arguments start.
SIGNATURES = {
    CPUAdam: "params lr betas eps weight_decay | adamw_mode bias_correction use_kernel",
    CPUAdagrad: "params lr lr_decay weight_decay initial_accumulator_value eps | use_kernel",
    CPULion: "params lr betas weight_decay | use_kernel",
    FusedAdam: "params lr betas eps weight_decay adamw_mode bias_correction use_kernel",
    FusedLamb: "params lr betas eps weight_decay bias_correction use_kernel | max_grad_norm eps_inside_sqrt "
    "min_coeff max_coeff",
    FusedLion: "params lr betas weight_decay use_kernel",
}


@pytest.mark.parametrize("cls", list(SIGNATURES))
def test_constructor_argument_order(cls: OptimizerClass) -> None:
    words = []
    for name, p in inspect.signature(cls).parameters.items():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and "|" not in words:
            words.append("|")
        words.append(name)
    assert " ".join(words) == SIGNATURES[cls]


def test_lamb_and_lion_defaults() -> None:
    # No torch counterpart: Lamb's are apex FusedLAMB's, Lion's the paper's reference code's.
    assert FusedLamb([_param()]).defaults == {
        "lr": 1e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-6,
        "weight_decay": 0.01,
        "bias_correction": True,
        # Off: apex's FusedLAMB clips at 1.0 by default, DeepSpeed's clamps to [0.01, 10].
        "max_grad_norm": 0.0,
        "eps_inside_sqrt": False,
        "min_coeff": None,
        "max_coeff": None,
    }
    assert FusedLion([_param()]).defaults == {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}


# ------------------------------------------------------------------ checks

BAD_VALUES = [
    (CPUAdam, {"lr": -1.0}, "Invalid learning rate value: -1.0"),
    (CPUAdam, {"eps": -1e-8}, "Invalid epsilon value"),
    (CPUAdam, {"weight_decay": float("nan")}, "Invalid weight decay value: nan"),
    (CPUAdam, {"betas": (0.9, 1.0)}, r"Invalid beta parameter at index 1: 1.0"),
    (FusedAdam, {"betas": (-0.1, 0.9)}, r"Invalid beta parameter at index 0"),
    (FusedLamb, {"eps": -1.0}, "Invalid epsilon value"),
    (FusedLion, {"lr": -1.0}, "Invalid learning rate value"),
    (CPULion, {"weight_decay": -0.1}, "Invalid weight decay value"),
    (CPUAdagrad, {"lr_decay": -1.0}, "Invalid lr decay value"),
    (CPUAdagrad, {"initial_accumulator_value": -1.0}, "Invalid initial accumulator value value"),
    # Several bad values: the nonnegative ones are checked before betas, as always.
    (CPUAdam, {"betas": (2.0, 0.9), "eps": -1.0}, "Invalid epsilon value"),
]


@pytest.mark.parametrize(("cls", "kwargs", "message"), BAD_VALUES)
def test_bad_values_raise_value_error(cls: OptimizerClass, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cls([_param()], **kwargs)


# ------------------------------------------------------------------ the AdamW-mode spelling


def _adam_result(**kwargs: Any) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (7, 33)]
    opt = FusedAdam(params, lr=1e-2, weight_decay=0.1, **kwargs)
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return [p.detach() for p in params]


@pytest.mark.parametrize("mode", [True, False])
def test_deprecated_adam_w_mode_warns_and_means_adamw_mode(mode: bool) -> None:
    with pytest.warns(DeprecationWarning, match="'adam_w_mode' is deprecated, use 'adamw_mode'") as caught:
        old = _adam_result(adam_w_mode=mode)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1
    assert deprecations[0].filename == __file__  # it points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new spelling is silent
        new = _adam_result(adamw_mode=mode)
    for a, b in zip(old, new, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(old[0], _adam_result(adamw_mode=not mode)[0])  # the switch matters here


def test_both_spellings_fail() -> None:
    p = [_param()]
    with pytest.raises(TypeError, match="both 'adamw_mode' and its deprecated alias 'adam_w_mode'"):
        FusedAdam(p, adamw_mode=True, adam_w_mode=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="both 'adamw_mode' and its deprecated alias"):
        FusedAdam(p, 1e-3, (0.9, 0.999), 1e-8, 0.0, False, adam_w_mode=False)  # type: ignore[call-arg]


@pytest.mark.parametrize("legacy", [True, False])
def test_loads_a_state_dict_saved_with_the_old_spelling(legacy: bool) -> None:
    p = _param()
    saved = FusedAdam([p]).state_dict()
    group = saved["param_groups"][0]
    del group["adamw_mode"]
    group["adam_w_mode"] = legacy  # what FusedAdam saved before the rename
    opt = FusedAdam([p], adamw_mode=not legacy)
    opt.load_state_dict(copy.deepcopy(saved))
    assert opt.param_groups[0]["adamw_mode"] is legacy
    assert "adam_w_mode" not in opt.param_groups[0]


@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
@pytest.mark.parametrize("torch_cls", [torch.optim.Adam, torch.optim.AdamW])
def test_adam_fronts_take_the_mode_from_a_torch_state_dict(
    cls: OptimizerClass, torch_cls: OptimizerClass
) -> None:
    p = _param()
    opt = cls([p])
    opt.load_state_dict(torch_cls([p]).state_dict())
    assert opt.param_groups[0]["adamw_mode"] is (torch_cls is torch.optim.AdamW)
    with pytest.raises(ValueError, match=f"{cls.__name__} does not implement amsgrad=True"):
        cls([p]).load_state_dict(torch_cls([p], amsgrad=True).state_dict())


@pytest.mark.parametrize(
    "make", [lambda p: CPUAdam(p, use_kernel=False), lambda p: FusedAdam(p, use_kernel=False)]
)
def test_a_copied_or_unpickled_optimizer_keeps_its_kernel_switch(make: Any) -> None:
    import pickle

    p = torch.nn.Parameter(torch.ones(5))
    p.grad = torch.full((5,), 0.5)
    original = make([p])
    for clone in (copy.deepcopy(original), pickle.loads(pickle.dumps(original))):
        assert clone.use_kernel is False
        for q in clone.param_groups[0]["params"]:
            q.grad = torch.full_like(q, 0.5)  # pickling keeps no gradients
        clone.step()  # raised AttributeError when the switch was lost
        assert clone.backend == "fallback"
