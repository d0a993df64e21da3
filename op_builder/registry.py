"""The op registry: every op this distribution knows, by name."""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

from op_builder.builder import OpBuilder
from op_builder.errors import UnknownOpError
from op_builder.ops.async_io import AsyncIOBuilder
from op_builder.ops.cpu_adagrad import CPUAdagradBuilder
from op_builder.ops.cpu_adam import CPUAdamBuilder
from op_builder.ops.cpu_lion import CPULionBuilder
from op_builder.ops.fp_quantizer import FPQuantizerBuilder
from op_builder.ops.fused_optim import FusedAdamBuilder, FusedLambBuilder, FusedLionBuilder
from op_builder.ops.quantizer import QuantizerBuilder
from op_builder.ops.transformer import TransformerBuilder
from op_builder.suggest import did_you_mean

_BUILDERS: tuple[OpBuilder, ...] = (
    CPUAdamBuilder(),
    CPUAdagradBuilder(),
    CPULionBuilder(),
    AsyncIOBuilder(),
    FusedAdamBuilder(),
    FusedLambBuilder(),
    FusedLionBuilder(),
    TransformerBuilder(),
    QuantizerBuilder(),
    FPQuantizerBuilder(),
)

# Read-only: the registry is data, and nothing should add to it at run time.
ALL_OPS = MappingProxyType({b.name: b for b in _BUILDERS})


def get_builder(name: str) -> OpBuilder:
    """The builder for ``name``; UnknownOpError (with a suggestion) otherwise."""
    check_op_names([name])
    return ALL_OPS[name]


def check_op_names(names: Iterable[str]) -> None:
    """The one unknown-op check: UnknownOpError with "did you mean" for the first unknown name."""
    for name in names:
        if name not in ALL_OPS:
            raise UnknownOpError(
                f"unknown op {name!r}",
                hint=did_you_mean(name, ALL_OPS) or "known ops: " + ", ".join(ALL_OPS),
            )
