"""`verify --key` on images made by hand: a signed statement written and signed here (PAE and
ECDSA from the DSSE spec, not imagegen's signer) about a small image loaded into the engine, so
each way an image can differ from the signed one costs a fraction of a second, on both readers of
its layers (the engine's overlay2 folders, and its export, as on a remote engine).

Only the image exactly as signed passes; a forged member in the proof layer (a name that climbs
out with ``..``, a link, a whiteout, a folder opened to everyone), a layer added above it, or a
changed setting fails naming what differs; with ``--derived`` the additions are listed as not
covered and a forged proof layer still fails."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagegen.proof import outside
from imagegen.proof.image_proof import ProofCheck, check_image
from imagegen.proof.signing import load_public_key
from tests.integration.hand_layers import Member, file, folder, hardlink, image_archive, layer_tar, symlink

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

SITE = "/opt/venv/lib/python3.11/site-packages"
PROOF = "opt/imagegen/proof"
RUNTIME = [folder("opt/"), folder("opt/venv/"), file("opt/venv/bin/python", b"ELF", mode=0o755),
           file(f"{SITE[1:]}/torch/__init__.py", b"import torch._C\n"), folder("home/imagegen/")]  # fmt: skip
CONFIG: dict[str, Any] = {
    "Env": ["PATH=/opt/venv/bin:/usr/bin", "DS_DISABLE_JIT=1"],
    "Cmd": ["python"],
    "WorkingDir": "/home/imagegen",
    "User": "10001:10001",
}
SBOM = b'{"bomFormat": "CycloneDX", "components": []}\n'


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _statement(runtime_id: str) -> bytes:
    """A provenance statement as imagegen's format defines it, written out by hand."""
    runtime = {
        "format": 2,
        "layers": [runtime_id],
        "settings": {
            "Entrypoint": None, "Cmd": CONFIG["Cmd"], "Env": CONFIG["Env"],
            "WorkingDir": CONFIG["WorkingDir"], "User": CONFIG["User"], "Healthcheck": None,
            "Shell": None, "StopSignal": None,
            "Volumes": None, "ExposedPorts": None, "OnBuild": None, "ArgsEscaped": None,
            "Platform": "linux/amd64",
        },
        "python": {"executable": "/opt/venv/bin/python", "bin_dir": "/opt/venv/bin", "sys_path": [SITE],
                   "site_dirs": [SITE], "files": ["/opt/venv/bin/python"], "names": {SITE: ["torch"]}},
    }  # fmt: skip
    document = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "runtime", "digest": {"sha256": runtime_id.split(":")[1]}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {"internalParameters": {"runtime": runtime}},
            "runDetails": {"byproducts": [{"name": "sbom.cdx.json", "digest": {"sha256": _sha(SBOM)}}]},
        },
    }
    return json.dumps(document).encode()


def _envelope(key: ec.EllipticCurvePrivateKey, payload: bytes) -> bytes:
    kind = b"application/vnd.in-toto+json"
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
    signature = key.sign(pae, ec.ECDSA(hashes.SHA256()))
    signatures = [{"keyid": "", "sig": base64.b64encode(signature).decode()}]
    document = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": kind.decode(),
        "signatures": signatures,
    }
    return json.dumps(document).encode()


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ec.EllipticCurvePrivateKey, Any]]:
    private = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path_factory.mktemp("key") / "pub.pem"
    path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    yield private, load_public_key(path)


def _documents(key: ec.EllipticCurvePrivateKey, runtime_id: str) -> dict[str, bytes]:
    statement = _statement(runtime_id)
    return {"sbom.cdx.json": SBOM, "provenance.intoto.json": statement,
            "provenance.dsse.json": _envelope(key, statement)}  # fmt: skip


def _proof_members(documents: dict[str, bytes]) -> list[Member]:
    return [folder("opt/"), folder("opt/imagegen/"), folder(f"{PROOF}/"),
            *(file(f"{PROOF}/{name}", data) for name, data in documents.items())]  # fmt: skip


def _load(client: Any, made: list[str], layers: Sequence[bytes], labels: dict[str, str],
          config: dict[str, Any] | None = None) -> str:  # fmt: skip
    tag = f"imagegen-it/exact-{uuid.uuid4().hex[:10]}:1"
    archive = image_archive(layers, tag, config={**CONFIG, **(config or {}), "Labels": labels})
    client.images.load(archive)
    made.append(tag)
    return tag


