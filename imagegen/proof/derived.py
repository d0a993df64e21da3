"""What an image adds on top of its signed runtime, judged against the signed statement (pure).

An image verified with a key is the signed runtime's layers, the proof layer, and whatever layers
and settings a derived image (``FROM`` the signed one) added. What those added can do is judged by
where each entry lands and which settings changed:

- **fails, naming the path or setting**: anything that runs before or instead of a signed file.
  An entry that replaces or deletes a signed name in a site folder or the venv's ``bin`` (an op
  module, a Python front, ``torch/__init__.py``, a package folder standing in for a module); any
  change inside the standard library's folders or to the interpreter's files; a ``.pth`` file,
  ``sitecustomize`` / ``usercustomize`` or ``__pycache__`` in a site folder; a new module or
  package named like a signed one in a site folder or the working folder (it shadows it);
  ``/etc/ld.so.preload``; a folder above any of these replaced or deleted; a changed variable of
  the loader's (``PYTHON*``, ``LD_*``, ``VIRTUAL_ENV``, ``DS_DISABLE_JIT``), a ``python`` put ahead
  of the signed one on ``PATH``, or another entrypoint;
- **listed**: everything else a later layer adds or deletes (a user's app in its folder, a new
  distribution beside the signed ones) and every other changed setting; the signed part still
  verifies.

An entry whose folder is a symbolic link is judged at the path the link leads to as well.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.engine.layers import Layer, LayerEntry
from imagegen.proof.documents import PROOF_DIR
from imagegen.proof.runtime import LD_PRELOAD_FILE, SignedRuntime, config_fields, within

# Environment variables that decide what the interpreter or the dynamic loader loads first.
LOADER_PREFIXES = ("PYTHON", "LD_")
LOADER_VARIABLES = frozenset({"VIRTUAL_ENV", "DS_DISABLE_JIT"})
_MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")
_STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize", "__pycache__"})


@dataclass(frozen=True)
class Finding:
    """A problem found in an added layer or setting; ``op`` names the op whose module it is."""

    problem: str
    op: str | None = None


@dataclass(frozen=True)
class Judgement:
    problems: tuple[Finding, ...]
    added: tuple[str, ...]  # paths added or deleted by later layers, that cannot run before a signed file
    settings: tuple[str, ...]  # settings changed since the signing, that decide nothing loaded first

    def to_json(self) -> dict[str, Any]:
        return {"added": list(self.added), "settings": list(self.settings)}


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

    def judge(self, path: str, entry: LayerEntry) -> Finding | None:
        op_module = self.modules.get(path)
        if op_module is not None:
            op, sha = op_module
            found = f"sha256 {entry.sha256}" if entry.sha256 else f"a {entry.kind}"
            return Finding(f"module {path} is not the one that was signed: {found}, "
                           f"the signed provenance says {sha}", op)  # fmt: skip
        changes = "deletes" if entry.kind in ("whiteout", "opaque") else "replaces"
        if path == LD_PRELOAD_FILE:
            return Finding(f"{path}: the dynamic loader preloads what it names into every process")
        if path in self.layout.files:
            return Finding(f"{path}: {changes} the signed interpreter's file")
        if entry.kind != "dir" and any(within(root, path) and root != path for root in self.roots):
            return Finding(f"{path}: {changes} a folder the signed Python is in")
        for folder in self.layout.site_dirs:
            if within(path, folder):
                return self._in_folder(path, entry, folder, site=True)
        if within(path, self.layout.bin_dir):
            return self._in_folder(path, entry, self.layout.bin_dir, site=False)
        for folder in self.layout.sealed_dirs:
            # The base interpreter's own site folder is not on this interpreter's path (a venv's).
            foreign = any(within(path, f"{folder}/{name}") for name in ("site-packages", "dist-packages"))
            if within(path, folder) and entry.kind != "dir" and not foreign:
                return Finding(f"{path}: {changes} a file of the standard library's folder {folder}")
        if posixpath.dirname(path) == self.working_dir and entry.kind != "whiteout":
            name = module_name(posixpath.basename(path))
            if name in self.signed_modules:
                return Finding(
                    f"{path}: shadows the signed module {name} for what runs in {self.working_dir}"
                )
        return None

    def _in_folder(self, path: str, entry: LayerEntry, folder: str, site: bool) -> Finding | None:
        if entry.kind == "dir":
            return None  # a folder's own entry, its mode and owner: what it holds is judged entry by entry
        if path == folder:
            return Finding(f"{path}: replaces a folder the signed Python is in")
        top = path[len(folder) + 1 :].split("/", 1)[0]
        if top in self.signed.names.get(folder, ()):
            return Finding(f"{path}: changes {folder}/{top}, which was signed")
        if not site:
            return None
        name = module_name(top)
        if top.endswith(".pth"):
            return Finding(f"{path}: a .pth file, whose import lines run at every start of Python")
        if name in _STARTUP_MODULES:
            return Finding(f"{path}: {name} runs at every start of Python")
        if name in self.signed_modules:
            return Finding(f"{path}: shadows the signed module {name}")
        return None


def _changed_settings(signed: SignedRuntime, config: Mapping[str, Any], added: Sequence[Layer]) -> tuple[
    list[Finding], list[str]
]:  # fmt: skip
    now = config_fields(config)
    problems, settings = [], []
    before = dict(item.partition("=")[::2] for item in signed.env)
    after = dict(item.partition("=")[::2] for item in now["env"])
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        text = f"{name}={new}" if new is not None else f"{name} unset"
        if name.startswith(LOADER_PREFIXES) or name in LOADER_VARIABLES:
            problems.append(
                Finding(f"environment {text} (signed: {old!r}): it decides what Python loads first")
            )
        elif name == "PATH":
            problems += _path_problems(signed, new or "", added)
            settings.append(f"environment {text}")
        else:
            settings.append(f"environment {text}")
    if now["entrypoint"] != signed.entrypoint:
        problems.append(
            Finding(f"entrypoint {now['entrypoint']} (signed: {signed.entrypoint}): it runs before Python")
        )
    signed_settings: dict[str, object] = {
        "cmd": signed.cmd,
        "working_dir": signed.working_dir,
        "user": signed.user,
    }
    for key, old_value in signed_settings.items():
        if now[key] != old_value:
            settings.append(f"{key} {now[key]!r} (signed: {old_value!r})")
    return problems, settings


def _path_problems(signed: SignedRuntime, path: str, added: Sequence[Layer]) -> list[Finding]:
    """A ``python`` a later layer put in a folder ``PATH`` now searches before the signed one's."""
    folders = [posixpath.normpath(p) for p in path.split(":") if p]
    bin_dir = signed.python.bin_dir
    if bin_dir not in folders:
        return [Finding(f"environment PATH={path}: it no longer leads to the signed Python in {bin_dir}")]
    ahead = folders[: folders.index(bin_dir)]
    return [
        Finding(f"{entry.path}: a python that PATH finds before the signed one")
        for layer in added
        for entry in layer.entries
        if posixpath.dirname(entry.path) in ahead and posixpath.basename(entry.path).startswith("python")
    ]


