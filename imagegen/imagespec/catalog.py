"""What imagegen knows about targets: base images, torch builds, wheel indexes, archs.

Pure data plus small lookup functions; nothing here probes the host or a registry.

Sources (checked by hand; every value here can be overridden on the command line):
- CUDA base images: the ``nvidia/cuda`` tags ``<full>-devel-<distro>`` to compile and
  ``<full>-base-<distro>`` to run (https://hub.docker.com/r/nvidia/cuda/tags). torch's CUDA
  wheels bring every CUDA library they load (cuBLAS, cuDNN, NCCL, ... as ``nvidia-*`` wheels,
  or inside the wheel for old releases), so ``-runtime`` or ``-cudnn-`` bases would ship those
  gigabytes twice; ``-base`` adds only cudart and the variables the NVIDIA container toolkit
  reads.
- ROCm base images: ``rocm/dev-<distro>:<version>`` to compile; the runtime stage starts from
  plain ``ubuntu:<release>`` because torch's ROCm wheels bundle the ROCm user-space libraries
  (https://hub.docker.com/r/rocm/dev-ubuntu-22.04/tags).
- torch builds per CUDA / ROCm version: the PyTorch release matrix
  (https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix), the
  "previous versions" install commands (https://pytorch.org/get-started/previous-versions/) and,
  per release, the ``CUDA_ARCHES`` / ``ROCM_ARCHES`` of
  ``.github/scripts/generate_binary_build_matrix.py`` on its ``release/X.Y`` branch. From torch
  2.9 on, cross-checked with the torch builds huggingface/kernel-builder builds kernels against
  (its list of torch versions, one entry per published CUDA / ROCm wheel variant):
  torch 2.9: CUDA 12.6, 12.8, 12.9, 13.0; ROCm 6.3, 6.4.
  torch 2.10: CUDA 12.6, 12.8, 13.0; ROCm 7.0, 7.1.
  torch 2.11: CUDA 12.6, 12.8, 13.0; ROCm 7.1, 7.2.
  torch 2.12: CUDA 12.6, 13.0, 13.2; ROCm 7.1, 7.2.
  torch 2.13 to 2.15: CUDA 13.0 and 13.2, the ``cuda-toolkit`` pins of the PyPI wheels (below).
  ``--torch-index`` relaxes the check for a pairing not listed.
- ROCm 7.x bases: ``rocm/dev-ubuntu-24.04:7.0`` / ``:7.1`` / ``:7.2`` (and ``-22.04``), the same
  repository as the 6.x ones.
- torch release numbers: the versions published on PyPI.
- CUDA 13.x builds of torch: the ``cuda-toolkit`` pin in each release's wheel metadata on PyPI
  (torch 2.11 to 2.14.1: ``cuda-toolkit==13.0.x``; torch 2.15.0: ``cuda-toolkit==13.2.2``).
- CUDA 13.3 to 13.5: NVIDIA's ``cuda-toolkit`` / ``nvidia-cuda-nvcc`` releases on PyPI (13.3.1 /
  13.3.73, 13.4.3 / 13.4.92, 13.5.0 / 13.5.37); no torch wheel pins them.
- ``imagegen catalog --check-upstream`` (imagegen.compat.upstream) reads the same index for what
  this table lacks; it never edits it.
- arm64: torch publishes aarch64 CUDA wheels (``sbsa``) from CUDA 12.6 (torch 2.6) on, in the
  same ``cuXYZ`` indexes, and aarch64 CPU wheels up to 2.10 (from 2.11 on its aarch64 wheels
  are CUDA builds: ``ARM64_CPU_TORCH``); ROCm wheels are x86-64 only. The ``nvidia/cuda``
  and ``python`` images are multi-platform, so the platform picks the variant and the tags
  stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from packaging.version import InvalidVersion, Version

from imagegen import options
from imagegen.imagespec.torch_releases import TORCH_PYTHONS, TORCH_RELEASES
from op_builder import archs as arch_lib

Accelerator = Literal["cpu", "cuda", "rocm"]

# The platforms images are built for (OCI names, as `docker build --platform` takes them).
AMD64 = "linux/amd64"
ARM64 = "linux/arm64"
PLATFORMS: tuple[str, ...] = (AMD64, ARM64)
# The options table's (--platform's default, one place for it); the catalog holds it.
DEFAULT_PLATFORM: str = options.default("platform")
# The first CUDA release torch publishes aarch64 (sbsa) wheels for.
ARM64_CUDA_SINCE = "12.6"

# The GPUs NVIDIA pairs with its arm64 Grace CPU, as compute capabilities: GH200 (9.0), GB200
# (10.0), GB300 (10.3), DGX Spark's GB10 (12.1). An arm64 CUDA image runs on those nodes, so
# its default arch list is these, each where the toolkit compiles it (op_builder.archs).
GRACE_GPU_ARCHS: tuple[str, ...] = ("9.0", "10.0", "10.3", "12.1")

TORCH_INDEX_ROOT = "https://download.pytorch.org/whl"

# The Python each Ubuntu release ships as python3 (GPU images install it with apt).
UBUNTU_PYTHON: dict[str, str] = {"ubuntu22.04": "3.10", "ubuntu24.04": "3.12"}

# Build tools installed into the devel stage's venv (lower bounds; pip picks the newest).
PACKAGING_REQUIREMENT = "packaging>=23"
BUILD_TOOLS: tuple[str, ...] = ("setuptools>=69", "wheel>=0.42", "ninja>=1.11", PACKAGING_REQUIREMENT)
# Of those, what the runtime venv does without (packaging stays: op_builder reads versions with it).
BUILD_ONLY_TOOLS: tuple[str, ...] = ("setuptools", "wheel", "ninja")

# Debian/Ubuntu releases that renamed libraries in the 64-bit time_t transition.
_T64_DISTROS = frozenset({"trixie", "ubuntu24.04"})
_T64_RENAMES: dict[str, str] = {"libaio1": "libaio1t64"}


@dataclass(frozen=True)
class TorchRange:
    """torch minors ``first``..``last`` (inclusive) built for a target, from ``index`` suffix."""

    first: str
    last: str
    variant: str  # the wheel index suffix and local version label: "cu121", "rocm6.2.4"

    def admits(self, torch: str) -> bool:
        minor = _minor(torch)
        return Version(self.first) <= minor <= Version(self.last)


@dataclass(frozen=True)
class PlatformTorch:
    """A target's torch on a platform where its builds stop earlier than on amd64."""

    platform: str
    last: str  # the newest torch minor with a build of the target there: "2.10"
    default: str  # what an image for it gets when no torch is named: "2.10.0"
    why: str  # what a refusal of a newer one says


