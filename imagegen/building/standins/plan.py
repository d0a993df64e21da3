"""Which stand-in images a request needs, named from the catalog: pure, no engine, no host.

A request (``--cpu``, ``--cuda X.Y`` repeated, ``--platform``) becomes an ordered tuple of
``Image``s, parents first: the Debian base of a suite (debootstrap), the Python devel and
runtime pairs derived from it with apt, and each CUDA release's devel and runtime pair. Tags
come from ``imagegen.imagespec.catalog`` (``STANDINS``); ``STANDIN_PREFIX`` in the environment swaps the
repository prefix (to time a cold run without replacing the images other builds are cached on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from imagegen import settings
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog

# Bump when a recipe changes: images with another revision are rebuilt. The images made by the
# shell script this replaces carry revision 3 too, and their recipes are unchanged.
REVISION = "3"
LABEL_KEY = "io.imagegen.standin"
REVISION_KEY = "io.imagegen.standin.revision"
HOST_CUDA_VERSION = "13.0"  # what --cuda 13.0 copies when CUDA_HOME holds it (this machine's toolkit)

Recipe = Literal["debootstrap", "apt", "cuda-host", "cuda-wheels", "cuda-debian"]

# Debian's name for each platform's architecture and the kernel's (binfmt handlers, wheel tags).
ARCHES: dict[str, tuple[str, str]] = {catalog.AMD64: ("amd64", "x86_64"), catalog.ARM64: ("arm64", "aarch64")}
_PLATFORM_ALIASES = {"linux/arm64/v8": catalog.ARM64}
# The packages of the Python stand-ins, as the python:*-slim images they replace have them;
# the devel one adds the compilers and build tools.
PYTHON_DEVEL_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",
    "g++",
    "make",
    "ninja-build",
    "ca-certificates",
)
PYTHON_RUNTIME_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# The Debian components a suite's base carries: non-free where a CUDA toolkit comes from it.
_BASE_COMPONENTS = {"bookworm": ("main",), "trixie": ("main", "contrib", "non-free")}


@dataclass(frozen=True)
class Image:
    """One stand-in image: its tag, what makes it, and the image it starts from."""

    tag: str
    kind: str  # the io.imagegen.standin label: base, devel, runtime, cuda-devel, cuda-base
    recipe: Recipe
    parent: str | None = None  # the image it derives from (None: debootstrap)
    suite: str = catalog.STANDIN_DISTRO
    cuda: str | None = None  # X.Y for the CUDA images
    pair: str | None = None  # the other image made by the same recipe (CUDA devel <-> base)


@dataclass(frozen=True)
class Request:
    """What `imagegen standins` was asked for, validated."""

    platform: str = catalog.DEFAULT_PLATFORM
    cuda: tuple[str, ...] = ()
    prefix: str = catalog.STANDIN_PREFIX

    @property
    def arch(self) -> str:
        return ARCHES[self.platform][0]

    @property
    def machine(self) -> str:
        return ARCHES[self.platform][1]


def _shown(value: str) -> str:
    """A value as an error message quotes it: repr, and no longer than a line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_platform(value: str | None) -> str:
    platform = catalog.DEFAULT_PLATFORM if value is None else _PLATFORM_ALIASES.get(value, value)
    if platform not in ARCHES:
        raise BadInputError(
            f"--platform {_shown(platform)} is not one the stand-ins are made for",
            hint="use " + " or ".join(ARCHES),
        )
    return platform


def standin_versions(platform: str) -> tuple[str, ...]:
    """The CUDA versions with stand-ins on ``platform``: the catalog's, and on arm64 the 13.x ones
    (NVIDIA's aarch64 wheels; the Debian toolkit and the host copy are x86-64)."""
    listed = [name.removeprefix("cuda") for name, where in catalog.STANDINS if name.startswith("cuda")]
    if platform == catalog.DEFAULT_PLATFORM:
        return tuple(listed)
    return tuple(v for v in listed if Version(v) >= Version(catalog.STANDIN_CUDA_SINCE))


def parse_cuda(values: Sequence[str], platform: str) -> tuple[str, ...]:
    """The --cuda versions, each one the catalog has stand-ins for on ``platform``."""
    have = standin_versions(platform)
    for value in values:
        if not re.fullmatch(r"\d+\.\d+", value):
            raise BadInputError(
                f"--cuda {_shown(value)} is not a CUDA version", hint="use MAJOR.MINOR, e.g. " + have[-1]
            )
        if value not in have:
            why = (
                "NVIDIA's wheels hold a whole compiler from CUDA 13 on (the 12.x ones only ptxas) and "
                "Debian packages 12.4 only"
                if platform == catalog.DEFAULT_PLATFORM
                else f"on {platform} only NVIDIA's 13.x wheels make one"
            )
            raise BadInputError(
                f"--cuda {value}: no stand-in for CUDA {value} on {platform}: {why}",
                hint="stand-ins exist for CUDA "
                + ", ".join(have)
                + "; other versions need the real nvidia/cuda bases",
            )
    return tuple(dict.fromkeys(values))


