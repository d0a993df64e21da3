"""What a derived image adds on top of a signed one, listed against the signed statement (pure).

A signature covers the image it signs (``imagegen.proof.exact``); an image built ``FROM`` it is
another image, which the signer never saw. ``imagegen verify --key --derived`` proves what can be
proven of it and no more: the signed layers are its first layers, in order, and the op modules
they hold are still the ones the image runs. Everything its later layers add, replace or delete,
and every setting it changed, is listed as **not covered by the signature**.

Some additions are flagged with why they may run before a signed file (a ``.pth`` file, a
``sitecustomize``, a shadowing module, a loader variable, a shared library, OpenSSL's
configuration, ...). The flags are a warning list, never a verdict: what can run before Python's
``main`` has no end (torch's entry points, the base's own ``sitecustomize`` hooks, the
interpreter's link chain, ``ld.so.conf.d``, ``BASH_ENV``, a ``HEALTHCHECK`` writing at run time,
a folder made writable), so an addition without a flag is not called harmless. The deriver signs
the derived image.

Fails (the image is not built on the signed one as signed): an entry that replaces or deletes an
op module the statement signs, or a folder above one, and a change to the proof's own folder.

An entry whose folder is a symbolic link is judged at the path the link leads to as well.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.engine.layers import Layer, LayerEntry
from imagegen.proof.documents import PROOF_DIR
from imagegen.proof.runtime import LD_PRELOAD_FILE, SignedRuntime, changed_settings, within

# Environment variables that decide what the interpreter, the dynamic loader, a shell or OpenSSL
# loads first, or where the op loader looks.
LOADER_PREFIXES = ("PYTHON", "LD_", "DS_", "OPENSSL_")
LOADER_VARIABLES = frozenset({"VIRTUAL_ENV", "BASH_ENV", "ENV", "TORCH_EXTENSIONS_DIR", "SSL_CERT_FILE"})
_MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")
_STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize", "__pycache__"})
# Paths outside the Python folders whose files can run before a signed one: (pattern, why).
_RISKY_PATHS = (
    ("/etc/ld.so.conf", "where the dynamic loader looks for libraries"),
    ("/etc/ld.so.conf.d/*", "where the dynamic loader looks for libraries"),
    ("/etc/ld.so.cache", "where the dynamic loader looks for libraries"),
    ("/lib/*", "a system library or program the signed ones may load or run"),
    ("/lib64/*", "a system library or program the signed ones may load or run"),
    ("/usr/lib/*", "a system library or program the signed ones may load or run"),
    ("/usr/local/lib/*", "a library the signed programs may load"),
    ("/etc/ssl/*", "OpenSSL's configuration, which can load an engine into every process using TLS"),
    ("/usr/lib/ssl/*", "OpenSSL's configuration, which can load an engine into every process using TLS"),
    ("/etc/python3*", "the interpreter's configuration (Debian's sitecustomize lives here)"),
    ("/usr/bin/python*", "an interpreter on the signed interpreter's link chain or PATH"),
    ("/usr/local/bin/python*", "an interpreter on PATH"),
    ("/bin/*", "a program the signed image's commands may run"),
    ("/usr/bin/*", "a program the signed image's commands may run"),
    ("/etc/profile*", "a shell's start-up file"),
    ("/etc/bash.bashrc", "a shell's start-up file"),
    ("/etc/environment", "the environment a login gets"),
)


@dataclass(frozen=True)
class Finding:
    """A derived image found not to be built on the signed one as signed; ``op`` names the op
    whose module it replaced."""

    problem: str
    op: str | None = None


@dataclass(frozen=True)
class Addition:
    """A path a later layer added, replaced or deleted, or a setting changed: not covered by the
    signature. ``risk``: why it may run before a signed file, where a rule knows (a warning; no
    flag does not mean harmless)."""

    what: str
    risk: str | None = None

    def to_json(self, key: str) -> dict[str, Any]:
        return {key: self.what, "covered": False, "risk": self.risk}


@dataclass(frozen=True)
class Judgement:
    """The image against the signed statement: ``problems`` fail it; ``derived`` says whether it
    was read as derived (its additions listed), else it was held to be exactly the signed image."""

    problems: tuple[Finding, ...]
    signed_layers: int = 0
    derived: bool = False
    layers: tuple[str, ...] = ()  # layers above the signed image's proof layer
    added: tuple[Addition, ...] = ()
    settings: tuple[Addition, ...] = ()
    hint: str | None = None  # what to do about the problems, where they say more than "rebuild"

    @property
    def risky(self) -> tuple[Addition, ...]:
        return tuple(a for a in (*self.added, *self.settings) if a.risk)

    def to_json(self) -> dict[str, Any] | None:
        if not self.derived:
            return None
        return {
            "covered": False,
            "signed_layers": self.signed_layers,
            "layers": list(self.layers),
            "added": [a.to_json("path") for a in self.added],
            "settings": [a.to_json("setting") for a in self.settings],
        }


def module_name(name: str) -> str | None:
    """The module an entry named ``name`` provides (``torch``, ``six.py``, ``x.cpython-311-....so``)."""
    if name.endswith((".dist-info", ".egg-info", ".pth", ".data")):
        return None
    if "." not in name:
        return name
    stem, _, _ = name.partition(".")
    return stem if name.endswith(_MODULE_SUFFIXES) else None


Links = Callable[[str], "str | None"]


def resolve(path: str, links: Links, hops: int = 40) -> str:
    """``path`` with each folder that is a symbolic link (``links``: path -> its target, None
    where it is no link) followed."""
    parts = path.strip("/").split("/")
    done = ""
    for index, part in enumerate(parts[:-1]):
        done = f"{done}/{part}"
        target = links(done)
        if target is not None and hops > 0:
            base = target if target.startswith("/") else posixpath.join(posixpath.dirname(done), target)
            rest = "/".join(parts[index + 1 :])
            return resolve(posixpath.normpath(posixpath.join(base, rest)), links, hops - 1)
    return path


class _Rules:
    def __init__(
        self, signed: SignedRuntime, working_dir: str, modules: Mapping[str, tuple[str, str]]
    ) -> None:
        layout = signed.python
        self.signed, self.layout, self.modules = signed, layout, modules
        self.working_dir = working_dir
        self.signed_modules = {
            name for names in signed.names.values() for entry in names if (name := module_name(entry))
        }
        self.roots = (*layout.sys_path, layout.bin_dir, *layout.files, LD_PRELOAD_FILE)

    def failure(self, path: str, entry: LayerEntry) -> Finding | None:
        """An entry that replaces or deletes a signed op module, or the proof's folder."""
        for module, (op, sha) in self.modules.items():
            if path == module:
                found = f"sha256 {entry.sha256}" if entry.sha256 else f"a {entry.kind}"
                return Finding(f"module {path} is not the one that was signed: {found}, "
                               f"the signed provenance says {sha}", op)  # fmt: skip
            if entry.kind != "dir" and within(module, path):
                return Finding(
                    f"{path}: {self._changes(entry)} a folder of {op}'s signed module {module}", op
                )
        if within(path, PROOF_DIR) or (entry.kind != "dir" and within(PROOF_DIR, path)):
            return Finding(f"{path}: changes the image's signed proof ({PROOF_DIR})")
        return None

    @staticmethod
    def _changes(entry: LayerEntry) -> str:
        return "deletes" if entry.kind in ("whiteout", "opaque") else "replaces"

    def risk(self, path: str, entry: LayerEntry) -> str | None:
        """Why the entry may run before a signed file, where a rule knows."""
        changes = self._changes(entry)
        if path == LD_PRELOAD_FILE:
            return "the dynamic loader preloads what it names into every process"
        if path in self.layout.files:
            return f"{changes} the signed interpreter's file"
        if entry.kind != "dir" and any(within(root, path) and root != path for root in self.roots):
            return f"{changes} a folder the signed Python is in"
        for folder in self.layout.site_dirs:
            if within(path, folder):
                return self._in_folder(path, entry, folder, site=True)
        if within(path, self.layout.bin_dir):
            return self._in_folder(path, entry, self.layout.bin_dir, site=False)
        for folder in self.layout.sealed_dirs:
            # The base interpreter's own site folder is not on this interpreter's path (a venv's).
            foreign = any(within(path, f"{folder}/{name}") for name in ("site-packages", "dist-packages"))
            if within(path, folder) and entry.kind != "dir" and not foreign:
                return f"{changes} a file of the standard library's folder {folder}"
        if posixpath.dirname(path) == self.working_dir and entry.kind != "whiteout":
            name = module_name(posixpath.basename(path))
            if name in self.signed_modules:
                return f"shadows the signed module {name} for what runs in {self.working_dir}"
        return next((why for pattern, why in _RISKY_PATHS if fnmatch.fnmatchcase(path, pattern)), None)

    def _in_folder(self, path: str, entry: LayerEntry, folder: str, site: bool) -> str | None:
        if path == folder:
            return "replaces a folder the signed Python is in"
        top = path[len(folder) + 1 :].split("/", 1)[0]
        if top in self.signed.names.get(folder, ()):
            return f"changes {folder}/{top}, which was signed"
        if not site:
            return "a program beside the signed interpreter, on PATH"
        name = module_name(top)
        if top.endswith(".pth"):
            return "a .pth file, whose import lines run at every start of Python"
        if name in _STARTUP_MODULES:
            return f"{name} runs at every start of Python"
        if name in self.signed_modules:
            return f"shadows the signed module {name}"
        if top.endswith(".dist-info") and path.endswith("/entry_points.txt"):
            return "a distribution's entry points, which torch loads at every import (torch.backends)"
        return None


