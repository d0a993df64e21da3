"""An image's SBOM and provenance, from hand-written facts (no Docker): the CycloneDX document
against the official 1.6 schema, the comparison that names a swapped op module, the provenance
statement, DSSE signing with right and wrong keys, the probe's readers and the source digests."""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from imagegen.errors import BadInputError
from imagegen.proof import probe
from imagegen.proof.compare import compare, compare_statement, sbom_ops, signed_modules
from imagegen.proof.documents import PROVENANCE, SBOM, Document, ProofDocuments
from imagegen.proof.facts import ImageFacts
from imagegen.proof.provenance import ProvenanceInput, Revision, make_statement
from imagegen.proof.sbom import BaseImage, SbomInput, make_sbom
from imagegen.proof.signing import KINDS, Signer, check_envelope, load_public_key, pae
from imagegen.proof.source_digests import op_source_digest

SITE = "/opt/venv/lib/python3.12/site-packages/kernels/_ops"
ADAM_SHA = hashlib.sha256(b"cpu_adam module").hexdigest()
LAMB_SHA = hashlib.sha256(b"fused_lamb module").hexdigest()
WHEN = datetime.datetime(2026, 11, 25, 18, 0, tzinfo=datetime.timezone.utc)

# What the probe prints for a CUDA image with one CPU op and one GPU op (fields as probe.collect).
FACTS: dict[str, Any] = {
    "format": 1,
    "python": "3.12.3",
    "prefix": "/opt/venv",
    "machine": "x86_64",
    "os": {"id": "ubuntu", "version_id": "24.04", "pretty_name": "Ubuntu 24.04 LTS"},
    "deb_packages": [
        {"name": "libaio1t64", "version": "0.3.113-6", "architecture": "amd64",
         "license": {"names": ["LGPL-2.1+", "GPL-2+ or LGPL-2.1+"]}},
        {"name": "python3", "version": "3.12.3-0ubuntu2", "architecture": "amd64"},
    ],
    "python_packages": [
        {"name": "torch", "version": "2.15.0", "license": {"expression": "BSD-3-Clause AND MIT"}},
        {"name": "nvidia-cublas", "version": "13.2.1.1",
         "license": {"classifiers": ["License :: Other/Proprietary License"]}},
        {"name": "nvidia_cuda_runtime", "version": "13.2.51"},
    ],
    "manifest_path": f"{SITE}/manifest.json",
    "manifest": {
        "format": 1, "torch": "2.15.0", "cuda": "13.0", "hip": None, "accelerator": "cuda",
        "python": "3.12.3",
        "ops": {
            "cpu_adam": {
                "module": "kernels._ops.cpu_adam", "target": "cpu", "archs": [],
                "flags": {"cxx": ["-O3", "-fopenmp"], "device": [], "device_compiler": None,
                          "sources": ["/src/kernels/optim/csrc/cpu_adam.cpp"],
                          "include_dirs": ["/src/kernels/optim/includes"]},
            },
            "fused_lamb": {
                "module": "kernels._ops.fused_lamb", "target": "gpu", "archs": ["9.0+PTX"],
                "flags": {"cxx": ["-O3"], "device": ["-gencode=arch=compute_90,code=sm_90"],
                          "device_compiler": "nvcc 13.0", "sources": [], "include_dirs": []},
            },
        },
    },
    "manifest_error": None,
    "ops": [
        {"name": "cpu_adam", "module": "kernels._ops.cpu_adam", "target": "cpu", "error": None,
         "path": f"{SITE}/cpu_adam.so", "sha256": ADAM_SHA, "size": 15,
         "sass": [], "ptx": [], "gfx": [], "other": [], "unreadable": [],
         "isa": ["scalar", "avx2", "avx512"], "compilers": ["GCC: (Ubuntu 13.2.0) 13.2.0"]},
        {"name": "fused_lamb", "module": "kernels._ops.fused_lamb", "target": "gpu", "error": None,
         "path": f"{SITE}/fused_lamb.so", "sha256": LAMB_SHA, "size": 17,
         "sass": ["sm_90"], "ptx": ["compute_90"], "gfx": [], "other": [], "unreadable": [],
         "isa": [], "compilers": ["GCC: (Ubuntu 13.2.0) 13.2.0"]},
    ],
    "torch": {"version": "2.15.0+cu132", "cuda": "13.2", "hip": None, "cxx11_abi": True},
}  # fmt: skip
BASES = (
    BaseImage("devel", "nvidia/cuda:13.0.0-devel-ubuntu24.04", "sha256:" + "1" * 64),
    BaseImage("runtime", "nvidia/cuda:13.0.0-base-ubuntu24.04", "sha256:" + "2" * 64),
)