@dataclass(frozen=True)
class Target:
    """One CUDA / ROCm / CPU version imagegen can build for."""

    accelerator: Accelerator
    version: str | None  # "12.1", "6.2"; None for the CPU
    full_version: str | None  # "12.1.1" as in the base image tag
    distros: tuple[str, ...]  # the first is the default
    torch: tuple[TorchRange, ...]
    default_torch: str  # on amd64; another platform's may differ (platform_torch)
    platforms: tuple[str, ...] = (AMD64,)  # those torch publishes wheels of this target for
    platform_torch: tuple[PlatformTorch, ...] = ()  # where a platform's torch builds stop earlier

    @property
    def name(self) -> str:
        """``cpu``, ``cuda12.1``, ``rocm6.2``: used in tags and dockerfiles/ folders."""
        return self.accelerator if self.version is None else f"{self.accelerator}{self.version}"

    def platform_limit(self, platform: str) -> PlatformTorch | None:
        """Where ``platform``'s torch builds of this target stop earlier than amd64's; None: they do not."""
        return next((limit for limit in self.platform_torch if limit.platform == platform), None)

    def default_torch_for(self, platform: str = DEFAULT_PLATFORM) -> str:
        """The torch an image for ``platform`` gets when none is named: one with a build there."""
        limit = self.platform_limit(platform)
        return self.default_torch if limit is None else limit.default

    def torch_range(self, torch: str, platform: str = DEFAULT_PLATFORM) -> TorchRange | None:
        """The range (so the wheel index) of ``torch`` on ``platform``; None: no build of it there."""
        limit = self.platform_limit(platform)
        if limit is not None and _minor(torch) > Version(limit.last):
            return None
        return next((candidate for candidate in self.torch if candidate.admits(torch)), None)

    def torch_versions(self, platform: str = DEFAULT_PLATFORM) -> tuple[str, ...]:
        """Every torch release built for this target on ``platform``, oldest first."""
        return tuple(t for t in TORCH_RELEASES if self.torch_range(t, platform) is not None)

    def base_devel(self, distro: str, python: str) -> str:
        if self.accelerator == "cuda":
            return f"nvidia/cuda:{self.full_version}-devel-{distro}"
        if self.accelerator == "rocm":
            return f"rocm/dev-{_ubuntu_tag(distro)}:{self.version}"
        return f"python:{python}-slim-{distro}"

    def base_runtime(self, distro: str, python: str) -> str:
        if self.accelerator == "cuda":
            return f"nvidia/cuda:{self.full_version}-base-{distro}"
        if self.accelerator == "rocm":
            return "ubuntu:" + distro.removeprefix("ubuntu")
        return f"python:{python}-slim-{distro}"

    def default_python(self, distro: str) -> str:
        """The CPU images take any Python; GPU images use their Ubuntu's python3."""
        return UBUNTU_PYTHON.get(distro, CPU_DEFAULT_PYTHON)


