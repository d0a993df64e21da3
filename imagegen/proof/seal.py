"""After the build: gather the image's facts, make its SBOM and provenance, and seal them into it.

The facts come from the built image itself (``imagegen.proof.image_proof.probe_image``: a sealed
container running the image's Python on ``imagegen.proof.probe``); the documents are made here,
on the host, with the libraries (``sbom``, ``provenance``, ``signing``); then one more build
step, ``FROM <the image> AS proof`` + ``COPY`` of the documents to ``PROOF_DIR`` + ``LABEL``s
with their digests, gives the final image under the same tag. That step has no ``RUN``, so it
is the same for BuildKit and the classic builder, and needs no Python or shell in the image.
Copies of the documents are written on the host too (``proof_dir``).
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imagegen
from imagegen import settings
from imagegen.engine import Engine, build_image
from imagegen.engine.images import find_image
from imagegen.errors import VerificationFailedError
from imagegen.files import make_dirs, write_atomic
from imagegen.imagespec.spec import ImageSpec
from imagegen.proof import documents as docs
from imagegen.proof.facts import ImageFacts
from imagegen.proof.image_proof import probe_image
from imagegen.proof.outside import RuntimeRecord, runtime_record
from imagegen.proof.provenance import ProvenanceInput, Revision, make_statement
from imagegen.proof.runtime import PythonLayout
from imagegen.proof.sbom import BaseImage, SbomInput, make_sbom
from imagegen.proof.signing import Signer
from imagegen.proof.source_digests import context_digests, op_source_digest
from imagegen.render.dockerfile import build_environment

__all__ = ["ProofReport", "Signer", "context_digests", "now", "seal_image"]

# The stage name of the step that adds the documents.
PROOF_STAGE = "proof"


@dataclass(frozen=True)
class ProofReport:
    """The documents sealed into the image, where their host copies are, and the final image id.

    ``runtime_image_id``: the image the build made, before the proof layer (the same for two
    builds of the same inputs, where ``image_id`` differs by the documents' times)."""

    documents: docs.ProofDocuments
    directory: Path
    image_id: str
    runtime_image_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "image_path": docs.PROOF_DIR,
            "runtime_image_id": self.runtime_image_id,
            "keyid": self.documents.keyid,
            "documents": {
                doc.type.kind: {**doc.to_json(), "path": str(self.directory / doc.type.filename)}
                for doc in self.documents.all()
            },
        }


def proof_dir(tag: str, env: Mapping[str, str] = os.environ) -> Path:
    """Where the host copies of ``tag``'s documents go (beside its build report)."""
    cache = env.get(settings.XDG_CACHE_HOME.name) or str(Path.home() / ".cache")
    return Path(cache) / "imagegen" / "proof" / re.sub(r"[^A-Za-z0-9._-]+", "_", tag)


def spec_parameters(spec: ImageSpec) -> dict[str, Any]:
    """The spec's parameters as the provenance names them (what a user chose or the catalog filled)."""
    return {
        "target": spec.target,
        "platform": spec.platform,
        "ops": list(spec.ops),
        "archs": list(spec.archs),
        "op_archs": {op: list(archs) for op, archs in spec.op_archs},
        "python": spec.python,
        "torch": spec.torch_release,
        "distro": spec.distro,
        "base_devel": spec.base_devel,
        "base_runtime": spec.base_runtime,
        "torch_index": spec.torch_index,
        "wheelhouse": spec.wheelhouse is not None,
        "offline": spec.offline,
        "ca_cert": spec.ca_cert is not None,
        "keep_ca_cert": spec.keep_ca_cert,
        "buildkit": spec.buildkit,
        "bytecode": spec.bytecode,
        "numpy": spec.numpy,
        "op_packages": [p.reference for p in spec.op_packages],
        "tag": spec.tag,
    }


# The files the image's build reads from the checkout (what staging copies).
_BUILD_INPUTS = ("setup.py", "pyproject.toml", "README.md", "op_builder", "kernels")


