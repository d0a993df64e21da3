"""What a signed statement says of the runtime image, beyond its op modules (pure).

Made at the seal from the runtime image's layers, read by imagegen itself
(``imagegen.engine.layers``), and from its configuration as the engine reports it:

- ``layers``: the runtime image's layer digests (diff_ids), in order. A verified image must start
  with exactly these, so every file they hold is the file that was signed;
- ``settings``: the image's configuration as the engine reports it, every field that decides what
  a container of it runs and how (``SIGNED_SETTINGS``, and the platform); a verified image must
  have exactly these;
- ``python``: where the interpreter imports from (the probe's layout): its own files, the
  ``sys.path`` folders (the standard library's, sealed as a whole; the site folders, where a later
  layer may add a distribution but change nothing signed), the venv's ``bin``, and the names each
  of these folders held, so a later layer's entry can be told new from changed.

Beside it the statement names each installed distribution (``pkg:pypi/NAME@VERSION``) with a
digest of its files (``files_digest``: sha256 over ``<sha256>  <path>`` lines, sorted by path) and
each standard-library folder the same way: what a third party can check file by file.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagegen.engine.layers import Layer, LayerEntry

# Format 2 signs the image's whole configuration but its labels; format 1 (imagegen before
# 2026-11-29) signed five settings, too few to say an image is the signed one, and is refused.
FORMAT = 2
# Where the section sits in the statement: predicate.buildDefinition.internalParameters[KEY].
KEY = "runtime"
DISTRIBUTION = "imagegen:distribution"
FOLDER = "imagegen:folder"
# The dynamic loader reads this file before any program runs: an image that adds one preloads it.
LD_PRELOAD_FILE = "/etc/ld.so.preload"
# The configuration fields a signature covers: each field of the OCI image configuration's
# ``config`` and Docker's additions to it (Healthcheck, OnBuild, Shell) that a container runtime or
# a later build reads, i.e. everything that decides what runs, as whom, where and with what. Not
# signed: ``Labels`` (the proof's own step adds them, and a label runs nothing), the fields the
# engine's inspect shows beside these that only a container sets (Hostname, Domainname, Attach*,
# Tty, OpenStdin, StdinOnce) and builder bookkeeping (``Image``, the parent's id). Empty values
# (null, "", [], {}, false) read as one, since engines and builders write emptiness differently.
SIGNED_SETTINGS = (
    "Entrypoint",
    "Cmd",
    "Env",
    "WorkingDir",
    "User",
    "Healthcheck",
    "Shell",
    "StopSignal",
    "Volumes",
    "ExposedPorts",
    "OnBuild",
    "ArgsEscaped",
)
PLATFORM = "Platform"


@dataclass(frozen=True)
class PythonLayout:
    """Where the image's interpreter is and imports from, as the probe reported it at the seal."""

    executable: str
    bin_dir: str
    sys_path: tuple[str, ...]
    site_dirs: tuple[str, ...]
    files: tuple[str, ...]  # the interpreter's own: executable, its target, pyvenv.cfg, libpython

    @classmethod
    def from_json(cls, raw: object) -> PythonLayout:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("executable"), str):
            raise ValueError("no interpreter layout")

        def paths(key: str) -> tuple[str, ...]:
            value = raw.get(key)
            items = value if isinstance(value, list) else []
            return tuple(posixpath.normpath(str(p)) for p in items if str(p).startswith("/"))

        return cls(
            executable=str(raw["executable"]),
            bin_dir=posixpath.normpath(str(raw.get("bin_dir") or posixpath.dirname(raw["executable"]))),
            sys_path=paths("sys_path"),
            site_dirs=paths("site_dirs"),
            files=paths("files"),
        )

    @property
    def sealed_dirs(self) -> tuple[str, ...]:
        """The ``sys.path`` folders that are not site folders: the standard library's."""
        return tuple(p for p in self.sys_path if p not in self.site_dirs)

    def covers(self, path: str) -> bool:
        """Whether ``path`` is one of the files the statement digests."""
        roots = (*self.sys_path, self.bin_dir)
        return path in self.files or any(within(path, root) for root in roots)


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def merge(layers: Iterable[Layer]) -> dict[str, LayerEntry]:
    """The file system the layers make, bottom first: later entries replace earlier ones, a
    whiteout deletes its path and everything below it, an opaque folder hides what was below."""
    view: dict[str, LayerEntry] = {}
    for layer in layers:
        opaque = [e.path for e in layer.entries if e.kind == "opaque"]
        deleted = [e.path for e in layer.entries if e.kind == "whiteout"]
        if opaque or deleted:
            view = {
                path: entry
                for path, entry in view.items()
                if not any(path != folder and within(path, folder) for folder in opaque)
                and not any(within(path, gone) for gone in deleted)
            }
        for entry in layer.entries:
            if entry.kind not in ("whiteout", "opaque"):
                view[entry.path] = entry
    return view