def _ubuntu_tag(distro: str) -> str:
    return "ubuntu-" + distro.removeprefix("ubuntu")


def _minor(version: str) -> Version:
    v = Version(version)
    return Version(f"{v.major}.{v.minor}")


def _cuda(version: str, full: str, distros: tuple[str, ...], ranges: str, default_torch: str) -> Target:
    """``ranges``: ``2.6-2.12`` (torch's own builds for this CUDA), or ``2.9-2.11:cu130,...`` for
    a release torch builds nothing for, whose images take torch's builds for an older 13.x."""

    def torch_range(text: str) -> TorchRange:
        span, _, variant = text.partition(":")
        first, last = span.split("-")
        return TorchRange(first, last, variant or "cu" + version.replace(".", ""))

    arm64 = Version(version) >= Version(ARM64_CUDA_SINCE)
    return Target(
        "cuda",
        version,
        full,
        distros,
        tuple(torch_range(r) for r in ranges.split(",")),
        default_torch,
        platforms=(AMD64, ARM64) if arm64 else (AMD64,),
    )


_U22 = ("ubuntu22.04",)
_U22_24 = ("ubuntu22.04", "ubuntu24.04")
_U24_22 = ("ubuntu24.04", "ubuntu22.04")

CUDA_TARGETS: dict[str, Target] = {
    t.version or "": t
    for t in (
        _cuda("11.8", "11.8.0", _U22, "2.0-2.7", "2.7.1"),
        _cuda("12.1", "12.1.1", _U22, "2.1-2.5", "2.5.1"),
        _cuda("12.4", "12.4.1", _U22, "2.4-2.6", "2.6.0"),
        # torch 2.11 and 2.12 still publish CUDA 12.6 builds (cu126), after 12.8's last (2.11).
        _cuda("12.6", "12.6.3", _U22_24, "2.6-2.12", "2.12.1"),
        _cuda("12.8", "12.8.1", _U22_24, "2.7-2.11", "2.11.0"),
        _cuda("12.9", "12.9.1", _U22_24, "2.8-2.9", "2.9.1"),
        _cuda("13.0", "13.0.0", _U22_24, "2.9-2.15", "2.15.0"),
        # cu132 from torch 2.12 on; torch 2.15.0's wheels on PyPI are CUDA 13.2 builds
        # (cuda-toolkit==13.2.2). New entries default to the newer Ubuntu LTS (ubuntu24.04,
        # Python 3.12, which these torch releases support).
        _cuda("13.2", "13.2.2", _U24_22, "2.12-2.15", "2.15.0"),
        # CUDA 13.3 to 13.5: torch publishes no build of them. Their images take torch's CUDA 13.0
        # builds (up to 2.11) and 13.2 builds (2.12 on): minor-version compatibility within CUDA
        # 13 runs those wheels under a newer 13.x, torch's own CUDA libraries come in its
        # nvidia-* wheels, and the ops built by this nvcc load beside them (the same
        # libcudart.so.13; op_builder refuses only a major mismatch). Full versions: the newest
        # `cuda-toolkit` release of each minor on PyPI, the version NVIDIA's wheels and
        # nvidia/cuda tags carry.
        *(
            _cuda(minor, full, _U24_22, "2.9-2.11:cu130,2.12-2.15:cu132", "2.15.0")
            for minor, full in (("13.3", "13.3.1"), ("13.4", "13.4.3"), ("13.5", "13.5.0"))
        ),
    )
}