def facts(raw: dict[str, Any] | None = None) -> ImageFacts:
    return ImageFacts.from_json(raw or FACTS)


def sbom_bytes(raw: dict[str, Any] | None = None) -> bytes:
    return make_sbom(
        SbomInput(
            image="acme/ops:1",
            facts=facts(raw),
            bases=BASES,
            ds_build=("DS_BUILD_OPS=0", "DS_BUILD_CPU_ADAM=1", "DS_BUILD_FUSED_LAMB=1"),
            source_digests={"cpu_adam": "sha256:" + "3" * 64},
            timestamp=WHEN,
            tool_version="0.1.0",
        )
    )


def properties(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


# --------------------------------------------------------------------------- the SBOM


def test_sbom_is_valid_cyclonedx_1_6_with_every_part() -> None:
    text = sbom_bytes().decode()
    # The official schema, through the library's validator (jsonschema): independent of our code.
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = json.loads(text)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    purls = {c.get("purl") for c in document["components"]}
    assert "pkg:deb/ubuntu/libaio1t64@0.3.113-6?arch=amd64&distro=ubuntu-24.04" in purls
    assert {
        "pkg:pypi/torch@2.15.0",
        "pkg:pypi/nvidia-cublas@13.2.1.1",
        "pkg:pypi/nvidia-cuda-runtime@13.2.51",
    } <= purls
    # Licenses in both of the schema's shapes: one expression, or a list of ids and names.
    licensed = {c["name"]: c["licenses"] for c in document["components"] if "licenses" in c}
    assert licensed == {
        "torch": [{"expression": "BSD-3-Clause AND MIT", "acknowledgement": "declared"}],
        "nvidia-cublas": [{"license": {"name": "Other/Proprietary License", "acknowledgement": "declared"}}],
        "libaio1t64": [
            {"license": {"id": "LGPL-2.1+", "acknowledgement": "declared"}},
            {"license": {"name": "GPL-2+ or LGPL-2.1+", "acknowledgement": "declared"}},
        ],
    }
    bases = [c for c in document["components"] if c["type"] == "container"]
    assert sorted((c["name"], c["hashes"][0]["content"]) for c in bases) == [
        ("nvidia/cuda:13.0.0-base-ubuntu24.04", "2" * 64),
        ("nvidia/cuda:13.0.0-devel-ubuntu24.04", "1" * 64),
    ]


def test_each_op_module_is_a_component_with_its_hash_and_device_code() -> None:
    document = json.loads(sbom_bytes())
    modules = {
        properties(c)["imagegen:op"]: c for c in document["components"] if "imagegen:op" in properties(c)
    }
    assert set(modules) == {"cpu_adam", "fused_lamb"}
    lamb, adam = modules["fused_lamb"], modules["cpu_adam"]
    assert lamb["hashes"] == [{"alg": "SHA-256", "content": LAMB_SHA}]
    assert adam["hashes"] == [{"alg": "SHA-256", "content": ADAM_SHA}]
    assert lamb["name"] == f"{SITE}/fused_lamb.so" and lamb["type"] == "file"
    gpu = properties(lamb)
    assert (
        gpu["imagegen:sass"] == "sm_90" and gpu["imagegen:ptx"] == "compute_90" and gpu["imagegen:gfx"] == ""
    )
    assert gpu["imagegen:target"] == "cuda" and gpu["imagegen:toolkit"] == "cuda 13.0"
    assert gpu["imagegen:archs"] == "9.0+PTX" and gpu["imagegen:torch.cxx11-abi"] == "cxx11"
    assert gpu["imagegen:flags.device"] == "-gencode=arch=compute_90,code=sm_90"
    assert "imagegen:isa" not in gpu
    cpu = properties(adam)
    assert cpu["imagegen:isa"] == "scalar,avx2,avx512" and cpu["imagegen:target"] == "cpu"
    assert "imagegen:sass" not in cpu
    assert cpu["imagegen:ds-build"] == "DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_LAMB=1"
    assert cpu["imagegen:sources.digest"] == "sha256:" + "3" * 64
    assert cpu["imagegen:compilers"] == "GCC: (Ubuntu 13.2.0) 13.2.0"


# --------------------------------------------------------------------------- SBOM against the image


def test_the_image_as_built_matches_its_sbom() -> None:
    assert compare(json.loads(sbom_bytes()), facts()) == ()


def test_a_module_swapped_after_the_build_fails_naming_the_op() -> None:
    swapped = copy.deepcopy(FACTS)
    swapped["ops"][1]["sha256"] = hashlib.sha256(b"another module").hexdigest()
    problems = compare(json.loads(sbom_bytes()), facts(swapped))
    assert [m.op for m in problems] == ["fused_lamb"]
    assert "changed after the build" in problems[0].problem and LAMB_SHA in problems[0].problem


def test_other_device_code_or_isa_than_recorded_fails_naming_the_op() -> None:
    document = json.loads(sbom_bytes())
    other = copy.deepcopy(FACTS)
    other["ops"][1]["ptx"] = []
    other["ops"][0]["isa"] = ["scalar"]
    problems = {str(m) for m in compare(document, facts(other))}
    assert "fused_lamb: ptx in the module: none, the SBOM says compute_90" in problems
    assert "cpu_adam: isa in the module: scalar, the SBOM says scalar,avx2,avx512" in problems


def test_an_op_missing_or_unlisted_fails() -> None:
    document = json.loads(sbom_bytes())
    fewer = copy.deepcopy(FACTS)
    fewer["ops"] = fewer["ops"][:1]
    assert [(m.op, "image has none" in m.problem) for m in compare(document, facts(fewer))] == [
        ("fused_lamb", True)
    ]
    # An SBOM that lost an op's component: the image's op is not in it.
    document["components"] = [
        c for c in document["components"] if properties(c).get("imagegen:op") != "cpu_adam"
    ]
    assert [m.op for m in compare(document, facts())] == ["cpu_adam"]
    assert sbom_ops({"bomFormat": "CycloneDX", "components": []}) == {}
    assert [str(m) for m in compare({"bomFormat": "SPDX"}, facts())] == [
        "the SBOM cannot be read: not a CycloneDX document"
    ]


# --------------------------------------------------------------------------- provenance and signing


def statement_bytes() -> bytes:
    sbom = Document(SBOM, sbom_bytes())
    return make_statement(
        ProvenanceInput(
            image="acme/ops:1",
            runtime_image_id="sha256:" + "4" * 64,
            facts=facts(),
            spec={"target": "cuda13.0", "ops": ["cpu_adam", "fused_lamb"]},
            dockerfile="FROM scratch\n",
            revision=Revision("a" * 40, dirty=False),
            bases=BASES,
            op_packages=[("acme_ops", "sha256:" + "5" * 64)],
            source_digests={"cpu_adam": "sha256:" + "3" * 64},
            engine="buildkit",
            engine_version="20.10.24",
            tool_version="0.1.0",
            started=WHEN,
            finished=WHEN + datetime.timedelta(minutes=3),
            invocation_id="0",
        ),
        sbom,
    )


def test_provenance_is_an_in_toto_statement_naming_what_was_built_from_what() -> None:
    data = json.loads(statement_bytes())
    assert data["_type"] == "https://in-toto.io/Statement/v1"
    assert data["predicateType"] == "https://slsa.dev/provenance/v1"
    subjects = {s["name"]: s["digest"] for s in data["subject"]}
    assert subjects["acme/ops:1"] == {"sha256": "4" * 64}
    assert subjects[f"{SITE}/fused_lamb.so"] == {"sha256": LAMB_SHA}
    deps = {d["name"]: d for d in data["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["Dockerfile"]["digest"] == {"sha256": hashlib.sha256(b"FROM scratch\n").hexdigest()}
    assert deps["project"]["digest"] == {"gitCommit": "a" * 40}
    assert deps["nvidia/cuda:13.0.0-base-ubuntu24.04"]["digest"] == {"sha256": "2" * 64}
    assert deps["op-package:acme_ops"]["digest"] == {"sha256": "5" * 64}
    run = data["predicate"]["runDetails"]
    assert run["metadata"]["startedOn"] == "2026-11-25T18:00:00Z"
    assert run["metadata"]["finishedOn"] == "2026-11-25T18:03:00Z"
    assert run["builder"]["version"] == {"imagegen": "0.1.0", "engine": "buildkit 20.10.24"}
    assert run["byproducts"][0]["digest"] == {"sha256": hashlib.sha256(sbom_bytes()).hexdigest()}


def test_pae_is_dsse_v1s_encoding() -> None:
    # The worked example of the DSSE v1 protocol document.
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def write_key(path: Path, key: Any, public: bool = False) -> Path:
    if public:
        data = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    else:
        data = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    path.write_bytes(data)
    return path


def test_signed_provenance_verifies_with_the_right_key_only(tmp_path: Path) -> None:
    key, other = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    signer = Signer.from_file(write_key(tmp_path / "key.pem", key))
    statement = statement_bytes()
    envelope = signer.envelope(statement)
    right = load_public_key(write_key(tmp_path / "pub.pem", key, public=True))
    assert check_envelope(envelope, statement, right) is None
    # The private key stands for its public half too.
    assert check_envelope(envelope, statement, load_public_key(tmp_path / "key.pem")) is None
    # The signature itself, checked with the library's own verify over the PAE (not ours).
    document = json.loads(envelope)
    key.public_key().verify(
        base64.b64decode(document["signatures"][0]["sig"]), pae(PROVENANCE.media_type, statement)
    )
    wrong = load_public_key(write_key(tmp_path / "other.pem", other, public=True))
    assert "no signature verifies" in str(check_envelope(envelope, statement, wrong))


def test_an_altered_statement_or_envelope_fails(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    signer = Signer.from_file(write_key(tmp_path / "key.pem", key))
    statement = statement_bytes()
    envelope = signer.envelope(statement)
    public = key.public_key()
    altered = statement.replace(LAMB_SHA.encode(), hashlib.sha256(b"x").hexdigest().encode())
    assert "differs from the one that was signed" in str(check_envelope(envelope, altered, public))
    # An envelope whose payload was altered along with the statement: the signature fails.
    document = json.loads(envelope)
    document["payload"] = base64.b64encode(altered).decode()
    forged = json.dumps(document).encode()
    assert "no signature verifies" in str(check_envelope(forged, altered, public))
    assert "malformed" in str(check_envelope(b"{}", statement, public))


def forged_facts() -> dict[str, Any]:
    """The image's facts after a forger replaced cpu_adam's module (same path, other bytes)."""
    forged = copy.deepcopy(FACTS)
    forged["ops"][0]["sha256"] = hashlib.sha256(b"forged cpu_adam module").hexdigest()
    return forged


def _statement_problems(statement: bytes, sbom: bytes | None) -> tuple[Any, ...]:
    return compare_statement(statement, sbom)[1]


def test_the_signed_statement_names_the_sbom_the_image_holds() -> None:
    document, problems = compare_statement(statement_bytes(), sbom_bytes())
    assert problems == () and document is not None
    assert signed_modules(document) == {
        op["path"]: (op["name"], op["sha256"]) for op in FACTS["ops"]
    }  # path -> (op, sha256), for the layers' check (tests/unit/imagegen/proof/test_derived_layers.py)


def test_a_forger_who_rewrites_the_sbom_fails_against_the_signed_statement() -> None:
    # The forger's SBOM agrees with the forged module, so the SBOM check alone passes ...
    forged_sbom = sbom_bytes(forged_facts())
    assert compare(json.loads(forged_sbom), facts(forged_facts())) == ()
    # ... but the signed statement still names the old SBOM (and the old module: the layers' check).
    problems = _statement_problems(statement_bytes(), forged_sbom)
    assert [m.op for m in problems] == [None]
    assert "not the one the signed provenance names" in problems[0].problem
    assert "the image has none" in str(_statement_problems(statement_bytes(), None)[0])


def test_a_signed_document_that_is_not_a_statement_fails() -> None:
    assert "not JSON" in _statement_problems(b"\xff{", sbom_bytes())[0].problem
    assert "not an in-toto statement" in _statement_problems(b"[]", sbom_bytes())[0].problem
    bare = json.loads(statement_bytes())
    del bare["predicate"]["runDetails"]["byproducts"]
    problems = _statement_problems(json.dumps(bare).encode(), sbom_bytes())
    assert [m.problem for m in problems] == ["the signed provenance names no SBOM"]


def test_keys_that_cannot_sign_are_bad_input(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(BadInputError, match="not an Ed25519 or ECDSA P-256 key: it is an RSA key") as info:
        Signer.from_file(write_key(tmp_path / "rsa.pem", rsa_key))
    assert info.value.exit_code == 2 and "openssl genpkey -algorithm ed25519" in str(info.value.hint)
    assert "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256" in str(info.value.hint)
    with pytest.raises(BadInputError, match="cannot read"):
        Signer.from_file(tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a key\n")
    with pytest.raises(BadInputError, match="not an unencrypted PEM private key"):
        Signer.from_file(tmp_path / "junk.pem")
    with pytest.raises(BadInputError, match="not a PEM public or private key"):
        load_public_key(tmp_path / "junk.pem")


def test_documents_keep_their_bytes_media_types_and_labels() -> None:
    sbom, statement = Document(SBOM, b"a"), Document(PROVENANCE, b"b")
    docs = ProofDocuments(sbom, statement)
    assert docs.labels() == {
        "io.imagegen.sbom.digest": "sha256:" + hashlib.sha256(b"a").hexdigest(),
        "io.imagegen.provenance.digest": "sha256:" + hashlib.sha256(b"b").hexdigest(),
    }
    assert sbom.to_json()["media_type"] == "application/vnd.cyclonedx+json"
    assert statement.image_path == "/opt/imagegen/proof/provenance.intoto.json"


# --------------------------------------------------------------------------- the probe's readers


def test_dpkg_status_and_os_release_are_read(tmp_path: Path) -> None:
    (tmp_path / "status").write_text(
        "Package: zlib1g\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1:1.2.13\n"
        "Description: compression\n library\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
        "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9\n"
        "Source: glibc\n\n"
        "Package: libgcc-s1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.2.0-14\n"
        "Source: gcc-12 (12.2.0-14+deb12u1)\n"
    )
    amd64 = {"architecture": "amd64"}
    # No copyright files here (test_licenses reads them): no licenses, whatever the host has.
    assert probe.deb_packages(tmp_path / "status", tmp_path / "doc") == [
        {"name": "libc6", "version": "2.36-9", **amd64, "source": "glibc", "source_version": ""},
        {"name": "libgcc-s1", "version": "12.2.0-14", **amd64, "source": "gcc-12",
         "source_version": "12.2.0-14+deb12u1"},
        {"name": "zlib1g", "version": "1:1.2.13", **amd64, "source": "", "source_version": ""},
    ]  # fmt: skip
    (tmp_path / "os-release").write_text('ID=debian\nVERSION_ID="12"\nNAME="Debian"\n')
    assert probe.os_release(tmp_path / "os-release") == {"id": "debian", "version_id": "12"}


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (apt-get install g++)")
def test_isa_paths_and_compilers_come_from_the_module(tmp_path: Path) -> None:
    # A module with a scalar and an AVX2 path (namespaced as our kernels are, and a GCC clone):
    # the symbol table names them; nm, an independent reader, agrees they are there.
    source = tmp_path / "m.cpp"
    source.write_text(
        "namespace kernel_scalar { float step(float x) { return x + 1; } }\n"
        'namespace kernel_avx2 { __attribute__((target("avx2"))) float step(float x) { return x * 2; } }\n'
        "float use(float x) { return kernel_scalar::step(x) + kernel_avx2::step(x); }\n"
    )
    module = tmp_path / "m.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(source), "-o", str(module)], check=True)
    names = subprocess.run(["nm", "-C", str(module)], capture_output=True, text=True, check=True).stdout
    assert "kernel_avx2::step" in names and "kernel_scalar::step" in names
    isa, compilers = probe.elf_facts(str(module))
    assert isa == ["scalar", "avx2"]
    assert compilers and compilers[0].startswith("GCC: ")
    # Hidden and stripped of its symbol table, no path can be told: none is claimed.
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-fvisibility=hidden", str(source), "-o", str(module)], check=True
    )
    subprocess.run(["strip", "--strip-all", str(module)], check=True)
    assert probe.elf_facts(str(module))[0] == []


def test_mangled_names_are_split_into_their_identifiers() -> None:
    parts = probe._name_parts(
        "_ZN12_GLOBAL__N_111kernel_avx210step_rangeILN8cpu_simd5DtypeE0EEEvRKNS_8AdamArgsEll"
    )
    assert {"kernel", "avx2", "step", "range", "cpu", "simd"} <= parts
    assert "avx512" not in parts
    assert "avx2" in probe._name_parts("_Z3fooi.avx2")  # a GCC target clone


def test_op_source_digest_covers_sources_and_include_folders() -> None:
    files = {
        "kernels/optim/csrc/cpu_adam.cpp": "a" * 64,
        "kernels/optim/includes/simd.h": "b" * 64,
        "kernels/optim/csrc/cpu_lion.cpp": "c" * 64,
    }
    flags = FACTS["manifest"]["ops"]["cpu_adam"]["flags"]
    lines = f"{'a' * 64}  kernels/optim/csrc/cpu_adam.cpp\n{'b' * 64}  kernels/optim/includes/simd.h\n"
    assert op_source_digest(flags, files) == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
    changed = {**files, "kernels/optim/includes/simd.h": "d" * 64}
    assert op_source_digest(flags, changed) != op_source_digest(flags, files)
    assert op_source_digest(
        flags, {**files, "kernels/optim/csrc/cpu_lion.cpp": "e" * 64}
    ) == op_source_digest(flags, files)
    assert op_source_digest({"sources": ["/elsewhere/x.cpp"]}, files) is None


# --------------------------------------------------------------------------- the commands' bad input


def test_bad_keys_and_documents_are_refused_before_the_engine(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from imagegen.cli import app

    runner = CliRunner()
    rsa_key = write_key(tmp_path / "rsa.pem", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    missing = str(tmp_path / "missing.pem")
    env = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing answers there: these must not need it
    cases = [
        (["verify", "some/image:1", "--key", missing], "cannot read the key"),
        (["verify", "some/image:1", "--key", str(rsa_key)], KINDS),
        (["build", "--cpu", "--ops", "cpu_adam", "--sign-key", str(rsa_key)], KINDS),
        (["sbom", "some/image:1", "--provenance", "--signature"], "different documents"),
        (["sbom", "Not An Image"], "IMAGE"),
    ]
    for args, message in cases:
        result = runner.invoke(app, [*args, "--json"], env=env)
        assert result.exit_code == 2, (args, result.output)
        assert message in json.loads(result.stdout)["error"]["message"], args
