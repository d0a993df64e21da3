"""What the Dockerfile of a cross build (``ImageSpec.cross``) reads besides the common values.

The devel and build stages run on the build platform; the ops compile for the image's platform
(op_builder's ``DS_TARGET_PLATFORM``, the compilers of Debian's cross toolchain) against the
target's torch, which uv installs into the image's venv for that platform. These are the
Debian and Python names of those pieces.
"""

from __future__ import annotations

import shlex

from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec
from op_builder import settings as op_settings
from op_builder.cross import PLATFORMS

# The build argument that turns the runtime stage's check of the ops off ("0"): `imagegen build`
# verifies the image in a sealed container right after, so the check would run twice under emulation.
CHECK_OPS_ARG = "CHECK_OPS"

# The image's venv, made in the devel stage and copied whole into the runtime stage.
VENV = "/opt/venv"
VENV_PYTHON = f"{VENV}/bin/python"
# uv picks the target's wheels and judges their dependencies' markers for the target platform;
# 0.5 has `uv pip install --python-platform`.
UV_REQUIREMENT = "uv>=0.5"
# torch's aarch64 and x86-64 wheels are manylinux_2_28 (glibc 2.28): every base we build on has newer.
MANYLINUX = "manylinux_2_28"

# The Debian package of each platform's cross C++ compiler (binutils, for strip, come with it).
_CROSS_COMPILER: dict[str, str] = {
    catalog.AMD64: "g++-x86-64-linux-gnu",
    catalog.ARM64: "g++-aarch64-linux-gnu",
}


def debian_arch(platform: str) -> str:
    return PLATFORMS[platform][2]


def triplet(platform: str) -> str:
    return PLATFORMS[platform][1]


def target_site_packages(spec: ImageSpec) -> str:
    return f"{VENV}/lib/python{spec.python}/site-packages"


def devel_packages(spec: ImageSpec, native: tuple[str, ...]) -> tuple[str, ...]:
    """The devel stage's packages: the build machine's tools (``native`` less the ops' build
    libraries, which must be the target's), the target's Python headers and the ops' libraries
    for the target (``libaio-dev:arm64``)."""
    arch = debian_arch(spec.platform)
    libraries = set(spec.build_packages())
    tools = [p for p in native if p not in libraries]
    target = [f"libpython{spec.python}-dev:{arch}", *(f"{p}:{arch}" for p in sorted(libraries))]
    return (*tools, *target)


def multiarch_error(spec: ImageSpec) -> str:
    """What the devel stage says when its apt sources serve none of the target's packages (a line
    in a double-quoted shell word: no quote, backslash or ``$``)."""
    arch = debian_arch(spec.platform)
    return (
        f"imagegen: error: a cross build for {spec.platform} installs the target's Python headers and "
        f"libraries through apt (multiarch: NAME:{arch}), and this base's apt sources serve no {arch} "
        f"packages. Debian serves every architecture from one archive; Ubuntu serves {arch} from its "
        f"ports archive, which the base must list for {arch} ([arch={arch}] in its sources). Or build "
        f"every stage for {spec.platform}: --build-platform {spec.platform} (under emulation here)"
    )


def build_environment(spec: ImageSpec) -> tuple[str, ...]:
    """What the build stage exports on top of the native build's: the target and its torch."""
    return (
        f"{op_settings.TARGET_PLATFORM.name}={spec.platform}",
        f"{op_settings.TARGET_SITE_PACKAGES.name}={target_site_packages(spec)}",
    )


def torch_build_check_prelude(spec: ImageSpec) -> str:
    """A ``python -c`` start binding ``v`` to torch's version module, read from the target's files
    and never imported (it is another platform's)."""
    path = f"{target_site_packages(spec)}/torch/version.py"
    return f'import runpy, sys, types; v = types.SimpleNamespace(**runpy.run_path("{path}")); '


def context(spec: ImageSpec) -> dict[str, object]:
    """The template's cross-build values; a native build reads only how the venv's pruning step
    names its Python, pip and strip (the build's own, there)."""
    if not spec.cross:
        return {"venv_python": "python", "venv_pip": "pip", "strip": "strip"}
    machine = PLATFORMS[spec.platform][0]
    return {
        "check_ops_arg": CHECK_OPS_ARG,
        "build_platform": spec.build_platform,
        "deb_arch": debian_arch(spec.platform),
        "triplet": triplet(spec.platform),
        "cross_compiler_packages": _CROSS_COMPILER[spec.platform],
        "multiarch_error": multiarch_error(spec),
        "uv_platform": f"{machine}-{MANYLINUX}",
        "uv_requirement": UV_REQUIREMENT,
        "packaging_requirement": catalog.PACKAGING_REQUIREMENT,
        "build_torch_requirement": spec.build_torch_requirement,
        "venv_python": VENV_PYTHON,
        "venv_pip": f"{VENV_PYTHON} -m pip",
        "strip": f"{triplet(spec.platform)}-strip",
    }


def build_torch_source(spec: ImageSpec, pip_sources: str) -> str:
    """``pip_sources`` (the wheelhouse and offline flags) with the build torch's index, if any."""
    index = spec.build_torch_index
    return pip_sources + (f"--index-url {shlex.quote(index)} " if index is not None else "")
