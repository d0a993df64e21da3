"""GPU architecture lists: parsing, per-toolkit validation, per-op filtering, flags.

Everything here is a pure function of its arguments. In particular nothing reads
or writes ``TORCH_CUDA_ARCH_LIST``: callers read the environment once and pass the
text in, and each op gets flags computed from its own filtered list. That is the
whole fix for the duplicate/leaking ``-gencode`` bug (DeepSpeed PR #7974), where
one builder rewrote the environment variable and changed the flags of the ops
built after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from packaging.version import Version

from op_builder.errors import ArchError

# Named families, as in TORCH_CUDA_ARCH_LIST ("Ampere" == "8.0;8.6").
FAMILIES: dict[str, tuple[str, ...]] = {
    "kepler": ("3.5", "3.7"),
    "maxwell": ("5.0", "5.2"),
    "pascal": ("6.0", "6.1"),
    "volta": ("7.0",),
    "turing": ("7.5",),
    "ampere": ("8.0", "8.6"),
    "ada": ("8.9",),
    "hopper": ("9.0",),
    "blackwell": ("10.0", "12.0"),
}

# Which nvcc releases can compile each compute capability: (first, last or None).
# Sources: the CUDA toolkit release notes ("Deprecated/Dropped features"); for 13.x, each
# release's own `nvcc --list-gpu-code` (recorded in tests/fixtures/nvcc/, which a test holds
# this table to).
_CUDA_SUPPORT: dict[tuple[int, int], tuple[str, str | None]] = {
    (3, 5): ("7.0", "11.8"),
    (3, 7): ("7.0", "11.8"),
    (5, 0): ("7.0", "12.9"),
    (5, 2): ("7.0", "12.9"),
    (5, 3): ("7.0", "12.9"),
    (6, 0): ("8.0", "12.9"),
    (6, 1): ("8.0", "12.9"),
    (6, 2): ("8.0", "12.9"),
    (7, 0): ("9.0", "12.9"),
    (7, 2): ("10.0", "12.9"),
    (7, 5): ("10.0", None),
    (8, 0): ("11.0", None),
    (8, 6): ("11.1", None),
    (8, 7): ("11.4", None),
    (8, 8): ("13.0", None),
    (8, 9): ("11.8", None),
    (9, 0): ("11.8", None),
    (10, 0): ("12.8", None),
    (10, 1): ("12.8", "12.9"),  # renamed 11.0 in CUDA 13
    (10, 3): ("12.9", None),
    (10, 7): ("13.4", None),
    (11, 0): ("13.0", None),
    (12, 0): ("12.8", None),
    (12, 1): ("12.9", None),
}

# The CUDA releases whose nvcc this table describes, by major: the last minor of each
# finished major. The newest major (13) still gains minors, so any 13.x is accepted.
_LAST_MINOR: dict[int, int | None] = {11: 8, 12: 9, 13: None}
KNOWN_CUDA_RELEASES = "11.0 to 11.8, 12.0 to 12.9, 13.x"


def unknown_cuda_release(version: str) -> str | None:
    """Why ``version`` (MAJOR.MINOR) is not a CUDA release we can plan for, or None."""
    major, minor = (int(part) for part in version.split("."))
    if major not in _LAST_MINOR:
        return f"CUDA {version} is not a CUDA release op_builder knows"
    last = _LAST_MINOR[major]
    if last is not None and minor > last:
        return f"CUDA {major} ended at {major}.{last}; there is no {version}"
    return None


# Arch-specific ("a") and family-specific ("f") variants need newer toolkits.
_SUFFIX_SINCE: dict[str, str] = {"a": "12.0", "f": "12.9"}

# The arch list a toolkit version builds when the user names none. PTX for the
# newest arch keeps future GPUs working through the driver's JIT.
_DEFAULTS: tuple[tuple[str, str], ...] = (
    # From 13.2 (the first release after 13.0 that torch builds with) every Blackwell: GB300's
    # 10.3 and GB10's 12.1 too. 13.0 keeps its list, so its images keep their names. 13.3 to 13.5
    # keep 13.2's: 13.4's new 10.7 runs sm_100 / sm_103 SASS (same major, higher minor), so a
    # default that adds it would compile one more arch for no device it alone serves.
    ("13.2", "7.5;8.0;8.6;8.9;9.0;10.0;10.3;11.0;12.0;12.1+PTX"),
    ("13.0", "7.5;8.0;8.6;8.9;9.0;10.0;11.0;12.0+PTX"),
    ("12.8", "7.0;7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"),
    ("11.8", "7.0;7.5;8.0;8.6;8.9;9.0+PTX"),
    ("11.1", "7.0;7.5;8.0;8.6+PTX"),
    ("11.0", "7.0;7.5;8.0+PTX"),
    ("0.0", "6.0;7.0+PTX"),
)

# At most four digits a part (a capability's have one or two): a longer run would only reach
# ``int``, which refuses more than 4300 digits with a ValueError, to be refused later.
_ARCH_RE = re.compile(r"^(\d{1,4})\.(\d{1,4})([af]?)$")
_ROCM_RE = re.compile(r"^gfx[0-9a-f]{3,5}(:[a-z0-9\-+:]+)?$")


@dataclass(frozen=True, order=True)
class CudaArch:
    """One compute capability, e.g. 9.0, 9.0a, 10.0f, optionally with PTX."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def number(self) -> str:
        """The nvcc spelling: ``90``, ``90a``, ``100f``."""
        return f"{self.major}{self.minor}{self.suffix}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}" + ("+PTX" if self.ptx else "")


