"""The runtime's files and settings read from outside the image, through the engine.

At the seal: what the statement signs (``runtime_record``: the runtime image's layers, its
settings, the digests of the interpreter's files and of each distribution's). At verification
with a key: whether the image is the signed one (``check_layers``: the signed layers, the proof
layer holding only the proof, the signed settings: ``imagegen.proof.exact``), or, asked for by
name, what a derived image adds to it (``imagegen.proof.derived``). Nothing here runs code of the
image's: its files are read from the engine's layer folders or its export of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from imagegen.engine.images import inspect_local
from imagegen.engine.layer_dirs import dir_links, layer_dirs, read_dir_layer
from imagegen.engine.layers import Layer, Select, exported_layers, nothing
from imagegen.errors import VerificationFailedError
from imagegen.proof import exact
from imagegen.proof.derived import Judgement, Links, judge
from imagegen.proof.documents import PROOF_DIR
from imagegen.proof.runtime import (
    PythonLayout,
    SignedRuntime,
    image_settings,
    make_runtime,
    merge,
    subjects,
    within,
)


@dataclass(frozen=True)
class RuntimeRecord:
    """What the seal read of the runtime image: the statement's runtime section, its subjects for
    the interpreter and distributions, and each op module's sha256 as the layers hold it."""

    runtime: SignedRuntime
    subjects: tuple[dict[str, Any], ...]
    module_digests: Mapping[str, str]  # path -> sha256


def _layer_ids(info: Mapping[str, Any]) -> list[str]:
    root = info.get("RootFS") or {}
    return [str(layer) for layer in root.get("Layers") or []]


def read_layers(
    image: str,
    info: Mapping[str, Any],
    wanted: Sequence[str],
    hash_file: Select,
    keep_data: Select = nothing,
) -> tuple[dict[str, Layer], Links]:
    """The ``wanted`` layers of ``image`` (by diff_id) and where its symbolic links lead: from a
    local engine's layer folders where it has them (only those layers are read), else from the
    engine's export of the image (all of it streams by)."""
    folders = layer_dirs(info)
    if folders is not None:
        ids = _layer_ids(info)
        try:
            layers = {
                layer: read_dir_layer(layer, folder, hash_file, keep_data)
                for layer, folder in zip(ids, folders, strict=True)
                if layer in wanted
            }
            return layers, dir_links(folders)
        except OSError:
            pass  # a folder that changed or cannot be read after all: the export says the same
    layers = exported_layers(image, hash_file, keep_data)
    links = {e.path: e.target for layer in layers.values() for e in layer.entries if e.kind == "symlink"}
    return layers, links.get


def runtime_record(image: str, layout: PythonLayout, module_paths: tuple[str, ...]) -> RuntimeRecord:
    """Read ``image`` (the runtime stage, before its proof layer) as the statement signs it."""
    info = inspect_local(image)
    ids = _layer_ids(info)
    layers, _ = read_layers(
        image,
        info,
        ids,
        hash_file=lambda path: path in module_paths or layout.covers(path),
        keep_data=lambda path: path.endswith(".dist-info/RECORD"),
    )
    missing = [layer for layer in ids if layer not in layers]
    if missing:
        raise VerificationFailedError(
            f"the engine's export of {image} lacks its layer {missing[0]}",
            hint="rebuild the image; if it repeats, check the engine (`docker save IMAGE | tar -t`)",
        )
    view = merge(layers[layer] for layer in ids)
    digests = {path: entry.sha256 for path in module_paths if (entry := view.get(path)) and entry.sha256}
    return RuntimeRecord(make_runtime(layout, ids, info, view), tuple(subjects(layout, view)), digests)


def check_layers(
    image: str,
    runtime: SignedRuntime,
    modules: Mapping[str, tuple[str, str]],
    documents: Mapping[str, bytes],
    derived: bool = False,
) -> Judgement:
    """Hold ``image`` to the signed ``runtime`` (``modules``: op module path -> (op, sha256);
    ``documents``: the proof's file name -> the bytes whose signature and digests were checked).
    ``derived``: list what layers and settings it adds instead of failing on them."""
    info = inspect_local(image)
    ids = _layer_ids(info)
    problems = exact.layer_problems(runtime, ids)
    if problems:
        return Judgement(tuple(problems), len(runtime.layers))
    signed = len(runtime.layers)
    # Without --derived only the proof layer is read: any layer above it fails unread.
    wanted = ids[signed:] if derived else ids[signed : signed + 1]
    layers, links = read_layers(
        image, info, wanted, hash_file=lambda path: within(path, PROOF_DIR) or path in modules
    )
    if any(layer not in layers for layer in wanted):
        raise VerificationFailedError(
            f"the engine's export of {image} lacks some of its layers",
            hint="check the engine (`docker save IMAGE | tar -t`); verify again",
        )
    problems = exact.proof_layer_problems(layers[ids[signed]], documents)
    settings = image_settings(info)
    if not derived:
        additions = exact.added_layers_problem(runtime, ids) + exact.settings_problems(runtime, settings)
        hint = exact.DERIVED_HINT if additions else None
        return Judgement(tuple(problems + additions), signed, hint=hint)
    judgement = judge(runtime, [layers[layer] for layer in ids[signed + 1 :]], settings, modules, links)
    return replace(judgement, problems=(*problems, *judgement.problems))