# ROCm wheel indexes changed name with the patch release they were built against
# (torch 2.5 used rocm6.2, torch 2.6 and 2.7 rocm6.2.4).
ROCM_TARGETS: dict[str, Target] = {
    "6.1": Target("rocm", "6.1", "6.1", _U22, (TorchRange("2.4", "2.6", "rocm6.1"),), "2.6.0"),
    "6.2": Target(
        "rocm",
        "6.2",
        "6.2",
        _U22_24,
        (TorchRange("2.5", "2.5", "rocm6.2"), TorchRange("2.6", "2.7", "rocm6.2.4")),
        "2.7.1",
    ),
    "6.3": Target("rocm", "6.3", "6.3", _U22_24, (TorchRange("2.7", "2.9", "rocm6.3"),), "2.9.1"),
    "6.4": Target("rocm", "6.4", "6.4", _U22_24, (TorchRange("2.8", "2.9", "rocm6.4"),), "2.9.1"),
    # ROCm 7: torch 2.10 publishes rocm7.0 and rocm7.1, torch 2.11 and 2.12 rocm7.1 and rocm7.2.
    # Ubuntu 24.04 first, as for the newest CUDA entries.
    "7.0": Target("rocm", "7.0", "7.0", _U24_22, (TorchRange("2.10", "2.10", "rocm7.0"),), "2.10.0"),
    "7.1": Target("rocm", "7.1", "7.1", _U24_22, (TorchRange("2.10", "2.12", "rocm7.1"),), "2.12.1"),
    "7.2": Target("rocm", "7.2", "7.2", _U24_22, (TorchRange("2.11", "2.12", "rocm7.2"),), "2.12.1"),
}

CPU_DEFAULT_PYTHON = "3.11"
CPU_PYTHONS: tuple[str, ...] = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
# torch's aarch64 CPU builds stop at 2.10: PyPI's aarch64 wheels are CUDA 13.0 builds from 2.11 on
# (2.11.0 aarch64 requires cuda-toolkit==13.0.2), and the CPU index's aarch64 wheels stop there too.
# A newer pin on arm64 installs a CUDA build, whose `import torch` never returned under qemu (26
# minutes at under 1% CPU). CUDA targets on arm64 take the sbsa builds, which follow amd64's.
_ARM64_WHY = "torch's aarch64 CPU builds stop at 2.10 (its aarch64 wheels from 2.11 on are CUDA builds)"
ARM64_CPU_TORCH = PlatformTorch(ARM64, last="2.10", default="2.10.0", why=_ARM64_WHY)
_CPU_TORCH = (TorchRange("2.0", "2.15", "cpu"),)
CPU_TARGET = Target(
    "cpu", None, None, ("bookworm", "trixie"), _CPU_TORCH, "2.13.0", PLATFORMS, (ARM64_CPU_TORCH,)
)


