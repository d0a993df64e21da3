"""Cross builds: the ops compiled on one platform for another (linux/arm64 on an amd64 machine).

Device code does not depend on the host CPU, and an op's host C++ is an ordinary cross-compile,
so an arm64 image need not compile under emulation. ``DS_TARGET_PLATFORM`` names the platform
the ops are for; when it is not this machine's, the build is a cross build:

- the host C++ is compiled and linked by ``<triplet>-g++`` (``CXX`` / ``CC`` override it), and
  nvcc gets that compiler as its host compiler (torch's builder passes ``CC`` as ``-ccbin``);
- it compiles against the *target's* torch, installed for the target platform in
  ``DS_TARGET_SITE_PACKAGES`` and never imported: its headers and libraries replace those of
  this machine's torch, which only runs torch's extension builder (Python);
- the modules get the target's file suffix and the wheel the target's platform tag;
- the plan, the report and the manifest name the target platform.

The target's Python headers are the build Python's, which must be the target's minor release:
Debian's ``/usr/include/python3.X/pyconfig.h`` picks the target's multiarch header by the
compiler's own macros (``libpython3.X-dev:arm64``), so the cross compiler reads the target's.
"""

from __future__ import annotations

import os
import platform
import re
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from op_builder import settings
from op_builder.errors import BadInputError
from op_builder.torch_build import TorchBuild

# platform -> (the machine as uname -m says it, the GNU triplet of its toolchain, Debian's name)
PLATFORMS: dict[str, tuple[str, str, str]] = {
    "linux/amd64": ("x86_64", "x86_64-linux-gnu", "amd64"),
    "linux/arm64": ("aarch64", "aarch64-linux-gnu", "arm64"),
}
# Spellings of a platform that are not its OCI name (a common slip; imagegen's hint names the right one).
PLATFORM_ALIASES = {
    "amd64": "linux/amd64",
    "x86_64": "linux/amd64",
    "linux/x86_64": "linux/amd64",
    "arm64": "linux/arm64",
    "aarch64": "linux/arm64",
    "linux/aarch64": "linux/arm64",
    "linux/arm64/v8": "linux/arm64",
}


def platform_of_machine(machine: str) -> str | None:
    """``aarch64`` -> ``linux/arm64``; None for a machine no target is built for."""
    return next((name for name, (m, _, _) in PLATFORMS.items() if m == machine), None)


def native_platform() -> str:
    """This machine's platform (``linux/amd64``), or its ``uname -m`` when no target matches it."""
    machine = platform.machine()
    return platform_of_machine(machine) or f"linux/{machine}"


def normalize_platform(text: str) -> str:
    """``arm64``, ``aarch64``, ``linux/arm64/v8`` -> ``linux/arm64``; BadInputError for others."""
    value = text.strip().lower()
    value = PLATFORM_ALIASES.get(value, value)
    if value not in PLATFORMS:
        raise BadInputError(
            f"{settings.TARGET_PLATFORM.name}={text!r} is not a platform ops are built for",
            hint="use " + " or ".join(PLATFORMS),
        )
    return value


@dataclass(frozen=True)
class CrossTarget:
    """A build for ``platform`` on ``build_platform``, against the target's torch in ``site_packages``."""

    platform: str
    build_platform: str
    site_packages: Path
    torch: TorchBuild
    cxx: str  # the cross C++ compiler, as the environment names it
    cc: str

    @property
    def machine(self) -> str:
        return PLATFORMS[self.platform][0]

    @property
    def triplet(self) -> str:
        return PLATFORMS[self.platform][1]

    @property
    def debian_arch(self) -> str:
        """Debian's name of the target's architecture: its packages are ``NAME:arm64`` (multiarch)."""
        return PLATFORMS[self.platform][2]

    @property
    def torch_dir(self) -> Path:
        return self.site_packages / "torch"

    def ext_suffix(self, native_suffix: str | None = None) -> str:
        """The target's module suffix: ``.cpython-311-x86_64-linux-gnu.so`` -> ``...-aarch64-linux-gnu.so``.

        CPython names the suffix after its multiarch triplet; the target's interpreter imports
        only its own (besides ``.abi3.so`` and ``.so``).
        """
        suffix = native_suffix if native_suffix is not None else str(sysconfig.get_config_var("EXT_SUFFIX"))
        native = PLATFORMS.get(self.build_platform, ("", "", ""))[1]
        if native and f"-{native}." in suffix:
            return suffix.replace(f"-{native}.", f"-{self.triplet}.")
        return suffix

    @property
    def wheel_platform(self) -> str:
        """What the wheel's platform tag is made from (``_PYTHON_HOST_PLATFORM``): ``linux-aarch64``."""
        return f"linux-{self.machine}"

    def rebase(self, path: str, native_torch_dir: str) -> str:
        """A path inside this machine's torch -> the same path inside the target's."""
        native = os.path.normpath(native_torch_dir)
        normalized = os.path.normpath(path)
        if normalized == native or normalized.startswith(native + os.sep):
            return str(self.torch_dir / os.path.relpath(normalized, native))
        return path

    def compiler_environment(self) -> dict[str, str]:
        """What the build process sets before setuptools reads it: the cross compilers (setuptools
        compiles with ``CC``/``CXX`` and links C++ with ``CXX``; torch hands ``CC`` to nvcc as
        ``-ccbin``), the linker, and the wheel's platform."""
        return {
            "CC": self.cc,
            "CXX": self.cxx,
            "LDSHARED": f"{self.cxx} -shared",
            "LDCXXSHARED": f"{self.cxx} -shared",
            "_PYTHON_HOST_PLATFORM": self.wheel_platform,
        }

    def describe(self) -> str:
        against = f"{self.cxx}, torch {self.torch.version}"
        return f"cross build on {self.build_platform} for {self.platform} ({against})"


