"""op_builder: build C++/CUDA ops ahead of time or just in time, with per-op arch flags.

Importing this package probes nothing; probes run when a plan, report or load
needs them.
"""

from op_builder.builder import CPUOpBuilder, CUDAOpBuilder, OpBuilder
from op_builder.context import BuildContext, OpFlags
from op_builder.errors import BadInputError, OpBuilderError, OpLoadError, UnknownOpError, UserFacingError
from op_builder.registry import ALL_OPS, get_builder

__all__ = [
    "ALL_OPS",
    "BadInputError",
    "BuildContext",
    "CPUOpBuilder",
    "CUDAOpBuilder",
    "OpBuilder",
    "OpBuilderError",
    "OpFlags",
    "OpLoadError",
    "UnknownOpError",
    "UserFacingError",
    "get_builder",
]
