"""What the CPU (``cpu_optim``) and GPU (``fused_optim``) optimizer fronts share.

Each update rule's hyperparameters are one frozen dataclass here (``AdamHyper``, ``LambHyper``,
``LionHyper``, ``AdagradHyper``): the defaults, the checks, and how a saved param group's keys
map to ours. ``CPUAdam`` and ``FusedAdam`` use the same one, and so on, so an optimizer class
states only its signature and its update. The base class keeps ``use_kernel`` / ``backend`` and
accepts state dicts saved by torch's optimizers; the helpers read step counters and
hyperparameters the way the kernels take them.
"""

from __future__ import annotations

import functools
import inspect
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, ParamSpec, TypeVar

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

# A kernel argument after the tensors: a hyperparameter, a step count or a switch.
Scalar = float | int | bool

_P = ParamSpec("_P")
_R = TypeVar("_R")


def check_betas(betas: tuple[float, float]) -> None:
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta} (betas must be in [0, 1))")


def check_nonnegative(**values: float) -> None:
    """Raise for a negative (or NaN) hyperparameter, named as torch's optimizers name it."""
    for name, value in values.items():
        if not value >= 0.0:
            raise ValueError(f"Invalid {name.replace('_', ' ')} value: {value}")


# ------------------------------------------------------------------ hyperparameters


def _nonnegative(default: float, label: str) -> Any:
    """A field that must be >= 0; ``label`` names it in the error (``learning_rate``), as torch does."""
    return field(default=default, metadata={"nonnegative": label})


def _optional_nonnegative(label: str) -> Any:
    """A field that is None (the option is off, the default) or a number >= 0."""
    return field(default=None, metadata={"nonnegative": label, "optional": True})


def _betas(default: tuple[float, float]) -> Any:
    return field(default=default, metadata={"betas": True})