_VERSION_LINE = re.compile(
    r"^(__version__|cuda|hip)\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)\s*$", re.M
)


def read_torch_build(site_packages: Path) -> TorchBuild | None:
    """The torch installed in ``site_packages`` (for another platform: read, never imported), from
    its ``torch/version.py``; None when there is none."""
    try:
        text = (site_packages / "torch" / "version.py").read_text()
    except OSError:
        return None
    values: dict[str, str | None] = {}
    for match in _VERSION_LINE.finditer(text):
        values[match[1]] = match[2] if match[2] is not None else match[3]
    version = values.get("__version__")
    if not version:
        return None
    return TorchBuild(version=version, cuda=values.get("cuda"), hip=values.get("hip"))


def resolve_cross(env: Mapping[str, str], native: str | None = None) -> CrossTarget | None:
    """The cross target ``env`` asks for; None for a native build (unset, or this machine's platform).

    BadInputError for an unknown platform, and for a cross build without the target's torch.
    """
    text = env.get(settings.TARGET_PLATFORM.name, "").strip()
    if not text:
        return None
    target = normalize_platform(text)
    build = native if native is not None else native_platform()
    if target == build:
        return None
    site_text = env.get(settings.TARGET_SITE_PACKAGES.name, "").strip()
    if not site_text:
        raise BadInputError(
            f"{settings.TARGET_PLATFORM.name}={target} cross-compiles on {build}, and "
            f"{settings.TARGET_SITE_PACKAGES.name} is unset",
            hint=f"install the target's torch for {target} into a folder (pip install --target DIR "
            f"--platform ..., or uv pip install --python-platform ...) and name it in "
            f"{settings.TARGET_SITE_PACKAGES.name}",
        )
    site = Path(site_text)
    torch = read_torch_build(site)
    if torch is None:
        raise BadInputError(
            f"{settings.TARGET_SITE_PACKAGES.name}={site_text} holds no torch (no torch/version.py)",
            hint=f"install torch for {target} there",
        )
    triplet = PLATFORMS[target][1]
    return CrossTarget(
        platform=target,
        build_platform=build,
        site_packages=site,
        torch=torch,
        cxx=env.get(settings.CXX.name, "").strip() or f"{triplet}-g++",
        cc=env.get(settings.CC.name, "").strip() or f"{triplet}-gcc",
    )


def target_cuda_library_dirs(site_packages: Path) -> list[str]:
    """The target's CUDA runtime libraries: those of the ``nvidia-*`` wheels its torch depends on
    (``nvidia/cu13/lib`` from CUDA 13, ``nvidia/cuda_runtime/lib`` before), holding ``libcudart``."""
    return sorted({str(path.parent) for path in (site_packages / "nvidia").glob("*/lib/libcudart.so*")})


def linkable(name: str, folders: list[str]) -> str:
    """``-l`` form of library ``name`` in ``folders``: ``name`` where ``libNAME.so`` is there, else
    ``:libNAME.so.N`` (the wheels ship only the versioned file, which ``-lNAME`` does not find)."""
    for folder in folders:
        if Path(folder, f"lib{name}.so").exists():
            return name
        versioned = sorted(Path(folder).glob(f"lib{name}.so.*"))
        if versioned:
            return ":" + versioned[0].name
    return name


def retarget_extension(extension: Any, cross: CrossTarget, cuda_home: str | None = None) -> Any:
    """A setuptools extension made by torch's builder here, pointed at the target's torch: every
    include and library folder inside this machine's torch becomes the same folder in the target's.

    A CUDA extension (``cuda_home``: the toolkit that compiles it) links the target's CUDA runtime
    instead of the toolkit's, which is this machine's; its headers stay (they are the same on every
    platform), and nvcc reads them from this machine's target folder (``-target-dir``): given an
    aarch64 host compiler it would look in ``targets/aarch64-linux``, which an x86-64 toolkit lacks.
    """
    import torch  # deferred: only a build imports torch, and this machine's is the one that runs

    native = os.path.dirname(torch.__file__)
    extension.include_dirs = [cross.rebase(p, native) for p in extension.include_dirs]
    library_dirs = [cross.rebase(p, native) for p in extension.library_dirs]
    if cuda_home is not None:
        home = os.path.normpath(cuda_home)
        library_dirs = [p for p in library_dirs if not os.path.normpath(p).startswith(home + os.sep)]
        library_dirs += target_cuda_library_dirs(cross.site_packages)
        extension.libraries = [linkable(name, library_dirs) for name in extension.libraries]
        build_dir = PLATFORMS[cross.build_platform][0] + "-linux"
        if isinstance(extension.extra_compile_args, dict) and Path(home, "targets", build_dir).is_dir():
            extension.extra_compile_args["nvcc"] = [
                *extension.extra_compile_args["nvcc"],
                "-target-dir",
                build_dir,
            ]
    extension.library_dirs = library_dirs
    return extension