def _folder_risk(entry: LayerEntry) -> str | None:
    """A folder entry adds no file; one that others may write to lets files change at run time."""
    if entry.writable_by_others and not entry.mode & 0o1000:
        return f"a folder with mode {entry.mode:04o}: users other than its owner may replace what it holds"
    if entry.uid or entry.gid:
        return f"a folder owned by {entry.uid}:{entry.gid}: that user may replace what it holds at run time"
    return None


def setting_changes(
    signed: SignedRuntime, now: Mapping[str, Any], added: Sequence[Layer] = ()
) -> list[Addition]:
    """Each signed setting that ``now`` (``runtime.image_settings``) changed, the environment by
    variable, flagged where a rule knows a risk (``added``: the layers a python on PATH may be in)."""
    found: list[Addition] = []
    for key, old, new in changed_settings(signed.settings, now):
        if key == "Env":
            found += _environment(signed, new or [], added)
            continue
        risk = {
            "Entrypoint": "it runs before Python",
            "Healthcheck": "it runs a command in every container of the image, while it runs",
        }.get(key)
        found.append(Addition(f"{key} {new!r} (signed: {old!r})", risk))
    return found


def _environment(signed: SignedRuntime, env: Sequence[str], added: Sequence[Layer]) -> list[Addition]:
    before = dict(item.partition("=")[::2] for item in signed.env)
    after = dict(str(item).partition("=")[::2] for item in env)
    found = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        text = f"environment {name}={new}" if new is not None else f"environment {name} unset"
        text += f" (signed: {'unset' if old is None else repr(old)})"
        risk = None
        if name.startswith(LOADER_PREFIXES) or name in LOADER_VARIABLES:
            risk = "it decides what Python, a shell or the dynamic loader loads first"
        elif name == "PATH":
            risk = _path_risk(signed, new or "", added)
        found.append(Addition(text, risk))
    return found