@dataclass(frozen=True)
class Hyper:
    """One update rule's hyperparameters; constructing one checks them.

    Subclasses declare their fields in the constructors' order, with the defaults, so the
    optimizers take their signature defaults from here (``lr: float = AdamHyper.lr``) and the
    CPU and GPU fronts of one rule cannot drift apart. Values are stored as given (a list of
    betas stays a list), as torch's optimizers store them.
    """

    def __post_init__(self) -> None:
        # Every nonnegative value first, then betas: the order the checks have always run in,
        # so a call with several bad values keeps failing on the same one.
        check_nonnegative(
            **{
                f.metadata["nonnegative"]: getattr(self, f.name)
                for f in fields(self)
                if "nonnegative" in f.metadata
                and not (f.metadata.get("optional") and getattr(self, f.name) is None)
            }
        )
        for f in fields(self):
            if "betas" in f.metadata:
                check_betas(getattr(self, f.name))

    def group_defaults(self) -> dict[str, Any]:
        """The optimizer's ``defaults``: every field by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def adopt(cls, group: dict[str, Any], optimizer: str) -> None:
        """Rewrite a saved param group (torch's, or from an older version) into our keys, in
        place, before missing keys take the defaults; raise ValueError for what we cannot honour."""


@dataclass(frozen=True)
class _MomentsHyper(Hyper):
    """Adam's first and second moments: what Adam and Lamb share."""

    lr: float = _nonnegative(1e-3, "learning_rate")
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _nonnegative(1e-8, "epsilon")
    weight_decay: float = _nonnegative(0.0, "weight_decay")


@dataclass(frozen=True)
class AdamHyper(_MomentsHyper):
    """Adam / AdamW. Defaults are torch.optim.Adam's; ``adamw_mode`` (decoupled weight decay) is
    on by default, with Adam's weight_decay of 0 (AdamW's is 0.01), as in DeepSpeed."""

    adamw_mode: bool = True
    bias_correction: bool = True

    @classmethod
    def adopt(cls, group: dict[str, Any], optimizer: str) -> None:
        # FusedAdam saved the switch as "adam_w_mode" before the spelling was unified; torch's
        # Adam / AdamW save which of the two they are as "decoupled_weight_decay".
        legacy = group.pop("adam_w_mode", None)
        if "adamw_mode" not in group:
            if legacy is not None:
                group["adamw_mode"] = bool(legacy)
            elif "decoupled_weight_decay" in group:
                group["adamw_mode"] = bool(group["decoupled_weight_decay"])
        for unsupported in ("amsgrad", "maximize"):
            if group.get(unsupported):
                raise ValueError(f"{optimizer} does not implement {unsupported}=True")


@dataclass(frozen=True)
class LambHyper(_MomentsHyper):
    """Lamb: Adam's moments, with apex's FusedLAMB defaults for eps and weight decay; no
    decoupled mode, since the decay is part of the update the trust ratio scales.

    The options after ``bias_correction`` are off by default, which is the update as it was
    before they existed: ``max_grad_norm`` (0: no clipping) clips the grads by the global norm
    of the group's grads, ``eps_inside_sqrt`` moves eps under the square root, ``min_coeff`` /
    ``max_coeff`` (None: no bound) clamp the trust ratio. A saved group without them (an older
    version's) takes these defaults, whatever the loading optimizer was constructed with.
    """

    eps: float = _nonnegative(1e-6, "epsilon")
    weight_decay: float = _nonnegative(0.01, "weight_decay")
    bias_correction: bool = True
    max_grad_norm: float = _nonnegative(0.0, "max_grad_norm")
    eps_inside_sqrt: bool = False
    min_coeff: float | None = _optional_nonnegative("min_coeff")
    max_coeff: float | None = _optional_nonnegative("max_coeff")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_coeff is not None and self.max_coeff is not None and self.min_coeff > self.max_coeff:
            raise ValueError(
                f"Invalid trust ratio bounds: min_coeff {self.min_coeff} > max_coeff {self.max_coeff}"
            )

    @classmethod
    def adopt(cls, group: dict[str, Any], optimizer: str) -> None:
        # A group saved before these options existed ran without them, and keeps doing so in
        # whatever optimizer loads it (not taking that optimizer's constructor options), as
        # torch fills the keys its own optimizers gained with the value that means "off".
        for name in ("max_grad_norm", "eps_inside_sqrt", "min_coeff", "max_coeff"):
            group.setdefault(name, getattr(cls, name))


@dataclass(frozen=True)
class LionHyper(Hyper):
    """Lion, with the defaults of the paper's reference implementation."""

    lr: float = _nonnegative(1e-4, "learning_rate")
    betas: tuple[float, float] = _betas((0.9, 0.99))
    weight_decay: float = _nonnegative(0.0, "weight_decay")


@dataclass(frozen=True)
class AdagradHyper(Hyper):
    """Adagrad, with torch.optim.Adagrad's defaults and argument order."""

    lr: float = _nonnegative(1e-2, "learning_rate")
    lr_decay: float = _nonnegative(0.0, "lr_decay")
    weight_decay: float = _nonnegative(0.0, "weight_decay")
    initial_accumulator_value: float = _nonnegative(0.0, "initial_accumulator_value")
    eps: float = _nonnegative(1e-10, "epsilon")


def renamed_argument(old: str, new: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Accept ``old=`` as a deprecated spelling of the keyword ``new``: warn (DeprecationWarning,
    at the caller) on every call that uses it; passing both is a TypeError.

    A wrapper rather than an ``old: bool | None = None`` parameter, so that the signature keeps
    ``new``'s real default and a positional ``new`` is caught as well as a keyword one.
    """

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        signature = inspect.signature(fn)
        owner = fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if old in kwargs:
                value = kwargs.pop(old)
                if new in signature.bind_partial(*args, **kwargs).arguments:
                    raise TypeError(
                        f"{owner}() got both {new!r} and its deprecated alias {old!r}; pass only {new!r}"
                    )
                warnings.warn(
                    f"{owner}: {old!r} is deprecated, use {new!r} (same meaning)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = value
            return fn(*args, **kwargs)

        return wrapper

    return decorate


# ------------------------------------------------------------------ base class and helpers


class KernelOptimizer(torch.optim.Optimizer):
    """An optimizer whose step runs a compiled op or its PyTorch fallback.

    use_kernel: None falls back (warning once) when the op cannot run, False always falls
    back, True makes that an error. ``backend`` says which path the last step took.
    ``hyper`` is the rule's hyperparameter class (a class attribute, since unpickling and
    ``load_state_dict`` need it in ``__setstate__``).
    """

    backend: str | None
    hyper: ClassVar[type[Hyper]]

    def __init__(self, params: ParamsT, hyper: Hyper, use_kernel: bool | None) -> None:
        super().__init__(params, hyper.group_defaults())
        self.use_kernel = use_kernel
        self.backend = None  # set by the first step

    def __getstate__(self) -> dict[str, Any]:
        # torch's Optimizer pickles only defaults, state and param groups: keep our switch too,
        # so a deepcopy or an unpickled optimizer steps the way the original did.
        return {**super().__getstate__(), "use_kernel": self.use_kernel}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for group in state.get("param_groups", ()):
            self.hyper.adopt(group, type(self).__name__)
        super().__setstate__(state)
        self.__dict__.setdefault("use_kernel", None)  # pickled before the switch was kept
        self.__dict__.setdefault("backend", None)
        # An optimizer pickled by an older version lacks the options added since in its
        # defaults too (which add_param_group fills new groups from): the rule's own defaults.
        for key, value in self.hyper().group_defaults().items():
            self.defaults.setdefault(key, value)
        # A state dict saved by torch's optimizer lacks our options: take the defaults.
        for group in self.param_groups:
            for key, value in self.defaults.items():
                group.setdefault(key, value)

    @staticmethod
    def _run_closure(closure: Callable[[], float] | None) -> float | None:
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()


def advance_step(state: dict[str, Any]) -> int:
    """Count this step in ``state['step']`` (a float32 scalar tensor, as torch keeps it)."""
    step = state["step"]
    if isinstance(step, Tensor):
        step += 1
        return int(step.item())
    state["step"] = torch.tensor(float(step) + 1.0, dtype=torch.float32)
    return int(step) + 1


def _is_count_tensor(count: object) -> bool:
    return isinstance(count, Tensor) and count.dtype == torch.float32 and count.dim() == 0


class StepCounts:
    """Counts a step for many params at once, in one tensor operation.

    Each state's count stays a 0-d float32 tensor, as torch keeps it, but becomes a view into
    one block of the counts of the params stepped together, so that counting a step is one
    addition instead of one per param: a tensor operation on the CPU costs microseconds, which
    on a model of hundreds of tensors was most of a GPU step's Python time
    (``bench/step_counts.py``). The views are remembered per key (a param group), and a
    count that is not the view remembered for its place (the first step, a loaded state dict,
    a count replaced by hand, another set of params stepping) makes a new block from the
    counts' values. Not pickled: a restored optimizer makes its blocks on its first step.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, tuple[Tensor, list[Tensor]]] = {}

    def advance(self, key: int, states: list[dict[str, Any]]) -> list[int]:
        """``advance_step`` for each of ``states``, in order; their new counts."""
        counts = [state["step"] for state in states]
        known = self._blocks.get(key)
        if known is not None and len(known[1]) == len(counts) and all(map(operator.is_, counts, known[1])):
            block = known[0]
        elif counts and all(map(_is_count_tensor, counts)):
            block = torch.stack(counts)
            views = list(block.unbind())
            for state, view in zip(states, views):
                state["step"] = view
            self._blocks[key] = (block, views)
        else:  # counts saved as numbers by an older version, or nothing to count
            return [advance_step(state) for state in states]
        block += 1
        return [int(value) for value in block.tolist()]


def hyperparams(group: dict[str, Any], *names: str) -> tuple[float, ...]:
    """The group's options ``names`` as Python floats, in order; ``"betas"`` gives beta1, beta2.

    The kernels take their scalars as floats: a state dict may hold ints or tensors.
    """
    values: list[float] = []
    for name in names:
        if name == "betas":
            beta1, beta2 = group["betas"]
            values += (float(beta1), float(beta2))
        else:
            values.append(float(group[name]))
    return tuple(values)