def _parse_token(token: str) -> list[CudaArch]:
    ptx = False
    body = token
    if body.lower().endswith("+ptx"):
        ptx, body = True, body[: -len("+ptx")]
    family = FAMILIES.get(body.lower())
    if family is not None:
        archs = [_parse_token(a)[0] for a in family]
        if ptx:  # "Ampere+PTX" adds PTX for the newest member only
            last = archs[-1]
            archs[-1] = CudaArch(last.major, last.minor, last.suffix, True)
        return archs
    match = _ARCH_RE.match(body)
    if match is None:
        shown = repr(token) if len(token) <= 40 else f"{token[:24]!r}... ({len(token)} characters)"
        raise ArchError(
            f"malformed CUDA arch {shown}",
            hint="use X.Y, X.Ya, X.Yf, X.Y+PTX or a family name "
            f"({', '.join(f.capitalize() for f in FAMILIES)}), separated by ';' or spaces",
        )
    return [CudaArch(int(match[1]), int(match[2]), match[3], ptx)]


def merge(archs: Iterable[CudaArch]) -> tuple[CudaArch, ...]:
    """Sort and deduplicate; an arch listed with and without +PTX keeps the PTX."""
    by_key: dict[tuple[int, int, str], bool] = {}
    for arch in archs:
        key = (arch.major, arch.minor, arch.suffix)
        by_key[key] = by_key.get(key, False) or arch.ptx
    return tuple(CudaArch(m, n, s, p) for (m, n, s), p in sorted(by_key.items()))


def parse_cuda_arch_list(
    text: str, native: Callable[[], Sequence[str]] | None = None
) -> tuple[CudaArch, ...]:
    """Parse a ``TORCH_CUDA_ARCH_LIST``-style string.

    ``native`` returns the capabilities of the visible GPUs ("9.0", ...); it is
    only called when the list says ``native``.
    """
    tokens = [t for t in re.split(r"[;\s,]+", text.strip()) if t]
    if not tokens:
        raise ArchError("empty CUDA arch list", hint="for example TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'")
    archs: list[CudaArch] = []
    for token in tokens:
        if token.lower() == "native":
            visible = list(native()) if native is not None else []
            if not visible:
                raise ArchError(
                    "arch list says 'native' but no GPU is visible",
                    hint="name the archs explicitly, e.g. '8.0;9.0', when building without a GPU",
                )
            for capability in visible:
                archs.extend(_parse_token(capability))
            continue
        archs.extend(_parse_token(token))
    return merge(archs)


def default_cuda_archs(cuda_version: str | Version) -> tuple[CudaArch, ...]:
    """The arch list used for a toolkit version when the user gives none."""
    version = Version(str(cuda_version))
    for since, text in _DEFAULTS:
        if version >= Version(since):
            return parse_cuda_arch_list(text)
    raise AssertionError("unreachable: the last default starts at 0.0")


def _major_minor(version: str | Version) -> Version:
    v = Version(str(version))
    return Version(f"{v.major}.{v.minor}")


def unsupported_reason(arch: CudaArch, cuda_version: str | Version) -> str | None:
    """Why ``cuda_version``'s nvcc cannot compile ``arch``, or None when it can."""
    version = _major_minor(cuda_version)
    support = _CUDA_SUPPORT.get(arch.capability)
    if support is None:
        return f"{arch.major}.{arch.minor} is not a known compute capability"
    first, last = support
    if version < Version(first):
        return f"{arch.major}.{arch.minor} needs CUDA {first} or newer (toolkit is {version})"
    if last is not None and version > Version(last):
        return f"{arch.major}.{arch.minor} was dropped after CUDA {last} (toolkit is {version})"
    if arch.suffix:
        since = _SUFFIX_SINCE[arch.suffix]
        if version < Version(since):
            return f"the '{arch.suffix}' variant {arch.number} needs CUDA {since} or newer"
        if arch.major < 9:
            return f"{arch} has no '{arch.suffix}' variant (those start at 9.0)"
    return None


def supported_archs(cuda_version: str | Version) -> tuple[CudaArch, ...]:
    """Every plain compute capability the toolkit version can compile."""
    return tuple(
        CudaArch(major, minor)
        for (major, minor) in sorted(_CUDA_SUPPORT)
        if unsupported_reason(CudaArch(major, minor), cuda_version) is None
    )


def listed_capabilities(gpu_code_listing: str) -> set[tuple[int, int]]:
    """The plain compute capabilities in ``nvcc --list-gpu-code``'s output (``sm_121`` -> (12, 1))."""
    codes = re.findall(r"^sm_(\d+)$", gpu_code_listing, flags=re.MULTILINE)
    return {(int(code[:-1]), int(code[-1])) for code in codes}


