"""What the engine probe decides, and what the build backends, the log view and the failure
parser are told: the kind of builder and the docker CLI that drives it.

Kept apart from the probe so that modules which only need to know the kind (the display,
the log parser) do not import the probing code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EngineKind = Literal["buildx", "buildkit", "classic"]


@dataclass(frozen=True)
class Engine:
    kind: EngineKind
    client: str | None  # the docker CLI used; None when the SDK alone drives the classic builder
    server_version: str
