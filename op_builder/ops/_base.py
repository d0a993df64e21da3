"""The base of every op shipped here: its sources live in kernels/csrc, not beside its builder."""

from __future__ import annotations

from op_builder.builder import CPUOpBuilder, CUDAOpBuilder
from op_builder.paths import CSRC


class BuiltinCPUOp(CPUOpBuilder):
    source_root = CSRC


class BuiltinCUDAOp(CUDAOpBuilder):
    source_root = CSRC
