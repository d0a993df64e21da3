"""Ops built once for every torch from a target release on: torch's stable ABI, Python's limited API.

A builder declares ``stable_abi = "2.10"``. When the build's torch has the stable API (2.10 and
later) and the op targets the CPU or CUDA, the op is compiled against torch's stable C++ headers
with ``TORCH_TARGET_VERSION`` set to the target (so no newer function of torch's C shim can be
used), ``Py_LIMITED_API`` for CPython 3.10, and its ops registered in a namespace of
``torch.ops`` of its own (``kernels/includes/op_abi.h``). Such a module needs only the C shim
and the stable ABI of CPython: it loads on every torch >= its target with the same CUDA major.

Older torch, and ROCm for now, get a module per torch release, as before (``kind == "torch"``).

``check_module`` holds a built module to that: each symbol it takes from torch is a C shim no
newer than its target, each from Python is in CPython's stable ABI of 3.10, and none is a C++
symbol of torch (``c10::``, ``at::``, ``torch::``, pybind11).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

from op_builder.elf_symbols import undefined_symbols
from op_builder.errors import BadInputError

# The first torch with the stable API our bindings use (tensor lists, str, sizes, get_num_threads).
FIRST_STABLE_TORCH = (2, 10)
# Python's limited API: the oldest CPython the modules load on, as Py_LIMITED_API spells it.
LIMITED_API = "0x030A0000"
LIMITED_API_PYTHON = (3, 10)

_DATA = Path(__file__).resolve().parent / "data"
SHIM_TABLE = _DATA / "stable_shims.txt"
ABI3_TABLE = _DATA / "abi3_symbols.txt"
# The linker's version script of a stable module: it exports its PyInit_ function alone.
EXPORTS_MAP = _DATA / "stable_exports.map"


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version ("2.13.0+cpu" -> (2, 13)); None when unreadable."""
    try:
        parts = Version(version).release
    except InvalidVersion:
        return None
    return (parts[0], parts[1] if len(parts) > 1 else 0)


def parse_target(text: str) -> tuple[int, int]:
    """ "2.10" -> (2, 10); ValueError for anything else (a builder's declaration is code)."""
    match = re.fullmatch(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"a stable ABI target is MAJOR.MINOR, like 2.10; got {text!r}")
    return int(match[1]), int(match[2])


# The platforms stable builds are made for. (An arm64 image's stable module, compiled against
# torch 2.10.0's headers, once had its kernels and none of its schemas: that release's
# STABLE_TORCH_LIBRARY named the namespace macro itself, which op_abi.h now expands first.)
STABLE_PLATFORMS = frozenset({"linux/amd64", "linux/arm64"})


def stable_target(
    declared: str | None, torch_version: str | None, accelerator: str, platform: str = "linux/amd64"
) -> str | None:
    """The target a build of an op uses, or None for a per-torch module.

    declared: the builder's ``stable_abi``; torch_version: the torch the build compiles against;
    platform: the one the module is for (a cross build's target).
    """
    if declared is None or torch_version is None or accelerator == "rocm":
        return None
    if platform not in STABLE_PLATFORMS:
        return None
    built = release(torch_version)
    if built is None or built < FIRST_STABLE_TORCH:
        return None
    if parse_target(declared) > built:
        return None  # headers older than the target cannot build it
    return declared


@dataclass(frozen=True)
class PinnedHeaders:
    """A torch ``include`` folder the stable ops compile against instead of the installed torch's.

    The bytes of a stable module depend on the headers it was compiled against, not on the torch
    it links (it takes only C functions from it): with one folder of headers, every torch release
    >= the target builds the same module. Images pin the newest torch of their target.
    """

    include: Path
    version: str  # "2.15.0", from the headers' own torch/headeronly/version.h


_VERSION_PART = re.compile(r"^#define TORCH_VERSION_(MAJOR|MINOR|PATCH) (\d+)\s*$", re.MULTILINE)


def pinned_headers(text: str, variable: str) -> PinnedHeaders:
    """The folder ``variable`` names, checked: torch's headers of a release with the stable API."""
    include = Path(text).expanduser()
    version_h = include / "torch" / "headeronly" / "version.h"
    try:
        parts = dict(_VERSION_PART.findall(version_h.read_text()))
    except OSError:
        raise BadInputError(
            f"{variable}={text} holds no torch headers of 2.10 or newer (no {version_h})",
            hint="name the include folder of a torch >= 2.10 (site-packages/torch/include), or unset it",
        ) from None
    version = ".".join(parts.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))
    built = release(version)
    if built is None or built < FIRST_STABLE_TORCH:
        raise BadInputError(
            f"{variable}={text} holds torch {version}'s headers; the stable ops need 2.10 or newer",
            hint="name the include folder of a torch >= 2.10, or unset it",
        )
    return PinnedHeaders(include.resolve(), version)


