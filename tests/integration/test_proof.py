"""The SBOM and provenance an image carries: in the CPU image the session builds, checked against
the image's own files (hashed here, their symbols read by nm); a derived image whose op module
was replaced after the build fails `imagegen verify`, naming the op; a signed build (the
session's, conftest's ``signed_cpu_image``) verifies with its key only; the proof step's
Dockerfile builds with the classic builder too."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import platform
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import Engine, build_image
from imagegen.proof.documents import PROVENANCE, SBOM, Document, ProofDocuments
from imagegen.proof.image_proof import read_documents
from imagegen.proof.seal import PROOF_STAGE, proof_dockerfile
from tests.integration.conftest import (
    CPU_OPS,
    CPU_TAG,
    SIGNED_TAG,
    STANDIN_RUNTIME,
    SignedImage,
    imagegen,
    run_in,
)
from tests.integration.derived import derive

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SWAPPED_TAG = "imagegen-it/swapped-module:cpu_lion"
ALTERED_TAG = "imagegen-it/altered-provenance:cpu"
RELABELLED_TAG = "imagegen-it/altered-provenance:relabelled"
FORGED_TAG = "imagegen-it/forged-sbom:cpu_lion"
CLASSIC_TAG = "imagegen-it/proof-classic:cpu"
PROOF_DIR = "/opt/imagegen/proof"


def image_file(client: Any, image: str, path: str) -> bytes:
    """One file of ``image``, copied out of a container that never starts."""
    container = client.api.create_container(image, command=["true"])
    try:
        stream, _ = client.api.get_archive(container["Id"], path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.getmembers()[0]
            handle = tar.extractfile(member)
            assert handle is not None, f"{path} is not a file in {image}"
            return handle.read()
    finally:
        client.api.remove_container(container["Id"], force=True)


def properties(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def op_components(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {properties(c)["imagegen:op"]: c for c in document["components"] if "imagegen:op" in properties(c)}


@pytest.fixture(scope="module")
def derived_images(docker_client: Any) -> Iterator[None]:
    yield
    for tag in (SWAPPED_TAG, ALTERED_TAG, RELABELLED_TAG, FORGED_TAG, CLASSIC_TAG):
        with contextlib.suppress(Exception):  # not made by a test that failed early
            docker_client.images.remove(tag, force=True)


def test_the_cpu_image_carries_its_sbom_and_provenance(
    cpu_image: dict[str, Any], docker_client: Any, tmp_path: Path
) -> None:
    assert cpu_image["proof"]["image_path"] == PROOF_DIR
    result = imagegen("sbom", CPU_TAG, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    document = result.json()
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    labels = docker_client.api.inspect_image(CPU_TAG)["Config"]["Labels"]
    in_image = image_file(docker_client, CPU_TAG, f"{PROOF_DIR}/sbom.cdx.json")
    # The bytes printed are the image's file, whose digest its label carries.
    assert result.stdout.encode() == in_image
    assert labels["io.imagegen.sbom.digest"] == "sha256:" + hashlib.sha256(in_image).hexdigest()
    statement = image_file(docker_client, CPU_TAG, f"{PROOF_DIR}/provenance.intoto.json")
    assert labels["io.imagegen.provenance.digest"] == "sha256:" + hashlib.sha256(statement).hexdigest()
    extracted = tmp_path / "sbom.cdx.json"
    assert imagegen("sbom", CPU_TAG, "-o", str(extracted)).returncode == 0
    assert extracted.read_bytes() == in_image
    # Beside the build report on the host, the same bytes.
    host = Path(cpu_image["proof"]["documents"]["sbom"]["path"])
    assert host.read_bytes() == in_image and (host.parent / "build.json").is_file()

    modules = op_components(document)
    assert set(modules) == set(CPU_OPS)
    for op, component in modules.items():
        props = properties(component)
        data = image_file(docker_client, CPU_TAG, props["imagegen:path"])
        assert component["hashes"] == [{"alg": "SHA-256", "content": hashlib.sha256(data).hexdigest()}], op
        isa = props["imagegen:isa"].split(",")
        if platform.machine() == "x86_64":
            assert isa == ["scalar", "avx2", "avx512"], op  # every path is compiled, whatever the CPU
        if shutil.which("nm"):
            module = tmp_path / f"{op}.so"
            module.write_bytes(data)
            symbols = subprocess.run(["nm", "-C", str(module)], capture_output=True, text=True).stdout
            assert all(f"kernel_{level}::" in symbols for level in isa), (op, isa)
        assert props["imagegen:target"] == "cpu" and "-fopenmp" in props["imagegen:flags.cxx"]
        assert f"DS_BUILD_{op.upper()}=1" in props["imagegen:ds-build"]
        assert props["imagegen:sources.digest"].startswith("sha256:")
    purls = {c.get("purl", "") for c in document["components"]}
    assert any(p.startswith("pkg:pypi/torch@2.") for p in purls)
    assert any(p.startswith("pkg:deb/debian/python3@") for p in purls)
    assert any(c["type"] == "container" and c["name"] == STANDIN_RUNTIME for c in document["components"])
    # Licenses as the packages declare them: torch's METADATA, bash's DEP-5 copyright file (the
    # runtime keeps /usr/share/doc/*/copyright); libc6's copyright file is prose, so it has none.
    licensed = {c["purl"].split("@")[0]: c.get("licenses") for c in document["components"] if c.get("purl")}
    assert "BSD-3-Clause" in json.dumps(licensed["pkg:pypi/torch"])
    assert {"license": {"name": "GPL-3+", "acknowledgement": "declared"}} in licensed["pkg:deb/debian/bash"]
    assert licensed["pkg:deb/debian/libc6"] is None

    provenance = imagegen("sbom", CPU_TAG, "--provenance", "--json")
    assert provenance.returncode == 0 and provenance.stdout.encode() == statement
    data = provenance.json()
    assert data["_type"] == "https://in-toto.io/Statement/v1"
    assert data["predicateType"] == "https://slsa.dev/provenance/v1"
    subjects = {s["name"]: s["digest"]["sha256"] for s in data["subject"]}
    for component in modules.values():
        assert subjects[properties(component)["imagegen:path"]] == component["hashes"][0]["content"]

    text = imagegen("sbom", CPU_TAG)
    assert text.returncode == 0
    for op, component in modules.items():
        assert f"{op}  sha256:{component['hashes'][0]['content']}  isa scalar" in text.stdout
    # The image's own (non-root) user can read them.
    code, output = run_in(docker_client, CPU_TAG, ["cat", f"{PROOF_DIR}/provenance.intoto.json"])
    assert code == 0 and "in-toto" in output

    verified = imagegen("verify", CPU_TAG, "--json")
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert verified.json()["proof"] == {
        "ok": True, "sbom_digest": labels["io.imagegen.sbom.digest"], "signed": None, "exact": None,
        "mismatches": [], "derived": None,
    }  # fmt: skip


def test_verify_fails_on_an_image_whose_module_was_replaced(
    cpu_image: dict[str, Any], docker_client: Any, derived_images: None
) -> None:
    document = json.loads(imagegen("sbom", CPU_TAG, "--json").stdout)
    path = properties(op_components(document)["cpu_lion"])["imagegen:path"]
    # The same module with bytes appended: it still loads and computes right, so only the SBOM
    # can tell it is not the file the build made.
    replaced = image_file(docker_client, CPU_TAG, path) + b"\0" * 64
    derive(docker_client, SWAPPED_TAG, CPU_TAG, {path: replaced}, {})
    result = imagegen("verify", SWAPPED_TAG, "--json")
    assert result.returncode == 1, result.stderr[-2000:]
    data = result.json()
    assert all(op["ok"] for op in data["ops"])  # load, self-test: all pass
    assert data["ok"] is False and data["proof"]["ok"] is False
    assert [m["op"] for m in data["proof"]["mismatches"]] == ["cpu_lion"]
    assert hashlib.sha256(replaced).hexdigest() in data["proof"]["mismatches"][0]["problem"]
    text = imagegen("verify", SWAPPED_TAG)
    assert text.returncode == 1
    assert "cpu_lion" in text.stderr and "changed after the build" in text.stderr


def test_a_signed_build_verifies_with_its_key_only(
    cpu_image: dict[str, Any], signed_cpu_image: SignedImage, docker_client: Any, derived_images: None
) -> None:
    public, wrong = signed_cpu_image.keys.public, signed_cpu_image.keys.other
    assert (
        signed_cpu_image.summary["proof"]["documents"]["signature"]["media_type"]
        == "application/vnd.dsse.envelope.v1+json"
    )
    good = imagegen("verify", SIGNED_TAG, "--key", str(public), "--json")
    assert good.returncode == 0, good.stderr[-2000:]
    assert good.json()["proof"]["signed"] is True
    bad = imagegen("verify", SIGNED_TAG, "--key", str(wrong))
    assert bad.returncode == 1 and "no signature verifies with the key given" in bad.stderr
    unsigned = imagegen("verify", CPU_TAG, "--key", str(public))
    assert unsigned.returncode == 1 and "not signed" in unsigned.stderr
    envelope = imagegen("sbom", SIGNED_TAG, "--signature", "--json")
    assert envelope.returncode == 0 and envelope.json()["payloadType"] == "application/vnd.in-toto+json"

    # An altered statement: caught by its label's digest, and, relabelled too, by the signature.
    statement = image_file(docker_client, SIGNED_TAG, f"{PROOF_DIR}/provenance.intoto.json")
    data = json.loads(statement)
    data["subject"][0]["digest"]["sha256"] = "0" * 64
    altered = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    files = {f"{PROOF_DIR}/provenance.intoto.json": altered}
    derive(docker_client, ALTERED_TAG, SIGNED_TAG, files, {})
    result = imagegen("verify", ALTERED_TAG, "--key", str(public))
    assert result.returncode == 1 and "provenance.intoto.json was changed after the build" in result.stderr
    digest = "sha256:" + hashlib.sha256(altered).hexdigest()
    derive(
        docker_client,
        RELABELLED_TAG,
        SIGNED_TAG,
        files,
        {},
        (f'LABEL io.imagegen.provenance.digest="{digest}"',),
    )
    result = imagegen("verify", RELABELLED_TAG, "--key", str(public))
    assert result.returncode == 1 and "differs from the one that was signed" in result.stderr


def test_a_forger_who_rewrites_the_sbom_fails_verify_with_the_key(
    signed_cpu_image: SignedImage, docker_client: Any, derived_images: None
) -> None:
    # A module replaced, the SBOM rewritten with its new hash and relabelled: everything but the
    # signed statement agrees with the forgery, so only the statement as the root can catch it.
    public = signed_cpu_image.keys.public
    sbom = image_file(docker_client, SIGNED_TAG, f"{PROOF_DIR}/sbom.cdx.json")
    document = json.loads(sbom)
    component = op_components(document)["cpu_lion"]
    path = properties(component)["imagegen:path"]
    forged_module = image_file(docker_client, SIGNED_TAG, path) + b"\0" * 64
    forged_sha = hashlib.sha256(forged_module).hexdigest()
    component["hashes"] = [{"alg": "SHA-256", "content": forged_sha}]
    forged_sbom = (json.dumps(document, indent=2) + "\n").encode()
    label = "sha256:" + hashlib.sha256(forged_sbom).hexdigest()
    files = {path: forged_module, f"{PROOF_DIR}/sbom.cdx.json": forged_sbom}
    derive(docker_client, FORGED_TAG, SIGNED_TAG, files, {}, (f'LABEL io.imagegen.sbom.digest="{label}"',))

    # Without the key the forgery is consistent (what an unsigned proof cannot show) ...
    unsigned = imagegen("verify", FORGED_TAG, "--json")
    assert unsigned.returncode == 0, unsigned.stderr[-2000:]
    # ... with it, the SBOM is checked against what was signed, and the image is not the signed one.
    result = imagegen("verify", FORGED_TAG, "--key", str(public), "--json")
    assert result.returncode == 1, result.stderr[-2000:]
    proof = result.json()["proof"]
    assert proof["signed"] is True and proof["ok"] is False and proof["exact"] is False
    problems = [m["problem"] for m in proof["mismatches"]]
    assert any("not the one the signed provenance names" in p for p in problems)
    assert any("above the signed image's" in p for p in problems)
    # Read as derived, the replaced module and the rewritten proof are named too.
    derived = imagegen("verify", FORGED_TAG, "--key", str(public), "--derived", "--json")
    assert derived.returncode == 1, derived.stderr[-2000:]
    by_op = {m["op"]: m["problem"] for m in derived.json()["proof"]["mismatches"]}
    assert "not the one that was signed" in by_op["cpu_lion"] and forged_sha in by_op["cpu_lion"]
    text = imagegen("verify", FORGED_TAG, "--key", str(public), "--derived")
    assert text.returncode == 1 and "cpu_lion" in text.stderr


def test_sbom_of_an_image_without_one_is_bad_input(docker_ready: None) -> None:
    result = imagegen("sbom", STANDIN_RUNTIME)
    assert result.returncode == 2
    assert "has no SBOM" in result.stderr and "imagegen build" in result.stderr
    assert imagegen("sbom", "imagegen-it/no-such-image:1").returncode == 2
    assert imagegen("sbom", "Not An Image").returncode == 2
    assert imagegen("sbom", CPU_TAG, "--provenance", "--signature").returncode == 2  # one document


def test_the_proof_step_builds_with_the_classic_builder(
    cpu_image: dict[str, Any], docker_client: Any, derived_images: None, tmp_path: Path
) -> None:
    found = read_documents(CPU_TAG)
    documents = ProofDocuments(
        Document(SBOM, found.files[SBOM.filename]), Document(PROVENANCE, found.files[PROVENANCE.filename])
    )
    for doc in documents.all():
        (tmp_path / doc.type.filename).write_bytes(doc.data)
    build_image(
        Engine("classic", None, "classic"), tmp_path, proof_dockerfile(CPU_TAG, documents), CLASSIC_TAG,
        target=PROOF_STAGE,
    )  # fmt: skip
    labels = docker_client.api.inspect_image(CLASSIC_TAG)["Config"]["Labels"]
    assert labels["io.imagegen.sbom.digest"] == found.labels["io.imagegen.sbom.digest"]
    assert image_file(docker_client, CLASSIC_TAG, f"{PROOF_DIR}/sbom.cdx.json") == documents.sbom.data
