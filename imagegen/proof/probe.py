"""The facts an SBOM is made of, read inside the image by the image's own Python.

imagegen passes this module's text to ``python -c`` in a sealed container (no network, read-only;
``imagegen.proof.collect``), so it imports only the standard library and op_builder's stable
modules (``binary``, ``manifest``), which every image built by imagegen carries. It prints one
JSON document (``FORMAT``):

- ``os``: ``/etc/os-release``'s ID, VERSION_ID and PRETTY_NAME; ``machine``: ``uname -m``;
- ``deb_packages``: every installed package of dpkg's status file (name, version, architecture),
  with the ``License`` short names of its machine-readable copyright file (``license.names``);
- ``python_packages``: every distribution on the venv's ``sys.path`` (name, version), with what its
  METADATA declares of its license (``license``: ``expression``, ``text``, ``cut``, ``classifiers``);
- ``manifest``: the installed-ops manifest as written by the build, and its path;
- ``ops``: per op of the manifest, its compiled module's path, sha256 and size, the device code
  in it (``op_builder.binary.read_device_code``: SASS, PTX, gfx), the CPU instruction-set paths
  its symbol names show (``isa``), and the compilers its ``.comment`` section names;
- ``torch`` (with ``--torch``): version, CUDA / HIP, C++11 ABI, read by importing torch;
- ``layout``: where the interpreter is and where it imports from (its executable, ``sys.path``,
  its site folders, its shared library): which folders the signed statement covers. The files
  themselves are read from the image's layers on the host, not here.

Nothing here decides anything: the host compares and writes the documents.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import json
import platform
import re
import struct
import sys
from pathlib import Path
from typing import Any

FORMAT = 1
DPKG_STATUS = Path("/var/lib/dpkg/status")
DOC_ROOT = Path("/usr/share/doc")  # <package>/copyright: dpkg's slim path-excludes keep it
# The one machine-readable copyright format (DEP-5); files in any other shape are prose.
DEP5_FORMAT = re.compile(r"https?://www\.debian\.org/doc/packaging-manuals/copyright-format/1\.0/?")
# Characters of a METADATA License field the facts keep: a name fits, a pasted license does not.
LICENSE_HEAD = 200
OS_RELEASE = Path("/etc/os-release")
# Each architecture's CPU code paths, as op_builder's self-test names them (selftest --isa).
ISA_BY_MACHINE = {62: ("scalar", "avx2", "avx512"), 183: ("scalar", "neon", "sve")}  # e_machine
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
# An Itanium-mangled source name: its length, then that many identifier characters.
_LENGTH = re.compile(r"[1-9][0-9]{0,3}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def os_release(path: Path = OS_RELEASE) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key in ("ID", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME"):
            found[key.lower()] = value.strip().strip('"')
    return found


def deb_packages(path: Path = DPKG_STATUS, doc: Path = DOC_ROOT) -> list[dict[str, Any]]:
    """Installed packages from dpkg's status file (paragraphs of ``Field: value``), each with the
    license names of ``doc``/<package>/copyright where that file is DEP-5."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    packages = []
    for paragraph in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            # "Source: openssl" or "Source: glibc (2.36-9)": the source package advisories name.
            source, _, rest = fields.get("Source", "").partition(" ")
            package: dict[str, Any] = {
                "name": fields["Package"],
                "version": fields.get("Version", ""),
                "architecture": fields.get("Architecture", ""),
                "source": source,
                "source_version": rest.strip().strip("()") if source else "",
            }
            # One doc folder per package name, whatever the architecture (a multiarch pair shares
            # it); a folder may be a link to another package's (libgcc-s1 -> gcc-12-base).
            names = dep5_license_names(_read(doc / fields["Package"] / "copyright"))
            if names:
                package["license"] = {"names": names}
            packages.append(package)
    return sorted(packages, key=lambda p: (p["name"], p["architecture"]))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):  # missing, unreadable, a folder, a name the OS refuses
        return ""


