"""Which torch a build compiles against: a leaf value the probes (``toolchain``) and a cross
build's target (``cross``, read from another platform's files) both make."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TorchBuild:
    version: str  # "2.13.0+cpu"
    cuda: str | None  # torch.version.cuda
    hip: str | None  # torch.version.hip
