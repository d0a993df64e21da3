"""Is this image exactly the one that was signed? (pure)

A signature proves exactly what it signs: the signed statement names the runtime image's layers,
in order, and its settings (``imagegen.proof.runtime``). The sealed image is those layers, then
one layer that holds the proof (the statement, its signature and the SBOM: it cannot be in what
the statement signs, since it holds the signature). So an image is the signed one when:

- its layers are the signed layers and one more, nothing above;
- that one more holds only the proof: the documents, each with the bytes whose signature and
  digests were checked, in ``PROOF_DIR`` and the folders above it, all root's and writable by
  root only, with no link, device, deletion or anything else (a closed list, not a list of what
  is dangerous);
- its settings are the signed ones (every signed field, labels aside).

Anything else is not the signed image and is named: an image derived from it is the deriver's to
sign, and ``--derived`` (``imagegen.proof.derived``) says what of it the signature still covers.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from imagegen.engine.layers import Layer
from imagegen.proof.derived import Finding, setting_changes
from imagegen.proof.documents import DOCUMENT_TYPES, PROOF_DIR
from imagegen.proof.runtime import SignedRuntime

DERIVED_HINT = (
    "an image built FROM a signed one is not the signed image: sign it yourself "
    "(imagegen build --sign-key, or cosign sign), or check what the signature still covers with --derived"
)


def _proof_folders() -> frozenset[str]:
    folders, folder = set(), PROOF_DIR
    while folder != "/":
        folders.add(folder)
        folder = posixpath.dirname(folder)
    return frozenset(folders)


def layer_problems(runtime: SignedRuntime, layer_ids: Sequence[str]) -> list[Finding]:
    """The image's layers against the signed ones: the signed runtime's first, then the proof's."""
    for index, expected in enumerate(runtime.layers):
        found = layer_ids[index] if index < len(layer_ids) else None
        if found != expected:
            problem = f"layer {index + 1} is {found or 'missing'}; the signed image's is {expected}"
            return [Finding(f"the image is not built on the signed image: {problem}")]
    if len(layer_ids) == len(runtime.layers):
        return [Finding("the image has no proof layer above the signed layers")]
    return []


def proof_layer_problems(layer: Layer, documents: Mapping[str, bytes]) -> list[Finding]:
    """Why ``layer`` (the one above the signed layers) is not just the proof ``documents``
    (file name -> the bytes that were checked)."""
    folders = _proof_folders()
    expected = {f"{PROOF_DIR}/{t.filename}": t.filename for t in DOCUMENT_TYPES if t.filename in documents}
    problems, seen = [], set()
    for entry in layer.entries:
        where = f"the proof layer's {entry.path}"
        if entry.kind == "dir" and entry.path in folders:
            if entry.uid or entry.gid or entry.mode & 0o7022:
                owner = f"{entry.uid}:{entry.gid}, mode {entry.mode:04o}"
                problems.append(
                    Finding(f"{where} is a folder of {owner}: the proof's folders are root's, 0755")
                )
            continue
        if entry.kind == "file" and entry.path in expected:
            seen.add(entry.path)
            data = documents[expected[entry.path]]
            if entry.sha256 != hashlib.sha256(data).hexdigest():
                problems.append(
                    Finding(f"{where} is not the document whose digest and signature were checked")
                )
            if entry.uid or entry.gid or entry.mode & 0o7133:
                owner = f"{entry.uid}:{entry.gid}, mode {entry.mode:04o}"
                problems.append(Finding(f"{where} is a file of {owner}: the proof's files are root's, 0644"))
            continue
        problems.append(Finding(f"{where}: a {entry.kind} the proof does not hold"))
    problems += [Finding(f"the proof layer lacks {path}") for path in sorted(set(expected) - seen)]
    return problems


def settings_problems(runtime: SignedRuntime, settings: Mapping[str, Any]) -> list[Finding]:
    """Each setting of the image that is not the signed one."""
    return [
        Finding(f"a setting is not the signed one: {change.what}")
        for change in setting_changes(runtime, settings)
    ]


def added_layers_problem(runtime: SignedRuntime, layer_ids: Sequence[str]) -> list[Finding]:
    """Layers above the proof layer: the image is derived from the signed one."""
    extra = layer_ids[len(runtime.layers) + 1 :]
    if not extra:
        return []
    return [
        Finding(
            f"the image has {len(extra)} layer{'s' * (len(extra) > 1)} above the signed image's "
            f"({', '.join(x[:19] for x in extra)}), which the signature does not cover"
        )
    ]