# Local stand-ins for the bases, made by `imagegen standins` (imagegen/building/standins/; no registry
# needed): (target, platform) -> (devel, runtime). CPU: Debian bookworm's Python 3.11, amd64 and
# arm64 (under qemu). CUDA 13.x: NVIDIA's compiler wheels of exactly that release laid out as a
# CUDA home (13.0: this machine's toolkit when CUDA_HOME holds 13.0); the 12.x wheels hold only
# ptxas. CUDA 12.4: Debian trixie's non-free `nvidia-cuda-toolkit` (12.4.131), with trixie's
# Python 3.13. Other 12.x releases have no Debian package here: rendered only.
STANDIN_PREFIX = "imagegen-standin"
STANDIN_PYTHON = "3.11"
STANDIN_DISTRO = "bookworm"
STANDIN_CUDA_SINCE = "13.0"
# CUDA releases below STANDIN_CUDA_SINCE with a stand-in from Debian's packages: version ->
# the Debian suite whose non-free component has that toolkit.
STANDIN_DEBIAN_CUDA: dict[str, str] = {"12.4": "trixie"}
# The python3 of each Debian suite a stand-in is made from.
STANDIN_SUITE_PYTHON: dict[str, str] = {"bookworm": "3.11", "trixie": "3.13"}


def _standin_pair(target: str, platform: str) -> tuple[str, str]:
    suffix = platform_tag_suffix(platform)
    if target == "cpu":
        return (
            f"{STANDIN_PREFIX}/python:{STANDIN_PYTHON}-devel{suffix}",
            f"{STANDIN_PREFIX}/python:{STANDIN_PYTHON}-runtime{suffix}",
        )
    version = target.removeprefix("cuda")
    return (f"{STANDIN_PREFIX}/cuda:{version}-devel{suffix}", f"{STANDIN_PREFIX}/cuda:{version}-base{suffix}")


def platform_tag_suffix(platform: str) -> str:
    """What a platform adds to tags: nothing for the default (existing tags keep their names)."""
    return "" if platform == DEFAULT_PLATFORM else "-" + platform.rsplit("/", 1)[-1]


def _from_wheels(target: Target) -> bool:
    return Version(target.version or "0") >= Version(STANDIN_CUDA_SINCE)


def _has_standins(target: Target) -> bool:
    return (target.version or "0") in STANDIN_DEBIAN_CUDA or _from_wheels(target)


STANDINS: dict[tuple[str, str], tuple[str, str]] = {
    (name, platform): _standin_pair(name, platform)
    for name, platform in (
        ("cpu", AMD64),
        ("cpu", ARM64),
        *((t.name, AMD64) for t in CUDA_TARGETS.values() if _has_standins(t)),
        # arm64: from NVIDIA's aarch64 13.x wheels (a cross build's runtime stage; its devel is amd64's).
        *((t.name, ARM64) for t in CUDA_TARGETS.values() if ARM64 in t.platforms and _from_wheels(t)),
    )
}
STANDIN_DEVEL, STANDIN_RUNTIME = STANDINS[("cpu", AMD64)]


def standin_bases(target: str, platform: str = DEFAULT_PLATFORM) -> tuple[str, str] | None:
    """The (devel, runtime) stand-ins of ``target`` on ``platform``, or None when there are none."""
    return STANDINS.get((target, platform))


def standin_suite(target: str) -> str:
    """The Debian suite ``target``'s stand-ins are made from (``cuda12.4``: trixie)."""
    return STANDIN_DEBIAN_CUDA.get(target.removeprefix("cuda"), STANDIN_DISTRO)


def standin_distro(target: str) -> str:
    """The distro a ``--standins`` build of ``target`` installs run-time packages for."""
    return standin_suite(target)


def standin_python(target: str) -> str:
    """The Python of ``target``'s stand-in bases."""
    return STANDIN_SUITE_PYTHON[standin_suite(target)]