def table_disagreement(cuda_version: str | Version, gpu_code_listing: str) -> str | None:
    """Where this table and that toolkit's own ``nvcc --list-gpu-code`` differ, in words; None
    when they agree (a new release may add or drop an arch the table does not know of yet)."""
    table = {a.capability for a in supported_archs(cuda_version)}
    listed = listed_capabilities(gpu_code_listing)
    parts = []
    if listed - table:
        parts.append("nvcc compiles " + ", ".join(f"{a}.{b}" for a, b in sorted(listed - table)) + " too")
    if table - listed:
        parts.append("nvcc no longer compiles " + ", ".join(f"{a}.{b}" for a, b in sorted(table - listed)))
    return "; ".join(parts) or None


def validate_for_toolkit(archs: Sequence[CudaArch], cuda_version: str | Version) -> None:
    """Raise ArchError naming every arch the toolkit cannot compile."""
    problems = [reason for a in archs if (reason := unsupported_reason(a, cuda_version))]
    if problems:
        valid = ", ".join(str(a) for a in supported_archs(cuda_version))
        raise ArchError(
            "; ".join(problems),
            hint=f"CUDA {_major_minor(cuda_version)} compiles: {valid}",
        )


@dataclass(frozen=True)
class ArchLimits:
    """An op's own bounds on compute capability (inclusive); None = unbounded."""

    min_capability: tuple[int, int] | None = None
    max_capability: tuple[int, int] | None = None

    def admits(self, arch: CudaArch) -> bool:
        if self.min_capability is not None and arch.capability < self.min_capability:
            return False
        return self.max_capability is None or arch.capability <= self.max_capability

    def describe(self) -> str:
        low = ".".join(map(str, self.min_capability)) if self.min_capability else None
        high = ".".join(map(str, self.max_capability)) if self.max_capability else None
        if low and high:
            return f"{low} to {high}"
        if low:
            return f">= {low}"
        if high:
            return f"<= {high}"
        return "any"


@dataclass(frozen=True)
class OpArchDecision:
    """One op's arch list: what it is compiled for, what its limits dropped, and why it
    cannot be built when nothing is left (``reason`` is None when it can)."""

    kept: tuple[CudaArch, ...]
    dropped: tuple[CudaArch, ...]
    reason: str | None


def decide_op_archs(name: str, archs: Sequence[CudaArch], limits: ArchLimits) -> OpArchDecision:
    """The one per-op arch decision: ``archs`` filtered by the op's own limits.

    ``op_builder.plan`` (through the builders) and ``imagegen.imagespec`` both call this, so an
    image and a wheel can never disagree about which archs an op gets.
    """
    kept = tuple(a for a in archs if limits.admits(a))
    dropped = tuple(a for a in archs if not limits.admits(a))
    reason = None
    if archs and not kept:
        listed = ";".join(str(a) for a in archs)
        reason = f"{name} needs archs {limits.describe()}; none of {listed} is"
    return OpArchDecision(kept, dropped, reason)


def nvcc_gencode_flags(archs: Sequence[CudaArch]) -> list[str]:
    """One ``-gencode`` per arch (SASS), plus one PTX entry per arch marked +PTX."""
    flags: list[str] = []
    for arch in merge(archs):
        flags.append(f"-gencode=arch=compute_{arch.number},code=sm_{arch.number}")
        if arch.ptx:
            flags.append(f"-gencode=arch=compute_{arch.number},code=compute_{arch.number}")
    return flags


def bf16_supported(archs: Sequence[CudaArch]) -> bool:
    """bf16 arithmetic paths need sm_80+ on every arch the op is compiled for."""
    return bool(archs) and all(a.capability >= (8, 0) for a in archs)


def fp8_native(archs: Sequence[CudaArch]) -> bool:
    """Hardware FP8 conversion exists from sm_89; below that cuda_fp8.h emulates."""
    return bool(archs) and all(a.capability >= (8, 9) for a in archs)


# ---------------------------------------------------------------- ROCm

DEFAULT_ROCM_ARCHS: tuple[str, ...] = ("gfx90a", "gfx942", "gfx1030", "gfx1100")


def parse_rocm_arch_list(text: str) -> tuple[str, ...]:
    """Parse ``PYTORCH_ROCM_ARCH`` (``gfx90a;gfx942``), sorted and deduplicated."""
    tokens = [t for t in re.split(r"[;\s,]+", text.strip()) if t]
    if not tokens:
        raise ArchError("empty ROCm arch list", hint="for example PYTORCH_ROCM_ARCH='gfx90a;gfx942'")
    bad = [t for t in tokens if not _ROCM_RE.match(t)]
    if bad:
        raise ArchError(
            f"malformed ROCm arch {bad[0]!r}",
            hint="use gfx targets such as gfx90a, gfx942 or gfx1100, separated by ';'",
        )
    return tuple(sorted(set(tokens)))


def hip_offload_flags(gfx: Sequence[str]) -> list[str]:
    return [f"--offload-arch={target}" for target in sorted(set(gfx))]