def judge(
    signed: SignedRuntime,
    added: Sequence[Layer],
    config: Mapping[str, Any],
    modules: Mapping[str, tuple[str, str]],
    links: Links,
) -> Judgement:
    """Judge the layers an image adds on top of ``signed.layers`` (``added``, bottom first) and its
    configuration (``config``: the engine's ``Config``). ``modules``: op module path -> (op, signed
    sha256); ``links``: where a symbolic link of the image leads (see ``resolve``)."""
    problems, settings = _changed_settings(signed, config, added)
    rules = _Rules(signed, str(config.get("WorkingDir") or signed.working_dir), modules)
    listed: dict[str, None] = {}
    for layer in added:
        for entry in layer.entries:
            if within(entry.path, PROOF_DIR) or (entry.kind == "dir" and within(PROOF_DIR, entry.path)):
                continue  # the proof's own files: checked against their labels and the signature
            found = rules.judge(entry.path, entry)
            resolved = resolve(entry.path, links)
            if found is None and resolved != entry.path and (found := rules.judge(resolved, entry)):
                found = Finding(f"{entry.path}, through a symbolic link: {found.problem}", found.op)
            if found is not None:
                problems.append(found)
            elif entry.kind != "dir":
                listed[entry.path + (" (deleted)" if entry.kind in ("whiteout", "opaque") else "")] = None
    return Judgement(tuple(_unique(problems)), tuple(listed), tuple(settings))


def _unique(findings: Iterable[Finding]) -> list[Finding]:
    return list(dict.fromkeys(findings))