def targets(accelerator: Accelerator) -> dict[str, Target]:
    """The supported versions of one accelerator, by version string."""
    if accelerator == "cuda":
        return CUDA_TARGETS
    if accelerator == "rocm":
        return ROCM_TARGETS
    return {"": CPU_TARGET}


def all_targets() -> tuple[Target, ...]:
    """Every target: the CUDA ones, the ROCm ones, then the CPU (the order tables list them in)."""
    return (*CUDA_TARGETS.values(), *ROCM_TARGETS.values(), CPU_TARGET)


def lookup(accelerator: Accelerator, version: str | None) -> Target | None:
    """The target for ``--cuda X.Y`` / ``--rocm X.Y`` / ``--cpu``, or None if unsupported."""
    if accelerator == "cpu":
        return CPU_TARGET
    return targets(accelerator).get(version or "")


def closest_version(accelerator: Accelerator, version: str) -> str | None:
    """The supported version nearest to ``version`` (for 'did you mean' hints)."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        return None

    def distance(candidate: str) -> tuple[int, str]:
        have = Version(candidate)
        # 5.7 is nearer to 6.1 than to 6.4: compare as one number, minor in the low digits.
        return (abs((have.major - wanted.major) * 100 + have.minor - wanted.minor), candidate)

    return min(targets(accelerator), key=distance, default=None)


def default_cuda_archs(version: str, platform: str = DEFAULT_PLATFORM) -> tuple[str, ...]:
    """The arch list a CUDA version builds when the user names none.

    On amd64 the toolkit's default (``op_builder.archs``). On arm64 the Grace-paired GPUs the
    toolkit compiles, with PTX for the newest (as the toolkit defaults do: a later GPU still
    runs it through the driver's JIT).
    """
    if platform != ARM64:
        return tuple(str(a) for a in arch_lib.default_cuda_archs(version))
    parsed = arch_lib.parse_cuda_arch_list(";".join(GRACE_GPU_ARCHS))
    kept = [a for a in parsed if arch_lib.unsupported_reason(a, version) is None]
    if not kept:
        return ()
    return (*(str(a) for a in kept[:-1]), f"{kept[-1]}+PTX")


def torch_local_label(variant: str, platform: str) -> str | None:
    """The local version label of the catalog index's torch wheels (``cu121``), or None.

    download.pytorch.org/whl/cpu publishes its aarch64 wheels without ``+cpu``
    (https://github.com/pytorch/pytorch/issues/110791): there the pin is by version, and the
    devel stage's build check still refuses anything but a CPU build.
    """
    if variant == "cpu" and platform == ARM64:
        return None
    return variant


def default_rocm_archs() -> tuple[str, ...]:
    return arch_lib.DEFAULT_ROCM_ARCHS


def torch_index(variant: str) -> str:
    return f"{TORCH_INDEX_ROOT}/{variant}"


def resolve_torch_release(text: str) -> str | None:
    """``2.5`` -> the newest 2.5.x release; ``2.5.1`` -> itself; None when no such release."""
    try:
        wanted = Version(text)
    except InvalidVersion:
        return None
    if len(wanted.release) == 2:
        matches = [t for t in TORCH_RELEASES if _minor(t) == wanted]
        return matches[-1] if matches else None
    normal = str(Version(wanted.base_version))
    return normal if normal in TORCH_RELEASES else None


def python_range(torch: str) -> tuple[str, str] | None:
    minor = _minor(torch)
    return TORCH_PYTHONS.get(f"{minor.major}.{minor.minor}")


def torch_supports_python(torch: str, python: str) -> bool:
    bounds = python_range(torch)
    if bounds is None:
        return False
    return Version(bounds[0]) <= Version(python) <= Version(bounds[1])


def runtime_package(name: str, distro: str) -> str:
    """The package's name on ``distro`` (Debian 13 / Ubuntu 24.04 renamed some in the t64 move)."""
    if distro in _T64_DISTROS:
        return _T64_RENAMES.get(name, name)
    return name