def version_macro(target: str) -> str:
    """TORCH_TARGET_VERSION for a target: major and minor in the top two bytes, as torch's
    ``torch/headeronly/version.h`` encodes versions."""
    major, minor = parse_target(target)
    return f"0x{major:02x}{minor:02x}000000000000"


def namespace(op: str, identity: Iterable[bytes]) -> str:
    """The torch.ops namespace of one build: the op's name and a hash of what it is built from.

    Two builds of one op (an image's module and a JIT build, two op packages' copies) register
    different namespaces: torch cannot hold one namespace twice (a second registration crashed a
    process in dlopen). The same sources and flags give the same name, so the module is the same
    bytes on every build of them.
    """
    digest = hashlib.sha256(op.encode())
    for part in identity:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return f"imagegen_{op}_{digest.hexdigest()[:12]}"


def defines(target: str, op_namespace: str, accelerator: str) -> tuple[str, ...]:
    """The compile flags of a stable build (Py_LIMITED_API comes with py_limited_api=True ahead of
    time, and from ``LIMITED_API_DEFINES`` just in time)."""
    flags = [
        "-DIMAGEGEN_STABLE_ABI",
        f"-DTORCH_TARGET_VERSION={version_macro(target)}",
        f"-DIMAGEGEN_OP_NAMESPACE={op_namespace}",
    ]
    if accelerator == "cuda":
        flags.append("-DUSE_CUDA")  # the C shim's CUDA functions (the current stream)
    return tuple(flags)


# Symbols the linker defines for a module whose link refers to them: torch's CPU builds' libraries
# export them, its CUDA builds' do not. Referred to always, they are in every module alike.
LINKER_SYMBOLS = ("_end", "_edata", "__bss_start")


def link_flags() -> tuple[str, ...]:
    """A stable module's link flags: it exports its PyInit_ function alone, and the linker's own
    symbols are in it whatever torch's libraries on the command line export, so the same sources
    linked against two torch releases are the same bytes (build ID included). The static symbol
    table stays: the SBOM reads the instruction-set paths from its function names."""
    return (f"-Wl,--version-script={EXPORTS_MAP}", *(f"-Wl,--undefined={name}" for name in LINKER_SYMBOLS))


# Python's limited API, which torch's extension classes define ahead of time (py_limited_api=True);
# a JIT build or a compile of our own adds it.
LIMITED_API_DEFINES = (f"-DPy_LIMITED_API={LIMITED_API}",)


# ------------------------------------------------------------------ loading


def load_refusal(
    target: str, torch_version: str, built_gpu: tuple[str, str | None], running_gpu: tuple[str, str | None]
) -> str | None:
    """Why a stable module for ``target`` cannot load on this torch; None when it can.

    built_gpu / running_gpu: ("cuda" | "hip" | "", version or None) of the build and of the torch
    running it; a GPU module needs the same major (the runtime libraries it links).
    """
    running = release(torch_version)
    wanted = parse_target(target)
    if running is None or running < wanted:
        return (
            f"built for torch >= {target} (stable ABI), but this is torch {torch_version}: "
            f"it needs torch {target} or newer"
        )
    kind, built = built_gpu
    if kind and built is not None:
        other_kind, other = running_gpu
        built_major, name = built.split(".")[0], kind.upper()
        if other_kind != kind or other is None:
            return f"built for {name} {built_major}, but torch {torch_version} has no {name}"
        running_major = other.split(".")[0]
        if running_major != built_major:
            return f"built for {name} {built_major}, but torch {torch_version} uses {name} {running_major}"
    return None


# ------------------------------------------------------------------ the symbol check


