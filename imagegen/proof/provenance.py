"""The provenance statement of an image: an in-toto Statement v1 with a SLSA provenance v1
predicate, naming what was built from what (pure; ``imagegen.proof.seal`` gathers the inputs).

- subjects: the runtime image the build made (its image id; the proof layer goes on top of it,
  so the final image's id cannot be inside itself), each op's compiled module (its path in
  the image and sha256), and the Python the runtime holds (each distribution and each
  standard-library folder by a digest of its files, the interpreter's files: ``runtime.subjects``);
- ``buildDefinition``: the spec (``externalParameters``), the engine and Dockerfile variant and
  the runtime section (``internalParameters``: the runtime's layer digests, its settings and where
  its Python imports from, see ``imagegen.proof.runtime``), and as resolved dependencies the
  rendered Dockerfile's digest, the
  project's revision, the base images' digests, the op packages' digests and each op's sources;
- ``runDetails``: the builder (imagegen's version, the engine's), start and end of the build,
  and the SBOM as a byproduct (its digest and media type).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.proof.documents import SBOM, Document, sha256_digest
from imagegen.proof.facts import ImageFacts
from imagegen.proof.runtime import KEY as RUNTIME_KEY
from imagegen.proof.sbom import OP, BaseImage

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# What an imagegen build's parameters mean: docs/imagegen.md, "SBOM and provenance".
BUILD_TYPE = "urn:imagegen:build-type:image:v1"
BUILDER_ID = "urn:imagegen:builder"


@dataclass(frozen=True)
class Revision:
    """The project checkout the image was built from: its commit, and whether the build's inputs
    differed from it (uncommitted changes); commit None when it is not a git checkout."""

    commit: str | None
    dirty: bool


@dataclass(frozen=True)
class ProvenanceInput:
    image: str
    runtime_image_id: str  # "sha256:..." of the runtime stage, before the proof layer
    facts: ImageFacts
    spec: Mapping[str, Any]  # the ImageSpec's parameters, as JSON
    dockerfile: str
    revision: Revision
    bases: tuple[BaseImage, ...]
    op_packages: Sequence[tuple[str, str]]  # (name, "sha256:...")
    source_digests: Mapping[str, str]
    engine: str  # "buildkit"
    engine_version: str
    tool_version: str
    started: datetime.datetime
    finished: datetime.datetime
    invocation_id: str
    runtime: Mapping[str, Any] | None = None  # the runtime section (``SignedRuntime.to_json``)
    python_subjects: Sequence[Mapping[str, Any]] = ()


def _digest(value: str) -> dict[str, str]:
    algorithm, _, hex_digest = value.partition(":")
    return {algorithm: hex_digest}


def _time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def statement(data: ProvenanceInput, sbom: Document) -> dict[str, Any]:
    subjects: list[dict[str, Any]] = [
        {
            "name": data.image,
            "digest": _digest(data.runtime_image_id),
            "annotations": {"imagegen:stage": "runtime"},
        }
    ]
    subjects += [
        {"name": op.path, "digest": {"sha256": op.sha256}, "annotations": {OP: op.name}}
        for op in data.facts.ops
        if op.path and op.sha256
    ]
    subjects += [dict(subject) for subject in data.python_subjects]
    dependencies: list[dict[str, Any]] = [
        {
            "name": "Dockerfile",
            "digest": _digest(sha256_digest(data.dockerfile.encode())),
            "mediaType": "text/x-dockerfile",
        },
    ]
    if data.revision.commit:
        dependencies.append(
            {
                "name": "project",
                "digest": {"gitCommit": data.revision.commit},
                "annotations": {"dirty": data.revision.dirty},
            }
        )
    for base in data.bases:
        entry: dict[str, Any] = {"name": base.name, "annotations": {"imagegen:base": base.role}}
        if base.digest:
            entry["digest"] = _digest(base.digest)
        dependencies.append(entry)
    dependencies += [
        {"name": f"op-package:{name}", "digest": _digest(digest)} for name, digest in data.op_packages
    ]
    dependencies += [
        {"name": f"op-sources:{op}", "digest": _digest(digest)}
        for op, digest in sorted(data.source_digests.items())
    ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"spec": dict(data.spec)},
                "internalParameters": {
                    "engine": data.engine,
                    **({RUNTIME_KEY: dict(data.runtime)} if data.runtime is not None else {}),
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {
                    "id": BUILDER_ID,
                    "version": {
                        "imagegen": data.tool_version,
                        "engine": f"{data.engine} {data.engine_version}",
                    },
                },
                "metadata": {
                    "invocationId": data.invocation_id,
                    "startedOn": _time(data.started),
                    "finishedOn": _time(data.finished),
                },
                "byproducts": [
                    {"name": SBOM.filename, "digest": _digest(sbom.digest), "mediaType": SBOM.media_type}
                ],
            },
        },
    }


def make_statement(data: ProvenanceInput, sbom: Document) -> bytes:
    return (json.dumps(statement(data, sbom), indent=2, sort_keys=True) + "\n").encode()