def _line(path: str, entry: LayerEntry, view: Mapping[str, LayerEntry]) -> str | None:
    if entry.kind == "symlink":
        return f"-> {entry.target}  {path}"
    if entry.kind == "hardlink":
        target = view.get(entry.target)
        return None if target is None or target.sha256 is None else f"{target.sha256}  {path}"
    return f"{entry.sha256}  {path}" if entry.kind == "file" and entry.sha256 else None


def files_digest(paths: Iterable[str], view: Mapping[str, LayerEntry]) -> tuple[str, int]:
    """sha256 over ``<sha256>  <path>`` lines of the files among ``paths`` (a symlink: ``-> <target>``)."""
    lines = sorted(
        line for path in set(paths) if path in view and (line := _line(path, view[path], view)) is not None
    )
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest(), len(lines)


@dataclass(frozen=True)
class SignedRuntime:
    """The statement's runtime section (see the module's doc)."""

    layers: tuple[str, ...]
    settings: Mapping[str, Any]  # ``image_settings`` of the runtime image
    python: PythonLayout
    names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # folder -> its entries' names

    @property
    def env(self) -> tuple[str, ...]:
        return _strings(self.settings.get("Env")) or ()

    @property
    def entrypoint(self) -> tuple[str, ...] | None:
        return _strings(self.settings.get("Entrypoint"))

    @property
    def working_dir(self) -> str:
        return str(self.settings.get("WorkingDir") or "")

    def to_json(self) -> dict[str, Any]:
        layout = self.python
        return {
            "format": FORMAT,
            "layers": list(self.layers),
            "settings": dict(self.settings),
            "python": {
                "executable": layout.executable,
                "bin_dir": layout.bin_dir,
                "sys_path": list(layout.sys_path),
                "site_dirs": list(layout.site_dirs),
                "files": list(layout.files),
                "names": {folder: list(names) for folder, names in sorted(self.names.items())},
            },
        }

    @classmethod
    def from_json(cls, raw: object) -> SignedRuntime:
        """ValueError for anything that is not this section (the statement was signed, so a
        malformed one was signed malformed: say so rather than guess)."""
        found = raw.get("format") if isinstance(raw, Mapping) else None
        if found == 1:
            raise ValueError(
                "its runtime section is format 1, made by an imagegen before 2026-11-29, which signed "
                "five of the image's settings, not its whole configuration: rebuild the image"
            )
        if not isinstance(raw, Mapping) or found != FORMAT:
            raise ValueError(f"its runtime section is not format {FORMAT}")
        settings, python = raw.get("settings"), raw.get("python")
        layers = raw.get("layers")
        if (
            not isinstance(settings, Mapping)
            or not isinstance(python, Mapping)
            or not isinstance(layers, list)
        ):
            raise ValueError("its runtime section lacks layers, settings or python")
        names = python.get("names")
        return cls(
            layers=tuple(str(layer) for layer in layers),
            settings={key: settings.get(key) for key in (*SIGNED_SETTINGS, PLATFORM)},
            python=PythonLayout.from_json(python),
            names={
                str(folder): _strings(items) or ()
                for folder, items in (names.items() if isinstance(names, Mapping) else ())
            },
        )


def signed_runtime(statement: Mapping[str, Any]) -> SignedRuntime | None:
    """The runtime section of a statement; None for one signed before statements carried it.
    ValueError for a section that is there but malformed."""
    predicate = statement.get("predicate")
    definition = predicate.get("buildDefinition") if isinstance(predicate, Mapping) else None
    internal = definition.get("internalParameters") if isinstance(definition, Mapping) else None
    raw = internal.get(KEY) if isinstance(internal, Mapping) else None
    return None if raw is None else SignedRuntime.from_json(raw)


def _strings(value: object) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, list) else None


def _setting(value: Any) -> Any:
    return None if value in (None, "", [], {}, False) else value


