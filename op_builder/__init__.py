"""op_builder: build C++/CUDA ops ahead of time or just in time, with per-op arch flags.

Importing this package probes nothing; probes run when a plan, report or load
needs them. ``SHARED_INCLUDE_DIR`` names the folder of the headers a binding is written against
once for both of torch's ABIs (``op_abi.h``): an op package's builder lists it in ``include_dirs``.
"""

from op_builder.builder import CPUOpBuilder, CUDAOpBuilder, OpBuilder
from op_builder.context import BuildContext, OpFlags
from op_builder.errors import BadInputError, OpBuilderError, OpLoadError, UnknownOpError, UserFacingError
from op_builder.paths import SHARED_INCLUDE_DIR
from op_builder.registry import ALL_OPS, get_builder

__all__ = [
    "ALL_OPS",
    "SHARED_INCLUDE_DIR",
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
