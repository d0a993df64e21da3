"""An image's layers, each with what it holds and its bytes (pure).

A runtime image goes in layers by how often they change: the base, the ops' OS libraries, the
Python dependencies (torch, its libraries, NumPy), the op modules built for torch's stable ABI (the
same in every image of the target, whatever its torch), our packages and op modules, the proof. A node
that holds an image's lower layers pulls only the ones above that it lacks, so each layer's bytes
are what it costs such a node; ``imagegen size`` lists them. What a layer holds is read from its
entries (``imagegen.engine.layers``), not from how it was built: any image's layers classify.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.engine.layers import Layer
from imagegen.proof.documents import PROOF_DIR
from imagegen.proof.runtime import within

BASE = "base"
OS_LIBRARIES = "OS libraries"
DEPENDENCIES = "Python dependencies"
STABLE_MODULES = "op modules for every torch (stable ABI)"
OURS = "our packages and op modules"
_STABLE_SUFFIX = ".abi3.so"
PROOF = "proof"
SETTINGS = "settings only"
OTHER = "other"
_VENV = "/opt/venv"


@dataclass(frozen=True)
class LayerSize:
    diff_id: str
    bytes: int  # the files it holds, uncompressed
    holds: str

    def to_json(self) -> dict[str, Any]:
        return {"diff_id": self.diff_id, "bytes": self.bytes, "holds": self.holds}


def holds(layer: Layer) -> str:
    """What ``layer`` (above the base) holds, by its entries."""
    paths = [e.path for e in layer.entries if e.kind != "dir"]
    if not paths:
        return SETTINGS
    if any(within(path, PROOF_DIR) for path in paths):
        return PROOF
    venv = [path for path in paths if within(path, _VENV)]
    if any("/site-packages/torch/" in path for path in venv):
        return DEPENDENCIES
    if venv and all(path.endswith(_STABLE_SUFFIX) for path in paths):
        return STABLE_MODULES
    if venv:
        return OURS
    if any(within(path, "/var/lib/dpkg") for path in paths):
        return OS_LIBRARIES
    return OTHER


def layer_sizes(layers: Sequence[Layer], base_layers: int) -> tuple[LayerSize, ...]:
    """Each layer, bottom first; the first ``base_layers`` are the base's."""
    return tuple(
        LayerSize(
            layer.diff_id,
            sum(e.size for e in layer.entries if e.kind == "file"),
            BASE if index < base_layers else holds(layer),
        )
        for index, layer in enumerate(layers)
    )