def image_settings(info: Mapping[str, Any]) -> dict[str, Any]:
    """The signed settings of an image, from the engine's inspect of it (``Config`` and platform)."""
    config = info.get("Config") or {}
    found = {key: _setting(config.get(key)) for key in SIGNED_SETTINGS}
    parts = (info.get("Os"), info.get("Architecture"), info.get("Variant"))
    found[PLATFORM] = "/".join(str(p) for p in parts if p) or None
    return found


def changed_settings(signed: Mapping[str, Any], now: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """Each signed setting whose value ``now`` differs: (name, signed value, value now)."""
    return [
        (key, signed.get(key), now.get(key))
        for key in (*SIGNED_SETTINGS, PLATFORM)
        if _setting(signed.get(key)) != _setting(now.get(key))
    ]


def folder_names(view: Mapping[str, LayerEntry], folders: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each folder's entry names in the merged view (a name whose folder entry a layer left out,
    as a hand-made layer may, still counts: its files are below it)."""
    found: dict[str, set[str]] = {folder: set() for folder in folders}
    for path in view:
        for folder, names in found.items():
            if path.startswith(folder.rstrip("/") + "/"):
                names.add(path[len(folder.rstrip("/")) + 1 :].split("/", 1)[0])
    return {folder: tuple(sorted(names)) for folder, names in found.items()}


def make_runtime(
    layout: PythonLayout, layer_ids: Sequence[str], info: Mapping[str, Any], view: Mapping[str, LayerEntry]
) -> SignedRuntime:
    """The runtime section of the image the engine describes as ``info`` (its inspect)."""
    folders = tuple(dict.fromkeys((*layout.sys_path, layout.bin_dir)))
    return SignedRuntime(
        layers=tuple(layer_ids),
        settings=image_settings(info),
        python=layout,
        names=folder_names(view, folders),
    )


# --------------------------------------------------------------------------- distributions


def _record_paths(site: str, info_dir: str, record: bytes) -> list[str]:
    """The files a distribution's RECORD names, as absolute paths (``../../bin/x`` resolved)."""
    paths = [f"{site}/{info_dir}/RECORD"]
    for line in record.decode("utf-8", "replace").splitlines():
        name = line.rsplit(",", 2)[0].strip().strip('"') if line.count(",") >= 2 else line.strip()
        if name:
            paths.append(posixpath.normpath(posixpath.join(site, name)))
    return paths


def _dist_name(info_dir: str) -> tuple[str, str]:
    stem = info_dir.removesuffix(".dist-info")
    name, _, version = stem.partition("-")
    return name, version


def subjects(layout: PythonLayout, view: Mapping[str, LayerEntry]) -> list[dict[str, Any]]:
    """The statement's subjects for the Python the runtime holds: each distribution by its files,
    each site folder's files no distribution names, each standard-library folder, each
    interpreter file. Digests are over the files as the layers hold them (never as a RECORD says)."""
    found: list[dict[str, Any]] = []
    for site in layout.site_dirs:
        owned: set[str] = set()
        for base in folder_names(view, [site])[site]:
            if not base.endswith(".dist-info"):
                continue
            path = f"{site}/{base}"
            record = view.get(f"{path}/RECORD")
            files = (
                _record_paths(site, base, record.data or b"") if record is not None else [f"{path}/METADATA"]
            )
            owned.update(files)
            digest, count = files_digest(files, view)
            name, version = _dist_name(base)
            found.append(
                {
                    "name": f"pkg:pypi/{name.lower().replace('_', '-')}@{version}",
                    "digest": {"sha256": digest},
                    "annotations": {DISTRIBUTION: name, FOLDER: site, "imagegen:files": count},
                }
            )
        rest = [p for p in view if within(p, site) and p not in owned]
        digest, count = files_digest(rest, view)
        found.append(
            {
                "name": f"{site} (files of no distribution)",
                "digest": {"sha256": digest},
                "annotations": {FOLDER: site, "imagegen:files": count},
            }
        )
    for folder in layout.sealed_dirs:
        inside = [p for p in view if within(p, folder) and not any(within(p, s) for s in layout.site_dirs)]
        digest, count = files_digest(inside, view)
        found.append(
            {
                "name": folder,
                "digest": {"sha256": digest},
                "annotations": {FOLDER: folder, "imagegen:files": count},
            }
        )
    for path in layout.files:
        digest, count = files_digest([path], view)
        if count:
            found.append(
                {"name": path, "digest": {"sha256": digest}, "annotations": {"imagegen:python": "file"}}
            )
    return found