@dataclass(frozen=True)
class SymbolReport:
    """What a stable module takes from outside that it may not, by kind; empty when it passes."""

    torch_cxx: tuple[str, ...]  # mangled C++ symbols of torch or pybind11
    newer_shims: tuple[str, ...]  # "name (2.12)": C shims newer than the target
    python: tuple[str, ...]  # Py* symbols outside CPython's stable ABI of 3.10

    @property
    def ok(self) -> bool:
        return not (self.torch_cxx or self.newer_shims or self.python)

    def describe(self) -> str:
        parts = []
        if self.torch_cxx:
            parts.append("torch C++ symbols " + ", ".join(self.torch_cxx[:5]) + _more(self.torch_cxx))
        if self.newer_shims:
            parts.append(
                "C shims newer than its target " + ", ".join(self.newer_shims[:5]) + _more(self.newer_shims)
            )
        if self.python:
            parts.append(
                "Python symbols outside the stable ABI " + ", ".join(self.python[:5]) + _more(self.python)
            )
        return "; ".join(parts)


def _more(items: tuple[str, ...]) -> str:
    return f" and {len(items) - 5} more" if len(items) > 5 else ""


# A mangled name inside c10::, at::, torch::, caffe2:: or pybind11:: (functions, const methods,
# vtables, type info): what a module built against ATen or pybind11 takes from libtorch.
_TORCH_CXX = re.compile(r"^_Z(?:T[VIS])?N?[rVKRO]*(?:3c10|2at|5torch|6caffe2|8pybind11)(?=[0-9A-Z])")
_SHIM = re.compile(r"^(?:aoti_torch_|torch_)")
_PYTHON = re.compile(r"^_?Py")


def classify(
    symbols: Iterable[str], target: str, shims: Mapping[str, tuple[int, int]], abi3: frozenset[str]
) -> SymbolReport:
    """The check of ``check_module`` on a list of undefined symbols (tested on its own)."""
    wanted = parse_target(target)
    torch_cxx, newer, python = [], [], []
    for name in symbols:
        if _TORCH_CXX.match(name):
            torch_cxx.append(name)
        elif _SHIM.match(name):
            added = shims.get(name)
            if added is not None and added > wanted:
                newer.append(f"{name} ({added[0]}.{added[1]})")
        elif _PYTHON.match(name) and name not in abi3:
            python.append(name)
    return SymbolReport(tuple(torch_cxx), tuple(newer), tuple(python))


def check_module(path: str | Path, target: str) -> SymbolReport:
    """Hold the compiled module at ``path`` to the stable ABI of ``target`` (see the module doc)."""
    return classify(undefined_symbols(path), target, shim_versions(), abi3_symbols())


@cache
def shim_versions() -> dict[str, tuple[int, int]]:
    """The C shims added after 2.9, with the release that added each (``data/stable_shims.txt``,
    written by ``scripts/stable_tables.py`` from torch's headers); an unlisted shim is older."""
    table: dict[str, tuple[int, int]] = {}
    for line in SHIM_TABLE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition(" ")
            table[name] = parse_target(version)
    return table


@cache
def abi3_symbols() -> frozenset[str]:
    """CPython's stable ABI as of 3.10 (``data/abi3_symbols.txt``, written from abi3info)."""
    return frozenset(
        line for line in ABI3_TABLE.read_text().splitlines() if line and not line.startswith("#")
    )


# ------------------------------------------------------------------ the tables, from their sources

_GUARD = re.compile(r"#\s*if\s+TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+")
_DECLARED = re.compile(r"\b((?:aoti_torch|torch)_\w+)\s*\(")


def shims_from_headers(include_root: Path) -> dict[str, tuple[int, int]]:
    """The C shims declared under a version guard in torch's headers, with that version.

    Reads torch's C shim headers (``torch/csrc/stable/c``, ``torch/csrc/inductor/aoti_torch``)
    line by line, following ``#if``/``#endif`` nesting: a declaration inside
    ``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_N_0`` was added in 2.N.
    """
    found: dict[str, tuple[int, int]] = {}
    roots = [include_root / "torch/csrc/stable/c", include_root / "torch/csrc/inductor/aoti_torch"]
    for header in sorted(p for root in roots if root.is_dir() for p in root.rglob("*.h")):
        stack: list[tuple[int, int] | None] = []
        for line in header.read_text(errors="replace").splitlines():
            stripped = line.strip()
            guard = _GUARD.match(stripped)
            if guard:
                stack.append((int(guard[1]), int(guard[2])))
            elif re.match(r"#\s*if", stripped):
                stack.append(None)
            elif re.match(r"#\s*endif", stripped) and stack:
                stack.pop()
            else:
                versions = [v for v in stack if v is not None]
                if versions and not stripped.startswith("//"):
                    for name in _DECLARED.findall(line):
                        found.setdefault(name, max(versions))
    return found