def _path_risk(signed: SignedRuntime, path: str, added: Sequence[Layer]) -> str | None:
    """A ``PATH`` that no longer leads to the signed Python, or a ``python`` ahead of it."""
    folders = [posixpath.normpath(p) for p in path.split(":") if p]
    bin_dir = signed.python.bin_dir
    if bin_dir not in folders:
        return f"it no longer leads to the signed Python in {bin_dir}"
    ahead = folders[: folders.index(bin_dir)]
    pythons = [
        entry.path
        for layer in added
        for entry in layer.entries
        if posixpath.dirname(entry.path) in ahead and posixpath.basename(entry.path).startswith("python")
    ]
    if pythons:
        return f"{', '.join(pythons)}: a python that PATH finds before the signed one"
    return f"folders searched before the signed Python's: {', '.join(ahead)}" if ahead else None


def judge(
    signed: SignedRuntime,
    added: Sequence[Layer],
    settings: Mapping[str, Any],
    modules: Mapping[str, tuple[str, str]],
    links: Links,
) -> Judgement:
    """List what ``added`` (the layers above the signed image's proof layer, bottom first) and the
    image's ``settings`` (``runtime.image_settings``) add to the signed image. ``modules``: op
    module path -> (op, signed sha256); ``links``: where a symbolic link of the image leads."""
    # The folder scripts run from, as the engine reaches it: "/app/", "/app/." and a link to /app
    # are /app; none set is the root.
    working_dir = posixpath.normpath("/" + str(settings.get("WorkingDir") or "/").lstrip("/"))
    rules = _Rules(signed, posixpath.dirname(resolve(posixpath.join(working_dir, "-"), links)), modules)
    problems: list[Finding] = []
    listed: dict[str, Addition] = {}
    for layer in added:
        for entry in layer.entries:
            resolved = resolve(entry.path, links)
            paths = (entry.path,) if resolved == entry.path else (entry.path, resolved)
            failure = next((f for p in paths if (f := rules.failure(p, entry))), None)
            if failure is not None:
                if entry.path not in failure.problem:
                    failure = Finding(f"{entry.path}, through a symbolic link: {failure.problem}", failure.op)
                problems.append(failure)
                continue
            if entry.kind == "dir":
                risk = _folder_risk(entry)
                if risk is None:
                    continue  # a folder's own entry, root's and closed: what it holds is listed
            else:
                risk = rules.risk(entry.path, entry)
                if risk is None and resolved != entry.path and (linked := rules.risk(resolved, entry)):
                    risk = f"through a symbolic link to {resolved}: {linked}"
            what = entry.path + (" (deleted)" if entry.kind in ("whiteout", "opaque") else "")
            if what not in listed or risk:
                listed[what] = Addition(what, risk)
    return Judgement(
        problems=tuple(_unique(problems)),
        signed_layers=len(signed.layers),
        derived=True,
        layers=tuple(layer.diff_id for layer in added),
        added=tuple(listed.values()),
        settings=tuple(setting_changes(signed, settings, added)),
    )


def _unique(findings: Iterable[Finding]) -> list[Finding]:
    return list(dict.fromkeys(findings))