@pytest.fixture(scope="module")
def images(docker_client: Any, key: Any) -> Iterator[dict[str, Any]]:
    runtime = layer_tar(RUNTIME)
    documents = _documents(key[0], "sha256:" + _sha(runtime))
    labels = {
        "io.imagegen.sbom.digest": "sha256:" + _sha(documents["sbom.cdx.json"]),
        "io.imagegen.provenance.digest": "sha256:" + _sha(documents["provenance.intoto.json"]),
        "io.imagegen.provenance.signature.digest": "sha256:" + _sha(documents["provenance.dsse.json"]),
    }
    made: list[str] = []

    def load(proof_extra: Sequence[Member] = (), above: Sequence[Sequence[Member]] = (),
             config: dict[str, Any] | None = None) -> str:  # fmt: skip
        # A member named like one of the proof's stands in its place (the engine refuses a layer
        # that names a path twice).
        replaced = {m.name for m in proof_extra}
        proof = layer_tar([*(m for m in _proof_members(documents) if m.name not in replaced), *proof_extra])
        return _load(docker_client, made, [runtime, proof, *(layer_tar(m) for m in above)], labels, config)

    yield {"load": load, "public": key[1]}
    for tag in made:
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag, force=True)


@pytest.fixture(params=["folders", "export"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "export":
        monkeypatch.setattr(outside, "layer_dirs", lambda info: None)
    return str(request.param)


def _check(images: dict[str, Any], tag: str, derived: bool = False) -> ProofCheck:
    check = check_image(tag, images["public"], derived=derived)
    assert check is not None and check.signed is True, check
    return check


def test_the_image_as_signed_passes_exactly(images: dict[str, Any], reader: str) -> None:
    check = _check(images, images["load"]())
    assert check.ok and check.exact is True, check.summary()
    assert check.to_json()["derived"] is None


@pytest.mark.parametrize(
    ("name", "extra", "named"),
    [
        ("dot-dot", [file(f"{PROOF}/../../../{SITE[1:]}/zz.pth", b"import os\n")], f"{SITE}/zz.pth: a file"),
        ("extra file", [file(f"{PROOF}/notes.txt", b"hi")], f"/{PROOF}/notes.txt: a file"),
        ("symlink", [symlink("opt/venv/bin/python3", "/tmp/evil")], "/opt/venv/bin/python3: a symlink"),
        ("hard link", [hardlink(f"{SITE[1:]}/zz.pth", f"{PROOF}/sbom.cdx.json")], f"{SITE}/zz.pth: a file"),
        ("whiteout", [file(f"{SITE[1:]}/.wh.torch", b"")], f"{SITE}/torch: a whiteout"),
        ("opaque", [file("opt/venv/.wh..wh..opq", b"")], "/opt/venv: a opaque"),
        ("open folder", [folder("opt/", mode=0o777)], "/opt is a folder of 0:0, mode 0777"),
        ("user's folder", [folder(f"{PROOF}/", uid=10001, gid=10001)], "10001:10001"),
        ("folder left out", [file("etc/ld.so.preload", b"/x.so")], "/etc: a dir"),
    ],
)
def test_a_proof_layer_holding_more_fails_even_as_derived(
    images: dict[str, Any], reader: str, name: str, extra: list[Member], named: str
) -> None:
    tag = images["load"](proof_extra=extra)
    for derived in (False, True):
        check = _check(images, tag, derived)
        assert not check.ok and named in check.summary(), (name, check.summary())


def test_a_layer_or_setting_added_fails_and_is_listed_not_covered_as_derived(
    images: dict[str, Any], reader: str
) -> None:
    above = [[folder("app/"), file("app/main.py", b"print(1)\n"), file(f"{SITE[1:]}/zz.pth", b"import os\n")]]
    tag = images["load"](above=above, config={"Env": [*CONFIG["Env"], "BASH_ENV=/app/x"]})
    check = _check(images, tag)
    assert not check.ok and check.exact is False
    assert "1 layer above the signed image's" in check.summary()
    assert "environment BASH_ENV=/app/x (signed: unset)" in check.summary()
    assert "--derived" in check.hint
    derived = _check(images, tag, derived=True)
    assert derived.ok and derived.exact is False, derived.summary()
    document = derived.to_json()["derived"]
    assert document["covered"] is False and document["signed_layers"] == 1 and len(document["layers"]) == 1
    added = {a["path"]: a for a in document["added"]}
    assert set(added) == {"/app/main.py", f"{SITE}/zz.pth"}
    assert all(a["covered"] is False for a in added.values())
    assert added["/app/main.py"]["risk"] is None and ".pth" in added[f"{SITE}/zz.pth"]["risk"]
    [setting] = document["settings"]
    assert setting["setting"].startswith("environment BASH_ENV") and setting["risk"]


def test_a_setting_changed_without_a_layer_fails(images: dict[str, Any]) -> None:
    check = _check(images, images["load"](config={"User": "0"}))
    assert not check.ok and "User '0' (signed: '10001:10001')" in check.summary()