def dep5_license_names(text: str) -> list[str]:
    """The ``License`` short names of a machine-readable copyright file (DEP-5), the ``Files: *``
    stanza's first, each once; [] for any other text: a prose copyright file names no license
    that could be read without guessing."""
    paragraphs: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                paragraphs.append(fields)
            fields, key = {}, ""
        elif line.startswith("#"):
            continue
        elif line[0] in " \t":
            if key:  # a continuation: a file list, or the license's text after its name
                fields[key] += "\n" + line.strip()
        else:
            name, sep, value = line.partition(":")
            key = name.strip().lower() if sep else ""
            if key in fields:  # a field given twice: the first one counts
                key = ""
            elif key:
                fields[key] = value.strip()
    if fields:
        paragraphs.append(fields)
    if not paragraphs or not DEP5_FORMAT.fullmatch(paragraphs[0].get("format", "").split("\n")[0]):
        return []
    names: dict[str, None] = {}
    # A stable sort: the stanza for every file (Files: *) first, the others as the file has them.
    for paragraph in sorted(paragraphs, key=lambda p: "*" not in p.get("files", "").split()):
        # The field's first line is the short name (or an expression of them); the text follows.
        name = " ".join(paragraph.get("license", "").split("\n")[0].split())
        if name and len(name) <= LICENSE_HEAD:
            names[name] = None
    return list(names)


def python_packages() -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for dist in importlib.metadata.distributions():
        metadata = dist.metadata
        name = metadata["Name"]
        if name and name not in found:  # the first on sys.path is the one imported
            found[name] = {"name": name, "version": str(dist.version)}
            declared = python_license(metadata)
            if declared:
                found[name]["license"] = declared
    return [found[n] for n in sorted(found, key=str.lower)]


def python_license(metadata: Any) -> dict[str, Any]:
    """What a distribution's METADATA declares of its license, unmapped (the host maps it):
    PEP 639's ``License-Expression``; the ``License`` field, its first ``LICENSE_HEAD`` characters
    (``cut`` when it went on: a whole license pasted in); the ``License ::`` classifiers."""

    def first(field: str) -> str:
        values = metadata.get_all(field) or []
        return str(values[0]).strip() if values else ""

    declared: dict[str, Any] = {}
    expression = " ".join(first("License-Expression").split())
    if expression:
        declared["expression"] = expression
    text = first("License")
    if text:
        declared["text"] = text[:LICENSE_HEAD]
        if len(text) > LICENSE_HEAD:
            declared["cut"] = True
    classifiers = [
        " ".join(str(c).split())
        for c in metadata.get_all("Classifier") or []
        if str(c).startswith("License ::")
    ]
    if classifiers:
        declared["classifiers"] = classifiers
    return declared


def module_file(module: str) -> str | None:
    """Where ``module`` (an extension module) is on sys.path, found without importing its package."""
    *parents, leaf = module.split(".")
    for entry in sys.path:
        folder = Path(entry or ".", *parents)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = folder / (leaf + suffix)
            if candidate.is_file():
                return str(candidate.resolve())
    return None