def project_revision(root: Path) -> Revision:
    """The checkout's commit, and whether the build's inputs had uncommitted changes."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return Revision(None, False)
    status = git("status", "--porcelain", "--", *_BUILD_INPUTS)
    return Revision(commit.strip(), bool(status and status.strip()))


def base_images(spec: ImageSpec) -> tuple[BaseImage, ...]:
    """The bases with their digests: the registry digest where the engine has one, else the image id."""
    found = []
    for role, name in (("devel", spec.base_devel), ("runtime", spec.base_runtime)):
        info = find_image(name, timeout=60)
        if info is None:  # removed since the build: named, with no digest
            found.append(BaseImage(role, name, None))
            continue
        repo_digests = [d for d in info.get("RepoDigests") or [] if "@" in d]
        found.append(BaseImage(role, name, repo_digests[0].split("@", 1)[1] if repo_digests else info["Id"]))
    return tuple(found)


def now() -> datetime.datetime:
    """A build's start or end, as the provenance records it (UTC, whole seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def make_documents(
    spec: ImageSpec,
    *,
    facts: ImageFacts,
    runtime_image_id: str,
    dockerfile: str,
    revision: Revision,
    bases: tuple[BaseImage, ...],
    context_digests: Mapping[str, str],
    engine: Engine,
    started: datetime.datetime,
    finished: datetime.datetime,
    signer: Signer | None,
    runtime: RuntimeRecord | None = None,
) -> docs.ProofDocuments:
    """The SBOM, the statement and (with ``signer``) its envelope, as bytes (pure). ``runtime``:
    what the seal read of the runtime image from outside it (its layers, settings, Python)."""
    sources = {}
    for op in facts.ops:
        flags = facts.manifest_op(op.name).get("flags")
        digest = op_source_digest(flags, context_digests) if isinstance(flags, Mapping) else None
        if digest:
            sources[op.name] = digest
    sbom = docs.Document(
        docs.SBOM,
        make_sbom(
            SbomInput(
                image=spec.tag,
                facts=facts,
                bases=bases,
                ds_build=tuple(v.replace('"', "") for v in build_environment(spec)),
                source_digests=sources,
                timestamp=finished,
                tool_version=imagegen.__version__,
            )
        ),
    )
    statement = make_statement(
        ProvenanceInput(
            image=spec.tag,
            runtime_image_id=runtime_image_id,
            facts=facts,
            spec=spec_parameters(spec),
            dockerfile=dockerfile,
            revision=revision,
            bases=bases,
            op_packages=[(p.name, p.digest) for p in spec.op_packages],
            source_digests=sources,
            engine=engine.kind,
            engine_version=engine.server_version,
            tool_version=imagegen.__version__,
            started=started,
            finished=finished,
            invocation_id=str(uuid.uuid4()),
            runtime=None if runtime is None else runtime.runtime.to_json(),
            python_subjects=() if runtime is None else runtime.subjects,
        ),
        sbom,
    )
    provenance = docs.Document(docs.PROVENANCE, statement)
    if signer is None:
        return docs.ProofDocuments(sbom, provenance)
    signature = docs.Document(docs.SIGNATURE, signer.envelope(statement))
    return docs.ProofDocuments(sbom, provenance, signature, signer.keyid)


def read_runtime(image: str, facts: ImageFacts) -> RuntimeRecord:
    """The runtime image as the statement signs it, read from its layers; the modules the image's
    Python reported must be the ones its layers hold (else the probe was answered by something
    that lies, and nothing it said may be sealed)."""
    try:
        layout = PythonLayout.from_json(facts.layout)
    except ValueError as exc:
        raise VerificationFailedError(
            f"{image}: the probe reported {exc}", hint="the image's Python could not be probed; rebuild it"
        ) from None
    paths = tuple(op.path for op in facts.ops if op.path)
    record = runtime_record(image, layout, paths)
    for op in facts.ops:
        if op.path and record.module_digests.get(op.path) != op.sha256:
            raise VerificationFailedError(
                f"{image}: {op.name}'s module {op.path} is {record.module_digests.get(op.path)} in the "
                f"image's layers, but its Python reported {op.sha256}",
                hint="something in the image answers for its Python; rebuild it from a trusted base",
            )
    return record


def proof_dockerfile(image: str, documents: docs.ProofDocuments) -> str:
    files = " ".join(doc.type.filename for doc in documents.all())
    labels = " \\\n      ".join(f'{key}="{value}"' for key, value in documents.labels().items())
    return (
        "# The image's SBOM and provenance (imagegen.proof): files and their digests, nothing run.\n"
        f"FROM {image} AS {PROOF_STAGE}\n"
        f"COPY {files} {docs.PROOF_DIR}/\n"
        f"LABEL {labels}\n"
    )


def seal_image(
    engine: Engine,
    spec: ImageSpec,
    *,
    runtime_image_id: str,
    dockerfile: str,
    root: Path,
    context_digests: Mapping[str, str],
    started: datetime.datetime,
    finished: datetime.datetime,
    signer: Signer | None = None,
    directory: Path | None = None,
) -> ProofReport:
    """Probe ``spec.tag`` (just built), make its documents, write them to ``directory`` (default
    ``proof_dir``) and into the image, whose tag then names the sealed image."""
    facts = probe_image(spec.tag, with_torch=True)
    runtime = read_runtime(runtime_image_id or spec.tag, facts)
    documents = make_documents(
        spec,
        facts=facts,
        runtime_image_id=runtime_image_id,
        dockerfile=dockerfile,
        revision=project_revision(root),
        bases=base_images(spec),
        context_digests=context_digests,
        engine=engine,
        started=started,
        finished=finished,
        signer=signer,
        runtime=runtime,
    )
    out = directory or proof_dir(spec.tag)
    make_dirs(out)
    for doc in documents.all():
        write_atomic(out / doc.type.filename, doc.data.decode())
    with tempfile.TemporaryDirectory(prefix="imagegen-proof-") as tmp:
        for doc in documents.all():
            path = Path(tmp) / doc.type.filename
            path.write_bytes(doc.data)
            path.chmod(0o644)  # read by the image's non-root user
        result = build_image(
            engine, Path(tmp), proof_dockerfile(spec.tag, documents), spec.tag,
            target=PROOF_STAGE, platform=spec.platform,
        )  # fmt: skip
    return ProofReport(documents, out, result.image_id, runtime_image_id)
