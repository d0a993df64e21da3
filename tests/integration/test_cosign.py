"""The real cosign verifies what `imagegen build --sign-key KEY --push` pushed: Debian's cosign 3
(sid) and cosign 2 (trixie), installed by scripts/system-deps.sh, against Debian's registry 2.8 on
the loopback (no referrers API: cosign finds the bundles through the `sha256-<hex>` tag).

One signed CPU image is built and pushed for the whole session (conftest's
``pushed_signed_image``, which test_publish.py reads too). An image index of two platforms
is made from it and an image derived from it (`publish_index`, as `imagegen build --platform
A,B --push` calls it), so that `cosign verify` of an index tag runs here without building arm64
under emulation. Each command is the one docs/imagegen.md shows (`test_the_docs_show_the_commands
_run_here` holds the docs to this table); which verifier reads which storage (cosign 3: bundles,
else the legacy tags; cosign 2: the legacy tags) is measured on tiny images that carry one or the
other.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import detect_engine
from imagegen.oci import cosign_tags
from imagegen.oci.cosign_bundles import bundles, statements
from imagegen.oci.publish import attach_proof, publish_index, push_image
from imagegen.proof import documents as docs
from imagegen.proof.bundle import Subject
from imagegen.proof.signing import Signer
from imagegen.registry.distribution import RegistryClient
from imagegen.registry.manifest import OCI_MANIFEST, Descriptor, encode
from imagegen.registry.referrers import Document, attach
from tests.integration import oci_reader
from tests.integration.conftest import PUSHED_REPOSITORY, REPO, Keys, SignedImage
from tests.integration.derived import derive

pytestmark = pytest.mark.docker

COSIGN_ROOT = Path(os.environ.get("COSIGN_ROOT", "/usr/local/lib/imagegen"))
REPOSITORY = PUSHED_REPOSITORY
SIGN = "https://sigstore.dev/cosign/sign/v1"
SLSA = "https://slsa.dev/provenance/v1"
CYCLONEDX = "https://cyclonedx.org/bom"

# docs/imagegen.md's cosign commands, word for word, with its key file and image: each runs here
# with this module's key and reference in their place, adding only --allow-insecure-registry
# (this registry speaks plain HTTP on the loopback).
DOCS_KEY, DOCS_IMAGE = "pub.pem", "registry.internal/ml/ops:1"
COMMANDS = {
    SIGN: ("cosign", "verify", "--key", DOCS_KEY, "--insecure-ignore-tlog", DOCS_IMAGE),
    SLSA: ("cosign", "verify-attestation", "--key", DOCS_KEY, "--insecure-ignore-tlog",
           "--type", "slsaprovenance1", DOCS_IMAGE),
    CYCLONEDX: ("cosign", "verify-attestation", "--key", DOCS_KEY, "--insecure-ignore-tlog",
                "--type", "cyclonedx", DOCS_IMAGE),
}  # fmt: skip
DOCS_SECTION = "### Read by cosign, Kyverno, policy-controller and Trivy"


def _binary(major: int) -> Path:
    binary = COSIGN_ROOT / f"cosign-{major}" / "cosign"
    if not binary.is_file():
        pytest.skip(f"no cosign {major} at {binary} (scripts/system-deps.sh installs Debian's)")
    return binary


@dataclass(frozen=True)
class Verified:
    returncode: int
    stdout: str
    stderr: str

    def statements(self) -> list[dict[str, Any]]:
        """verify-attestation's output: one DSSE envelope per line, each statement decoded."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        return [json.loads(base64.b64decode(json.loads(line)["payload"])) for line in lines]

    def claims(self) -> list[dict[str, Any]]:
        """verify's output: a JSON array of what each signature claims."""
        found: list[dict[str, Any]] = json.loads(self.stdout)
        return found