def sha256_file(path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def elf_facts(path: str) -> tuple[list[str], list[str]]:
    """(instruction-set paths, compilers) of an ELF module: the ISA names that are a whole part
    of a function's name (``kernel_avx512::step``, GCC's ``f.avx2`` clones) and the ``.comment``
    lines (``GCC: (Debian 12.2.0-14) 12.2.0``). Empty when the file has neither (stripped)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return [], []
    header = _EHDR.unpack_from(data, 0)
    machine, shoff, shnum, shstrndx = header[2], header[6], header[12], header[13]
    if not shoff or shoff + shnum * _SHDR.size > len(data):
        return [], []
    table = [_SHDR.unpack_from(data, shoff + i * _SHDR.size) for i in range(shnum)]

    def body(index: int) -> bytes:
        offset, size = table[index][4], table[index][5]
        return data[offset : offset + size]

    names = body(shstrndx) if 0 < shstrndx < shnum else b""
    comments: list[str] = []
    words: set[str] = set()
    for section in table:
        name = names[section[0] : names.find(b"\0", section[0])].decode("ascii", "replace")
        if name == ".comment":
            text = data[section[4] : section[4] + section[5]].decode("utf-8", "replace")
            comments += [c.strip() for c in text.split("\0") if c.strip()]
        elif section[1] in (_SHT_SYMTAB, _SHT_DYNSYM) and 0 < section[6] < shnum:
            for symbol in body(section[6]).split(b"\0"):
                words.update(_name_parts(symbol.decode("ascii", "replace")))
    isa = [level for level in ISA_BY_MACHINE.get(machine, ()) if level in words]
    return isa, list(dict.fromkeys(comments))


def _name_parts(symbol: str) -> set[str]:
    """The ``_``-separated parts of each identifier a (mangled) symbol name is made of."""
    identifiers = []
    base, _, clone = symbol.partition(".")
    identifiers += [clone] if clone else []
    if base.startswith("_Z"):
        at, fresh = 0, False
        while at < len(base):
            match = _LENGTH.match(base, at)
            # A length starts after a non-digit, or right after the identifier before it.
            if match and (fresh or not base[at - 1].isdigit()):
                length, start = int(match.group()), match.end()
                word = base[start : start + length]
                if len(word) == length and _IDENTIFIER.fullmatch(word):
                    identifiers.append(word)
                    at, fresh = start + length, True
                    continue
            at, fresh = at + 1, False
    else:
        identifiers.append(base)
    return {part for ident in identifiers for part in ident.split("_") if part}


def op_facts(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    from op_builder.binary import read_device_code

    module = str(entry.get("module") or "")
    facts: dict[str, Any] = {"name": name, "module": module, "target": entry.get("target"), "error": None}
    path = module_file(module)
    if path is None:
        facts.update(path=None, error=f"module {module} not found on sys.path")
        return facts
    sha256, size = sha256_file(path)
    facts.update(path=path, sha256=sha256, size=size)
    try:
        code = read_device_code(path)
        facts.update(sass=list(code.sass), ptx=list(code.ptx), gfx=list(code.gfx), other=list(code.other))
        facts["unreadable"] = list(code.unreadable)
    except Exception as exc:  # a damaged module: its facts say so, the host decides
        facts["error"] = f"device code unreadable: {getattr(exc, 'message', exc)}"
    facts["isa"], facts["compilers"] = elf_facts(path)
    return facts


def torch_facts() -> dict[str, Any]:
    try:
        import torch  # the image's own; only with --torch (it takes a second or two)

        return {
            "version": str(torch.__version__),
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
        }
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def python_layout() -> dict[str, Any]:
    import os
    import site
    import sysconfig

    libdir, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    shared = os.path.join(libdir, library) if libdir and library and ".so" in library else None
    venv_config = os.path.join(sys.prefix, "pyvenv.cfg")
    return {
        "executable": sys.executable,
        "real_executable": os.path.realpath(sys.executable),
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "bin_dir": os.path.dirname(sys.executable),
        "sys_path": [p for p in sys.path if os.path.isabs(p)],
        "site_dirs": [p for p in site.getsitepackages() if p in sys.path],
        "files": [
            p
            for p in dict.fromkeys(
                [
                    sys.executable,
                    os.path.realpath(sys.executable),
                    venv_config,
                    *([shared, os.path.realpath(shared)] if shared else []),
                ]
            )
            if os.path.exists(p)
        ],
    }


def collect(with_torch: bool) -> dict[str, Any]:
    from op_builder.manifest import manifest_path

    path = manifest_path()
    error: str | None = None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        manifest, error = None, f"cannot read {path}: {exc}"
    else:
        error = None if isinstance(manifest, dict) else f"{path} is not a JSON object"
    raw_ops = manifest.get("ops") if isinstance(manifest, dict) else None
    ops = [op_facts(n, e) for n, e in sorted(raw_ops.items())] if isinstance(raw_ops, dict) else []
    return {
        "format": FORMAT,
        "python": platform.python_version(),
        "prefix": sys.prefix,
        "machine": platform.machine(),
        "os": os_release(),
        "deb_packages": deb_packages(),
        "python_packages": python_packages(),
        "manifest_path": str(path),
        "manifest": manifest,
        "manifest_error": error,
        "ops": ops,
        "torch": torch_facts() if with_torch else None,
        "layout": python_layout(),
    }


def main() -> None:
    json.dump(collect("--torch" in sys.argv[1:]), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
