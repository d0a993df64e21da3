"""An image's CycloneDX 1.6 SBOM, made from the probe's facts with cyclonedx-python-lib (pure).

Components: the base images (name, digest), the runtime's OS (an ``operating-system`` component:
``/etc/os-release``'s ID and VERSION_ID, on which its ``pkg:deb`` packages depend, so that
scanners such as Trivy and Grype know which distribution's packages they are), the venv's Python
packages (``pkg:pypi``: torch and the ``nvidia-*`` wheels among them), and each op's
compiled module as a ``file`` component whose SHA-256 is the file's as it is in the image and
whose ``imagegen:*`` properties say what it was built for and what it holds (``OP_PROPERTIES``).
``imagegen verify`` reads those back (``imagegen.proof.compare``).

Each package carries the licenses its own files declare (``imagegen.proof.licenses``: a Python
distribution's METADATA, a Debian package's machine-readable copyright file), acknowledged as
``declared``: what the package says, not what anyone concluded. Trivy's license scanner (``trivy
sbom --scanners license``) lists them per package.
"""

from __future__ import annotations

import datetime
import re
import uuid
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.proof.facts import ImageFacts, OpModule, Package
from imagegen.proof.licenses import declared_licenses

# The properties of an op module component (CycloneDX property names, namespaced imagegen:).
OP = "imagegen:op"
PATH = "imagegen:path"
SASS, PTX, GFX, ISA = "imagegen:sass", "imagegen:ptx", "imagegen:gfx", "imagegen:isa"
OP_PROPERTIES = (
    OP, "imagegen:module", PATH, "imagegen:target", "imagegen:toolkit", "imagegen:torch",
    "imagegen:torch.cxx11-abi", "imagegen:archs", SASS, PTX, GFX, ISA, "imagegen:ds-build",
    "imagegen:compilers", "imagegen:flags.cxx", "imagegen:flags.device", "imagegen:device-compiler",
    "imagegen:sources.digest",
)  # fmt: skip
# Trivy's package id (https://github.com/CycloneDX/cyclonedx-property-taxonomy, aquasecurity).
TRIVY_PKG_ID = "aquasecurity:trivy:PkgID"
# Debian's advisories name source packages (openssl, not libssl3): Trivy reads them from its own
# properties, Grype from the purl's ``upstream`` qualifier.
TRIVY_SRC_NAME = "aquasecurity:trivy:SrcName"
TRIVY_SRC_VERSION = "aquasecurity:trivy:SrcVersion"


@dataclass(frozen=True)
class BaseImage:
    role: str  # "devel" or "runtime"
    name: str
    digest: str | None  # "sha256:..." (the local image id), None when the engine does not have it


@dataclass(frozen=True)
class SbomInput:
    """What the SBOM is made of besides the image's own facts."""

    image: str  # the tag
    facts: ImageFacts
    bases: tuple[BaseImage, ...]
    ds_build: tuple[str, ...]  # DS_BUILD_OPS=0, DS_BUILD_<OP>=1, ...: the build's op selection
    source_digests: Mapping[str, str]  # op -> "sha256:..." of its sources and headers
    timestamp: datetime.datetime
    tool_version: str


def _csv(names: Sequence[str]) -> str:
    return ",".join(names)


def _words(value: Any) -> str:
    return " ".join(str(v) for v in value) if isinstance(value, list) else ""


def op_properties(
    op: OpModule, facts: ImageFacts, ds_build: Sequence[str], sources: str | None
) -> dict[str, str]:
    """The ``imagegen:*`` properties of ``op``'s module component, in ``OP_PROPERTIES`` order."""
    entry = facts.manifest_op(op.name)
    raw_flags = entry.get("flags")
    flags: Mapping[str, Any] = raw_flags if isinstance(raw_flags, Mapping) else {}
    accelerator = str(facts.manifest.get("accelerator") or "")
    gpu = op.target != "cpu"
    cuda, hip = facts.manifest.get("cuda"), facts.manifest.get("hip")
    toolkit = (f"cuda {cuda}" if cuda else f"rocm {hip}" if hip else "") if gpu else ""
    archs = entry.get("archs")
    values: dict[str, str | None] = {
        OP: op.name,
        "imagegen:module": op.module,
        PATH: op.path or "",
        "imagegen:target": accelerator if gpu else "cpu",
        "imagegen:toolkit": toolkit,
        "imagegen:torch": str(facts.torch.get("version") or facts.manifest.get("torch") or ""),
        "imagegen:torch.cxx11-abi": _abi(facts.torch.get("cxx11_abi")),
        "imagegen:archs": ";".join(str(a) for a in archs) if isinstance(archs, list) else "",
        SASS: _csv(op.sass) if gpu else None,
        PTX: _csv(op.ptx) if gpu else None,
        GFX: _csv(op.gfx) if gpu else None,
        ISA: None if gpu else _csv(op.isa),
        "imagegen:ds-build": " ".join(ds_build),
        "imagegen:compilers": " | ".join(op.compilers),
        "imagegen:flags.cxx": _words(flags.get("cxx")),
        "imagegen:flags.device": _words(flags.get("device")),
        "imagegen:device-compiler": str(flags.get("device_compiler") or ""),
        "imagegen:sources.digest": sources or "",
    }
    return {name: value for name, value in values.items() if value is not None}


def _abi(value: Any) -> str:
    return "" if value is None else ("cxx11" if value else "pre-cxx11")


def _bom_ref(kind: str, *parts: str) -> str:
    return kind + ":" + ":".join(re.sub(r"[^A-Za-z0-9._+~/@-]", "_", p) for p in parts)