def cosign(major: int, kind: str, public: Path, reference: str) -> Verified:
    """Run docs/imagegen.md's command for ``kind`` with cosign ``major`` on ``reference``."""
    words = [{DOCS_KEY: str(public), DOCS_IMAGE: reference}.get(w, w) for w in COMMANDS[kind][1:]]
    done = subprocess.run(
        [str(_binary(major)), *words, "--allow-insecure-registry"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return Verified(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def pushed(request: pytest.FixtureRequest) -> SignedImage:
    """The session's CPU image signed with a P-256 key (cosign's default key type, made as
    docs/imagegen.md says) and pushed by the CLI."""
    _binary(3), _binary(2)  # before the build: without cosign there is nothing to check
    image: SignedImage = request.getfixturevalue("pushed_signed_image")
    return image


@pytest.fixture(scope="module")
def signed(pushed: SignedImage) -> dict[str, Any]:
    """The pushed image's build summary."""
    return pushed.summary


@pytest.fixture(scope="module")
def keys(pushed: SignedImage) -> Keys:
    return pushed.keys


@pytest.fixture(scope="module")
def index(
    signed: dict[str, Any], local_registry: str, keys: Keys, docker_client: Any
) -> Iterator[dict[str, Any]]:
    """An index of two platforms under ``:multi``, signed: the signed image as linux/amd64 and an
    image derived from it (one file more, its own manifest) as linux/arm64, each pushed with its
    proof and signature, as `imagegen build --platform A,B --push` pushes its platforms."""
    signer = Signer.from_file(keys.private)
    tag, other = signed["tag"], f"{local_registry}/{REPOSITORY}:1-other"
    derive(docker_client, other, tag, {"/opt/imagegen-it/other": b"another platform's image\n"}, {})
    try:
        push_image(detect_engine(os.environ), other)
        platforms = [
            ("linux/amd64", attach_proof(tag, signer=signer)),
            ("linux/arm64", attach_proof(other, signer=signer)),
        ]
        assert platforms[0][1].manifest.digest == signed["published"]["digest"]
        multi = f"{local_registry}/{REPOSITORY}:multi"
        descriptor = publish_index(multi, platforms, signer)
        yield {"tag": multi, "digest": descriptor.digest, "platforms": platforms}
    finally:
        docker_client.api.remove_image(other, force=True)


def _digest_hex(digest: str) -> str:
    return digest.split(":", 1)[1]


# ---------------------------------------------------------------- one platform


@pytest.mark.parametrize("major", [3, 2])
def test_cosign_verifies_the_signature_and_both_attestations(
    major: int, signed: dict[str, Any], keys: Keys
) -> None:
    digest = signed["published"]["digest"]
    verified = cosign(major, SIGN, keys.public, signed["tag"])
    assert verified.returncode == 0, verified.stderr[-2000:]
    claims = verified.claims()
    assert {c["critical"]["image"]["docker-manifest-digest"] for c in claims} == {digest}
    # cosign 3 reads the bundles (cosign's own signature statement and the two attestations, all
    # signed by the key); cosign 2 the .sig tag's simple signing payload.
    kinds = {c["critical"]["type"] for c in claims}
    assert kinds == ({SIGN, SLSA, CYCLONEDX} if major == 3 else {"cosign container image signature"})
    for kind in (SLSA, CYCLONEDX):
        attested = cosign(major, kind, keys.public, signed["tag"])
        assert attested.returncode == 0, attested.stderr[-2000:]
        [statement] = attested.statements()
        assert statement["predicateType"] == kind
        assert statement["subject"] == [
            {"name": f"{signed['tag'].rsplit(':', 1)[0]}", "digest": {"sha256": _digest_hex(digest)}}
        ]
    # The SBOM attested is the one the image carries, byte for byte as JSON.
    [sbom] = cosign(major, CYCLONEDX, keys.public, signed["tag"]).statements()
    assert sbom["predicate"] == json.loads(Path(signed["proof"]["documents"]["sbom"]["path"]).read_bytes())


@pytest.mark.parametrize("major", [3, 2])
def test_another_key_is_refused(major: int, signed: dict[str, Any], keys: Keys) -> None:
    for kind in COMMANDS:
        refused = cosign(major, kind, keys.other, signed["tag"])
        assert refused.returncode != 0, (kind, refused.stdout[-500:])
        assert "no matching" in refused.stderr or "do not match threshold" in refused.stderr, refused.stderr[
            -1000:
        ]


def test_the_referrers_say_when_the_build_made_them_and_a_push_again_changes_nothing(
    signed: dict[str, Any], index: dict[str, Any], local_registry: str, keys: Keys
) -> None:
    # The index fixture attached the proof to the CLI's push a second time: the same referrers.
    digest = signed["published"]["digest"]
    referrers = json.loads(
        oci_reader.manifest(local_registry, REPOSITORY, "sha256-" + _digest_hex(digest))[1]
    )
    assert len(referrers["manifests"]) == len(signed["published"]["proof"]["referrers"]) == 6
    provenance = json.loads(Path(signed["proof"]["documents"]["provenance"]["path"]).read_bytes())
    finished = provenance["predicate"]["runDetails"]["metadata"]["finishedOn"]
    for entry in referrers["manifests"]:
        created = entry["annotations"]["org.opencontainers.image.created"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created) and finished.startswith(created[:-1])
    before = {
        ref: oci_reader.manifest(local_registry, REPOSITORY, ref)[1]
        for ref in (
            "sha256-" + _digest_hex(digest),
            cosign_tags.tag(digest, "sig"),
            cosign_tags.tag(digest, "att"),
        )
    }
    attach_proof(signed["tag"], signer=Signer.from_file(keys.private))
    assert before == {ref: oci_reader.manifest(local_registry, REPOSITORY, ref)[1] for ref in before}


# ---------------------------------------------------------------- an index of two platforms


@pytest.mark.parametrize("major", [3, 2])
def test_cosign_verifies_the_index_tag(major: int, index: dict[str, Any], keys: Keys) -> None:
    # cosign resolves the tag to the index's digest and looks for signatures of that digest.
    verified = cosign(major, SIGN, keys.public, index["tag"])
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert {c["critical"]["image"]["docker-manifest-digest"] for c in verified.claims()} == {index["digest"]}
    for kind in (SLSA, CYCLONEDX):
        attested = cosign(major, kind, keys.public, index["tag"])
        assert attested.returncode == 0, attested.stderr[-2000:]
        # One statement per platform, about the index and that platform's manifest.
        found = {
            s["subject"][1]["annotations"]["imagegen:platform"]: s["subject"] for s in attested.statements()
        }
        assert set(found) == {"linux/amd64", "linux/arm64"}
        for platform, published in index["platforms"]:
            assert [s["digest"]["sha256"] for s in found[platform]] == [
                _digest_hex(index["digest"]),
                _digest_hex(published.manifest.digest),
            ]
    refused = cosign(major, SIGN, keys.other, index["tag"])
    assert refused.returncode != 0


def test_each_platform_keeps_its_own_signatures(
    index: dict[str, Any], local_registry: str, keys: Keys
) -> None:
    for platform, published in index["platforms"]:
        by_digest = f"{local_registry}/{REPOSITORY}@{published.manifest.digest}"
        for kind in COMMANDS:
            verified = cosign(3, kind, keys.public, by_digest)
            assert verified.returncode == 0, (platform, kind, verified.stderr[-2000:])
        [statement] = cosign(3, SLSA, keys.public, by_digest).statements()
        assert [s["digest"]["sha256"] for s in statement["subject"]] == [
            _digest_hex(published.manifest.digest)
        ]


# ---------------------------------------------------------------- which verifier reads what


def _tiny_image(client: RegistryClient, repository: str, tag: str) -> Descriptor:
    """A one-layer image put straight into the registry (nothing is built): a subject to sign."""
    layer, config = (
        tag.encode(),
        encode({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}),
    )
    for blob in (layer, config):
        client.put_blob(repository, blob)
    manifest = encode(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": Descriptor.of("application/vnd.oci.image.config.v1+json", config).to_json(),
            "layers": [Descriptor.of("application/vnd.oci.image.layer.v1.tar", layer).to_json()],
        }
    )
    client.put_manifest(repository, tag, manifest, OCI_MANIFEST)
    return Descriptor.of(OCI_MANIFEST, manifest)


def _signed_tiny(
    local_registry: str, signer: Signer, proof: docs.ProofDocuments, tag: str, storage: Sequence[str]
) -> str:
    """A tiny image signed into ``storage``: "bundles" (cosign 3's referrers), "legacy" (cosign 2's
    tags), "keyid" (bundles written with the key id on their signature, as imagegen once did)."""
    repository = "imagegen-it/cosign-storage"
    name = f"{local_registry}/{repository}"
    with RegistryClient(local_registry) as client:
        subject = _tiny_image(client, repository, tag)
        signed = statements([Subject(name, subject.digest)], proof)
        made = bundles(client, repository, subject.digest, signed, signer)
        if "keyid" in storage:
            relabelled = []
            for document in made:
                data = json.loads(document.data)
                data["dsseEnvelope"]["signatures"][0]["keyid"] = signer.keyid
                relabelled.append(Document(json.dumps(data).encode(), document.media_type, document.filename,
                                           document.annotations))  # fmt: skip
            attach(client, repository, subject, relabelled)
        if "bundles" in storage:
            attach(client, repository, subject, made)
        if "legacy" in storage:
            cosign_tags.put_legacy(client, repository, name, subject.digest, signed, signer)
    return f"{name}:{tag}"


@pytest.fixture(scope="module")
def tiny_proof(signed: dict[str, Any]) -> docs.ProofDocuments:
    documents = signed["proof"]["documents"]
    return docs.ProofDocuments(
        docs.Document(docs.SBOM, Path(documents["sbom"]["path"]).read_bytes()),
        docs.Document(docs.PROVENANCE, Path(documents["provenance"]["path"]).read_bytes()),
    )


def test_which_verifier_reads_which_storage(
    local_registry: str, keys: Keys, tiny_proof: docs.ProofDocuments
) -> None:
    signer = Signer.from_file(keys.private)
    results = {}
    for storage in (("bundles",), ("legacy",), ("keyid",)):
        reference = _signed_tiny(local_registry, signer, tiny_proof, "-".join(storage), storage)
        results[storage] = {
            (major, kind): cosign(major, kind, keys.public, reference)
            for major in (3, 2)
            for kind in COMMANDS
        }
    passed = {s: {k for k, v in r.items() if v.returncode == 0} for s, r in results.items()}
    everything = {(major, kind) for major in (3, 2) for kind in COMMANDS}
    # cosign 3 reads the bundles; cosign 2 never does (its --new-bundle-format needs the public
    # Sigstore trust root, out of reach here) ...
    assert passed[("bundles",)] == {(3, kind) for kind in COMMANDS}
    # ... cosign 2 reads the .sig / .att tags, and cosign 3 too when an image has no bundle ...
    assert passed[("legacy",)] == everything
    # ... and a bundle whose signature names the key id imagegen labels its envelope with is
    # refused by cosign 3, which derives its own id and skips a signature naming another.
    assert passed[("keyid",)] == set()
    assert "Found: 0, Expected 1" in results[("keyid",)][(3, SIGN)].stderr


# ---------------------------------------------------------------- the docs


def test_the_docs_show_the_commands_run_here() -> None:
    text = (REPO / "docs" / "imagegen.md").read_text()
    section = text.split(DOCS_SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    shown = set()
    for line in section.replace("\\\n", " ").splitlines():
        if line.startswith("$ cosign "):
            shown.add(tuple(shlex.split(line[2:].split("  #", 1)[0])))
    assert shown == set(COMMANDS.values())
