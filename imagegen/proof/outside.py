"""The runtime's files and settings read from outside the image, through the engine.

At the seal: what the statement signs (``runtime_record``: the runtime image's layers, its
settings, the digests of the interpreter's files and of each distribution's). At verification
with a key: whether the image still holds it (``check_layers``: its layers start with the signed
ones, and what it added on top is judged by ``imagegen.proof.derived``). Nothing here runs code
of the image's: its files are read from the engine's export of it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.engine.client import docker_client
from imagegen.engine.images import inspect_local
from imagegen.engine.layer_dirs import dir_links, layer_dirs, read_dir_layer
from imagegen.engine.layers import Layer, Select, image_layers, nothing
from imagegen.errors import VerificationFailedError
from imagegen.proof.derived import Finding, Judgement, Links, judge
from imagegen.proof.runtime import PythonLayout, SignedRuntime, make_runtime, merge, subjects


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
    client: Any,
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
    layers = image_layers(client, image, hash_file, keep_data)
    links = {e.path: e.target for layer in layers.values() for e in layer.entries if e.kind == "symlink"}
    return layers, links.get


def runtime_record(image: str, layout: PythonLayout, module_paths: tuple[str, ...]) -> RuntimeRecord:
    """Read ``image`` (the runtime stage, before its proof layer) as the statement signs it."""
    client = docker_client(os.environ, timeout=600)
    try:
        info = inspect_local(client, image)
        ids = _layer_ids(info)
        layers, _ = read_layers(
            client,
            image,
            info,
            ids,
            hash_file=lambda path: path in module_paths or layout.covers(path),
            keep_data=lambda path: path.endswith(".dist-info/RECORD"),
        )
    finally:
        client.close()
    missing = [layer for layer in ids if layer not in layers]
    if missing:
        raise VerificationFailedError(
            f"the engine's export of {image} lacks its layer {missing[0]}",
            hint="rebuild the image; if it repeats, check the engine (`docker save IMAGE | tar -t`)",
        )
    view = merge(layers[layer] for layer in ids)
    digests = {path: entry.sha256 for path in module_paths if (entry := view.get(path)) and entry.sha256}
    return RuntimeRecord(
        make_runtime(layout, ids, info.get("Config") or {}, view), tuple(subjects(layout, view)), digests
    )


def check_layers(image: str, runtime: SignedRuntime, modules: Mapping[str, tuple[str, str]]) -> Judgement:
    """Judge ``image`` against the signed ``runtime`` (``modules``: op module path -> (op, sha256))."""
    client = docker_client(os.environ, timeout=600)
    try:
        info = inspect_local(client, image)
        ids = _layer_ids(info)
        signed = len(runtime.layers)
        for index, expected in enumerate(runtime.layers):
            found = ids[index] if index < len(ids) else None
            if found != expected:
                problem = f"layer {index + 1} is {found or 'missing'}; the signed runtime's is {expected}"
                finding = Finding(f"the image is not built on the signed runtime: {problem}")
                return Judgement((finding,), (), ())
        layers, links = read_layers(client, image, info, ids[signed:], hash_file=lambda path: path in modules)
    finally:
        client.close()
    added = [layers[layer] for layer in ids[signed:] if layer in layers]
    if len(added) != len(ids) - signed:
        raise VerificationFailedError(
            f"the engine's export of {image} lacks some of its layers",
            hint="check the engine (`docker save IMAGE | tar -t`); verify again",
        )
    return judge(runtime, added, info.get("Config") or {}, modules, links)