def _source_properties(pkg: Package) -> list[Any]:
    """Trivy's properties naming a deb's source package (none where it is its own)."""
    from cyclonedx.model import Property  # deferred, as in make_sbom

    if not pkg.source:
        return []
    return [
        Property(name=TRIVY_SRC_NAME, value=pkg.source),
        Property(name=TRIVY_SRC_VERSION, value=pkg.source_version or pkg.version),
    ]


def _licenses(pkg: Package) -> list[Any]:
    """The package's declared licenses as the library's models: one expression, or ids and names
    (CycloneDX allows no mixing)."""
    from cyclonedx.model.license import DisjunctiveLicense, LicenseAcknowledgement, LicenseExpression

    declared = LicenseAcknowledgement.DECLARED
    return [
        LicenseExpression(choice.value, acknowledgement=declared)
        if choice.kind == "expression"
        else DisjunctiveLicense(id=choice.value, acknowledgement=declared)
        if choice.kind == "id"
        else DisjunctiveLicense(name=choice.value, acknowledgement=declared)
        for choice in declared_licenses(pkg.license)
    ]


def make_sbom(data: SbomInput) -> bytes:
    """The CycloneDX 1.6 JSON document, as bytes (the ones the image and its label's digest hold)."""
    # Deferred: only `imagegen build` and `imagegen sbom` need the library (the cli extra).
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    facts = data.facts
    root = Component(name=data.image, type=ComponentType.CONTAINER, bom_ref="image")
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"imagegen:{data.image}:{data.timestamp.isoformat()}")
    )
    bom.metadata.component = root
    bom.metadata.timestamp = data.timestamp
    bom.metadata.tools.components.add(
        Component(name="imagegen", version=data.tool_version, type=ComponentType.APPLICATION)
    )
    components: list[Any] = []
    for base in data.bases:
        hashes = (
            [HashType(alg=HashAlgorithm.SHA_256, content=base.digest.split(":", 1)[1])] if base.digest else []
        )
        components.append(
            Component(
                name=base.name,
                version=base.digest,
                type=ComponentType.CONTAINER,
                bom_ref=_bom_ref("base", base.role),
                hashes=hashes,
                properties=[Property(name="imagegen:base", value=base.role)],
            )
        )
    distro = facts.os.get("id") or "debian"
    version_id = facts.os.get("version_id") or ""
    qualifiers = {"distro": f"{distro}-{version_id}"} if version_id else {}
    # The OS as a component of its own, the deb packages its dependencies: Trivy and Grype take
    # the distribution (family = name, release = version) from it, and without one they drop every
    # pkg:deb package ("no OS is detected"): the way Trivy writes an image's SBOM itself.
    system = Component(
        name=distro,
        version=version_id or None,
        type=ComponentType.OPERATING_SYSTEM,
        bom_ref=_bom_ref("os", distro, version_id),
        description=facts.os.get("pretty_name") or None,
    )
    # Trivy ids a package name@version and keeps one package per id: a multiarch pair
    # (libc6:amd64 and libc6:i386, one version) would be counted once. Its own property for the
    # id (a registered CycloneDX namespace) keeps both, spelled as dpkg spells them.
    versions = Counter((pkg.name, pkg.version) for pkg in facts.deb_packages)
    debs: list[Any] = []
    for pkg in facts.deb_packages:
        arch = {"arch": pkg.architecture} if pkg.architecture else {}
        multiarch = versions[pkg.name, pkg.version] > 1
        debs.append(
            Component(
                name=pkg.name,
                version=pkg.version,
                type=ComponentType.LIBRARY,
                bom_ref=_bom_ref("deb", pkg.name, pkg.architecture),
                properties=[
                    *(
                        [Property(name=TRIVY_PKG_ID, value=f"{pkg.name}:{pkg.architecture}@{pkg.version}")]
                        if multiarch
                        else []
                    ),
                    *_source_properties(pkg),
                ],
                licenses=_licenses(pkg),
                purl=PackageURL(
                    type="deb",
                    namespace=distro,
                    name=pkg.name,
                    version=pkg.version,
                    qualifiers={**arch, **qualifiers, **({"upstream": pkg.source} if pkg.source else {})},
                ),
            )
        )
    if debs or facts.os.get("id"):
        components += [system, *debs]
    for pkg in facts.python_packages:
        normalized = re.sub(r"[-_.]+", "-", pkg.name).lower()  # PEP 503, as purl's pypi type says
        components.append(
            Component(
                name=pkg.name,
                version=pkg.version,
                type=ComponentType.LIBRARY,
                bom_ref=_bom_ref("pypi", normalized),
                licenses=_licenses(pkg),
                purl=PackageURL(type="pypi", name=normalized, version=pkg.version),
            )
        )
    for op in facts.ops:
        props = op_properties(op, facts, data.ds_build, data.source_digests.get(op.name))
        components.append(
            Component(
                name=op.path or op.module,
                type=ComponentType.FILE,
                bom_ref=_bom_ref("op", op.name),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=op.sha256)] if op.sha256 else [],
                properties=[Property(name=k, value=v) for k, v in props.items()],
            )
        )
    for component in components:
        bom.components.add(component)
    bom.register_dependency(root, [c for c in components if c not in debs])
    if debs:
        bom.register_dependency(system, debs)
    with warnings.catch_warnings():
        # The library warns about components without a version (the op modules are files).
        warnings.simplefilter("ignore", UserWarning)
        text = JsonV1Dot6(bom).output_as_string(indent=2)
    return (text + "\n").encode()
