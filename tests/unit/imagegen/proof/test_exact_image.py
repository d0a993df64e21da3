"""An image passes `verify --key` only when it is exactly the signed one: the signed layers, then a
proof layer that holds the proof documents and nothing else, and the signed settings.

The proof layer is checked against a closed list (the documents, in their folder, root's and
closed to others); each case below is one way a layer can hold more, each written by hand."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from imagegen.engine.layers import Layer, LayerEntry
from imagegen.proof.exact import added_layers_problem, layer_problems, proof_layer_problems, settings_problems
from imagegen.proof.runtime import PythonLayout, SignedRuntime, image_settings

PROOF = "/opt/imagegen/proof"
DOCUMENTS = {
    "sbom.cdx.json": b'{"bomFormat": "CycloneDX"}\n',
    "provenance.intoto.json": b'{"_type": "https://in-toto.io/Statement/v1"}\n',
    "provenance.dsse.json": b'{"payload": ""}\n',
}
INFO: dict[str, Any] = {
    "Config": {"Env": ["PATH=/opt/venv/bin:/usr/bin"], "Cmd": ["python"], "User": "10001:10001"},
    "Os": "linux",
    "Architecture": "amd64",
}
LAYOUT = PythonLayout("/opt/venv/bin/python", "/opt/venv/bin", (), (), ())
SIGNED = SignedRuntime(("sha256:a", "sha256:b"), image_settings(INFO), LAYOUT)


def _doc(name: str, data: bytes | None = None, **extra: Any) -> LayerEntry:
    data = DOCUMENTS[name] if data is None else data
    fields: dict[str, Any] = {"mode": 0o644, **extra}
    return LayerEntry(f"{PROOF}/{name}", "file", len(data), sha256=hashlib.sha256(data).hexdigest(), **fields)


FOLDERS = (LayerEntry("/opt", "dir"), LayerEntry("/opt/imagegen", "dir"), LayerEntry(PROOF, "dir"))
GOOD = (*FOLDERS, *(_doc(name) for name in DOCUMENTS))


def _problems(*entries: LayerEntry) -> list[str]:
    return [f.problem for f in proof_layer_problems(Layer("sha256:p", entries), DOCUMENTS)]


def test_the_proof_layer_as_the_seal_makes_it_passes() -> None:
    assert _problems(*GOOD) == []
    # Without the folder entries (a layer may leave them out) it holds the same.
    assert _problems(*GOOD[3:]) == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            LayerEntry("/opt/venv/lib/python3.11/site-packages/zz.pth", "file"),
            "a file the proof does not hold",
        ),
        (LayerEntry(f"{PROOF}/extra.json", "file"), "a file the proof does not hold"),
        (LayerEntry(f"{PROOF}/sbom.cdx.json", "symlink", target="/etc/passwd"), "a symlink"),
        (LayerEntry(f"{PROOF}/x", "hardlink", target=f"{PROOF}/sbom.cdx.json"), "a hardlink"),
        (LayerEntry("/opt/venv", "whiteout"), "a whiteout the proof does not hold"),
        (LayerEntry("/opt", "opaque"), "a opaque"),
        (LayerEntry("/etc", "dir"), "a dir the proof does not hold"),
        (LayerEntry("/opt", "dir", mode=0o777), "mode 0777"),
        (LayerEntry(PROOF, "dir", uid=10001, gid=10001), "10001:10001"),
        (LayerEntry("/opt/imagegen", "dir", mode=0o2755), "mode 2755"),
        (_doc("sbom.cdx.json", mode=0o666), "mode 0666"),
        (_doc("sbom.cdx.json", mode=0o755), "mode 0755"),
        (_doc("provenance.dsse.json", uid=1000), "1000:0"),
        (_doc("provenance.intoto.json", b'{"_type": "forged"}\n'), "not the document whose digest"),
        (LayerEntry("/dev/x", "other"), "a other"),
    ],
)
def test_a_proof_layer_holding_more_fails_naming_it(extra: LayerEntry, named: str) -> None:
    found = _problems(*GOOD, extra)
    assert len(found) == 1 and named in found[0] and extra.path in found[0], found


def test_a_proof_layer_lacking_a_document_fails() -> None:
    assert _problems(*GOOD[:-1]) == [f"the proof layer lacks {PROOF}/provenance.dsse.json"]


def test_the_layers_are_the_signed_ones_then_the_proof_then_nothing() -> None:
    assert layer_problems(SIGNED, ["sha256:a", "sha256:b", "sha256:p"]) == []
    [other] = layer_problems(SIGNED, ["sha256:a", "sha256:x", "sha256:p"])
    assert "layer 2 is sha256:x; the signed image's is sha256:b" in other.problem
    [short] = layer_problems(SIGNED, ["sha256:a"])
    assert "layer 2 is missing" in short.problem
    [bare] = layer_problems(SIGNED, ["sha256:a", "sha256:b"])
    assert "no proof layer" in bare.problem
    assert added_layers_problem(SIGNED, ["sha256:a", "sha256:b", "sha256:p"]) == []
    [added] = added_layers_problem(SIGNED, ["sha256:a", "sha256:b", "sha256:p", "sha256:app", "sha256:x"])
    assert "2 layers above the signed image's" in added.problem and "not cover" in added.problem


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"Env": ["PATH=/opt/venv/bin:/usr/bin", "BASH_ENV=/x"]}, "environment BASH_ENV=/x (signed: unset)"),
        ({"Healthcheck": {"Test": ["CMD", "true"]}}, "Healthcheck"),
        ({"WorkingDir": "/app/"}, "WorkingDir '/app/'"),
        ({"Cmd": ["python", "-c", "1"]}, "Cmd"),
        ({"User": "0"}, "User '0'"),
        ({"Volumes": {"/opt/venv": {}}}, "Volumes"),
        ({"StopSignal": "SIGKILL"}, "StopSignal"),
        ({"Shell": ["/bin/bash", "-c"]}, "Shell"),
        ({"OnBuild": ["RUN x"]}, "OnBuild"),
    ],
)
def test_every_setting_but_labels_must_be_the_signed_one(config: dict[str, Any], named: str) -> None:
    assert (
        settings_problems(
            SIGNED, image_settings({**INFO, "Config": {**INFO["Config"], "Labels": {"a": "b"}}})
        )
        == []
    )
    found = settings_problems(SIGNED, image_settings({**INFO, "Config": {**INFO["Config"], **config}}))
    assert len(found) == 1 and named in found[0].problem, found
