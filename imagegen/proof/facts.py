"""What the probe (``imagegen.proof.probe``) found inside an image, read back on the host.

Read leniently (an image may be damaged or old) but typed: each op's module, hash, device code
and CPU code paths, the OS and Python packages (with what each declares of its license, absent
from facts an older probe wrote), the manifest and torch. ``from_json`` raises
ValueError for a document that is not the probe's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1


def _names(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key)
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return None if value is None else str(value)


@dataclass(frozen=True)
class OpModule:
    """One op's compiled module as it is in the image."""

    name: str
    module: str
    target: str  # "cpu" or "gpu", as the manifest records it
    path: str | None  # None: not found on the image's sys.path
    sha256: str | None
    size: int | None
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    other: tuple[str, ...] = ()
    isa: tuple[str, ...] = ()
    compilers: tuple[str, ...] = ()
    error: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> OpModule:
        size = raw.get("size")
        return cls(
            name=str(raw.get("name") or ""),
            module=str(raw.get("module") or ""),
            target=str(raw.get("target") or ""),
            path=_text(raw, "path"),
            sha256=_text(raw, "sha256"),
            size=size if isinstance(size, int) else None,
            sass=_names(raw, "sass"),
            ptx=_names(raw, "ptx"),
            gfx=_names(raw, "gfx"),
            other=_names(raw, "other"),
            isa=_names(raw, "isa"),
            compilers=_names(raw, "compilers"),
            error=_text(raw, "error"),
        )


@dataclass(frozen=True)
class DeclaredLicense:
    """What a package's own files say of its license, as the probe read them (the SBOM maps it:
    ``imagegen.proof.licenses``). Empty when they say nothing, or the facts predate licenses."""

    expression: str = ""  # PEP 639 License-Expression (an SPDX expression)
    text: str = ""  # the METADATA License field, its head when `cut`
    cut: bool = False  # the License field went on past `text` (a whole license pasted in)
    classifiers: tuple[str, ...] = ()  # the "License :: ..." trove classifiers
    names: tuple[str, ...] = ()  # a deb's DEP-5 copyright License short names, Files: * first

    @classmethod
    def from_json(cls, raw: object) -> DeclaredLicense:
        if not isinstance(raw, Mapping):
            return cls()
        return cls(
            expression=str(raw.get("expression") or ""),
            text=str(raw.get("text") or ""),
            cut=raw.get("cut") is True,
            classifiers=_names(raw, "classifiers"),
            names=_names(raw, "names"),
        )


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str = ""
    source: str = ""  # a deb's source package, where dpkg names one other than itself
    source_version: str = ""  # its version, where it differs from the package's
    license: DeclaredLicense = DeclaredLicense()


@dataclass(frozen=True)
class ImageFacts:
    python: str
    machine: str
    os: Mapping[str, str]
    deb_packages: tuple[Package, ...]
    python_packages: tuple[Package, ...]
    manifest: Mapping[str, Any]  # the installed-ops manifest as the build wrote it ({} if none)
    manifest_path: str
    ops: tuple[OpModule, ...]
    torch: Mapping[str, Any] = field(default_factory=dict)  # empty unless probed with --torch
    layout: Mapping[str, Any] = field(default_factory=dict)  # where the interpreter imports from

    def op(self, name: str) -> OpModule | None:
        return next((op for op in self.ops if op.name == name), None)

    def manifest_op(self, name: str) -> Mapping[str, Any]:
        ops = self.manifest.get("ops")
        entry = ops.get(name) if isinstance(ops, Mapping) else None
        return entry if isinstance(entry, Mapping) else {}

    @classmethod
    def from_json(cls, raw: object) -> ImageFacts:
        if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
            raise ValueError("not the probe's facts document (format 1)")

        def packages(key: str) -> tuple[Package, ...]:
            value = raw.get(key)
            items: list[Any] = value if isinstance(value, list) else []
            return tuple(
                Package(
                    str(p.get("name")),
                    str(p.get("version") or ""),
                    str(p.get("architecture") or ""),
                    str(p.get("source") or ""),
                    str(p.get("source_version") or ""),
                    DeclaredLicense.from_json(p.get("license")),
                )
                for p in items
                if isinstance(p, Mapping) and p.get("name")
            )

        manifest = raw.get("manifest")
        torch = raw.get("torch")
        layout = raw.get("layout")
        os_release = raw.get("os")
        return cls(
            python=str(raw.get("python") or ""),
            machine=str(raw.get("machine") or ""),
            os={str(k): str(v) for k, v in os_release.items()} if isinstance(os_release, Mapping) else {},
            deb_packages=packages("deb_packages"),
            python_packages=packages("python_packages"),
            manifest=manifest if isinstance(manifest, Mapping) else {},
            manifest_path=str(raw.get("manifest_path") or ""),
            ops=tuple(
                OpModule.from_json(op)
                for op in raw.get("ops") or []
                if isinstance(op, Mapping) and op.get("name")
            ),
            torch=torch if isinstance(torch, Mapping) else {},
            layout=layout if isinstance(layout, Mapping) else {},
        )