def request(
    cuda: Sequence[str] = (), platform: str | None = None, env: Mapping[str, str] | None = None
) -> Request:
    """Validate the flags (BadInputError, exit 2) into a Request."""
    chosen = parse_platform(platform)
    prefix = ((env or {}).get(settings.STANDIN_PREFIX.name) or catalog.STANDIN_PREFIX).strip().rstrip("/")
    if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", prefix):
        raise BadInputError(
            f"STANDIN_PREFIX {prefix!r} is not an image repository name",
            hint="lower-case letters, digits and . _ - /, e.g. imagegen-standin-cold",
        )
    return Request(chosen, parse_cuda(cuda, chosen), prefix)


def retag(tag: str, prefix: str) -> str:
    """A catalog tag under another repository prefix."""
    return prefix + tag.removeprefix(catalog.STANDIN_PREFIX)


def base_tag(suite: str, req: Request) -> str:
    return f"{req.prefix}/debian:{suite}{catalog.platform_tag_suffix(req.platform)}"


def base_components(suite: str) -> tuple[str, ...]:
    return _BASE_COMPONENTS.get(suite, ("main",))


def cuda_recipe(version: str, platform: str, host_cuda: str | None) -> Recipe:
    """How ``version``'s stand-ins are made: Debian's packages (12.4), this machine's toolkit
    (13.0 on amd64 when CUDA_HOME holds it: ``host_cuda``), else NVIDIA's wheels."""
    if version in catalog.STANDIN_DEBIAN_CUDA:
        return "cuda-debian"
    if version == HOST_CUDA_VERSION and host_cuda == version and platform == catalog.DEFAULT_PLATFORM:
        return "cuda-host"
    return "cuda-wheels"


def plan(req: Request, host_cuda: str | None = None) -> tuple[Image, ...]:
    """Every image ``req`` needs, parents before children. The CPU pair is always there: the
    CUDA 13.x images derive from it, and the tests and `make images` use it."""
    images: list[Image] = []

    def base(suite: str) -> str:
        tag = base_tag(suite, req)
        if all(i.tag != tag for i in images):
            images.append(Image(tag, "base", "debootstrap", suite=suite))
        return tag

    devel, runtime = (retag(t, req.prefix) for t in catalog.STANDINS[("cpu", req.platform)])
    parent = base(catalog.STANDIN_DISTRO)
    images.append(Image(devel, "devel", "apt", parent))
    images.append(Image(runtime, "runtime", "apt", parent))
    for version in req.cuda:
        name = "cuda" + version
        pair = catalog.standin_bases(name, catalog.DEFAULT_PLATFORM)
        assert pair is not None, f"parse_cuda admitted {version} without stand-ins"
        cuda_devel, cuda_base = (
            retag(t, req.prefix) + catalog.platform_tag_suffix(req.platform) for t in pair
        )
        recipe = cuda_recipe(version, req.platform, host_cuda)
        if recipe == "cuda-debian":
            suite = catalog.standin_suite(name)
            parents = (base(suite), base(suite))
        else:
            suite, parents = catalog.STANDIN_DISTRO, (devel, runtime)
        images.append(Image(cuda_devel, "cuda-devel", recipe, parents[0], suite, version, cuda_base))
        images.append(Image(cuda_base, "cuda-base", recipe, parents[1], suite, version, cuda_devel))
    return tuple(images)


def to_make(images: Sequence[Image], current: Mapping[str, bool], force: bool = False) -> tuple[Image, ...]:
    """The images to (re)build: forced, not current (missing or another revision), or whose
    parent is rebuilt in this run (a new base invalidates everything made from it). A CUDA
    pair is made by one recipe, so both go when either does (parents come first in ``images``,
    and no image derives from a CUDA one, so one pass decides)."""
    chosen: set[str] = set()
    for image in images:
        if force or not current.get(image.tag, False) or (image.parent in chosen):
            chosen.add(image.tag)
            if image.pair is not None:
                chosen.add(image.pair)
    return tuple(image for image in images if image.tag in chosen)
