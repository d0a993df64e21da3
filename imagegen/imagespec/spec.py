"""ImageSpec: every choice about one image, resolved and validated once from the CLI flags.

Precedence, for every setting: command-line flag > ``IMAGEGEN_*`` environment variable > the
options table's default > the catalog's default (the first three by ``imagegen.options.resolve``,
once per command; the catalog's here, where the target is known). ``build_spec`` is a pure
function of what the cascade found (``SpecInput``, drawn from the table's rows); each problem
raises one ``BadInputError`` with a hint, so the CLI exits 2 with a clear message before
anything is rendered or built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from packaging.version import Version

from imagegen import options
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog, checks, given_values, inputs
from imagegen.imagespec import compile_cache as compile_cache_lib
from imagegen.imagespec import stable_headers as stable_headers_rule
from imagegen.imagespec.catalog import Accelerator
from imagegen.imagespec.checks import BYTECODE_MODES as BYTECODE_MODES
from imagegen.imagespec.checks import BYTECODE_TAG_SUFFIX as BYTECODE_TAG_SUFFIX
from imagegen.imagespec.checks import DEFAULT_BYTECODE
from imagegen.imagespec.compile_cache import CompileCache
from imagegen.imagespec.op_packages import OpPackage, resolve_packages
from imagegen.imagespec.reference import check_reference
from imagegen.imagespec.spec_input import SpecInput as SpecInput
from imagegen.imagespec.spec_input import spec_input as spec_input
from imagegen.urls import Secret, redact
from op_builder.registry import Registry, registry_for

# torch up to 2.2 is built against NumPy 1.x and cannot load NumPy 2's C API; 2.3 gained NumPy 2
# support late in its release branch (pytorch/builder#1770). Up to 2.3, NumPy 1.x is kept:
# it works with every one of them. From 2.4 on, the newest NumPy for the image's Python.
NUMPY2_SINCE_TORCH = (2, 4)
NUMPY_LOWEST = "1.22"  # a floor, as the build tools have; pip picks the newest the image's Python takes
# What --no-numpy adds to the default tag, so the two images never share one.
NO_NUMPY_TAG_SUFFIX = "-nonumpy"


@dataclass(frozen=True)
class ImageSpec:
    """One image, fully decided. Render, build and report read only this."""

    accelerator: Accelerator
    target: str  # "cpu", "cuda12.1", "rocm6.2"
    toolkit_version: str | None  # "12.1" / "6.2"; None for the CPU
    ops: tuple[str, ...]  # registry order, so the same set always renders the same text
    python: str
    torch: str  # "2.5.1"
    torch_variant: str  # "cu121", "rocm6.2.4", "cpu"
    cuda_archs: tuple[str, ...]
    rocm_archs: tuple[str, ...]
    op_archs: tuple[tuple[str, tuple[str, ...]], ...]  # per GPU op: its own filtered list
    distro: str
    base_devel: str
    base_runtime: str
    # None: no torch index (wheelhouse and the default index only). A user and password in it
    # show as *** (imagegen.urls.redact): this is the URL the Dockerfile and the proof name.
    torch_index: str | None
    wheelhouse: Path | None
    offline: bool
    ca_cert: Path | None
    keep_ca_cert: bool
    tag: str
    max_jobs: int | None
    buildkit: bool
    bytecode: str = DEFAULT_BYTECODE  # one of BYTECODE_MODES: which .pyc files the runtime venv keeps
    warnings: tuple[str, ...] = field(default=())
    op_packages: tuple[OpPackage, ...] = ()  # the op packages whose ops the image holds
    platform: str = catalog.DEFAULT_PLATFORM  # the OCI platform the image is built for
    # The platform of the machine that builds: the devel and build stages run on it, natively.
    build_platform: str = catalog.DEFAULT_PLATFORM
    # A cross build's wheels for the build platform (its own CPU torch); None: none but the index's.
    build_wheelhouse: Path | None = None
    numpy: bool = True  # NumPy in the runtime venv, from torch's sources
    # The torch release ("2.15.0") whose headers the stable ops compile against, staged into the
    # build context; None: the image's own torch's (or no stable op).
    stable_headers: str | None = None
    # sccache's cache for the build stage's compilers; None: ccache in a BuildKit cache mount.
    compile_cache: CompileCache | None = None
    # The torch index's whole URL when it has credentials: the build secret ``torch-index``,
    # never rendered or sealed. Not compared: the password is no part of what the image is.
    torch_index_secret: Secret | None = field(default=None, compare=False, repr=False)

    @property
    def numpy_requirement(self) -> str | None:
        """What pip installs next to torch (a lower bound, as for the build tools: pip picks the newest)."""
        if not self.numpy:
            return None
        if Version(self.torch).release[:2] < NUMPY2_SINCE_TORCH:
            return f"numpy>={NUMPY_LOWEST},<2"
        return f"numpy>={NUMPY_LOWEST}"

    @property
    def cross(self) -> bool:
        """The ops are cross-compiled: BuildKit runs the devel and build stages on the build
        platform and only the runtime stage on the image's (classic builds run every stage there)."""
        return self.buildkit and self.platform != self.build_platform

    @property
    def wheelhouses(self) -> tuple[Path, ...]:
        """The folders staged as the build's one wheelhouse: the image's, and a cross build's
        wheels for the build platform (wheel names carry their platform, so they never clash)."""
        found = [self.wheelhouse, self.build_wheelhouse if self.cross else None]
        return tuple(dict.fromkeys(w for w in found if w is not None))

    @property
    def build_torch_requirement(self) -> str:
        """A cross build's own torch: the build platform's CPU build of the catalog's CPU default,
        which only runs torch's extension builder (the ops compile against the target's torch)."""
        version = catalog.CPU_TARGET.default_torch_for(self.build_platform)
        label = catalog.torch_local_label("cpu", self.build_platform)
        return f"torch=={version}+{label}" if label else f"torch=={version}"

    @property
    def build_torch_index(self) -> str | None:
        """Where the build platform's torch comes from: the catalog's CPU index, unless a wheelhouse
        replaces it (as for the image's torch) or the build is offline."""
        if self.offline or self.wheelhouses:
            return None
        return catalog.torch_index("cpu")

    @property
    def registry(self) -> Registry:
        """Our ops and those of the spec's op packages."""
        return registry_for(tuple(p.root for p in self.op_packages))

    @property
    def external_ops(self) -> tuple[str, ...]:
        return tuple(op for package in self.op_packages for op in package.ops if op in self.ops)

    @property
    def torch_from_catalog_index(self) -> bool:
        """True when torch comes from the catalog's wheel index, whose wheels carry the local label."""
        return self.torch_index == catalog.torch_index(self.torch_variant)

    @property
    def torch_release(self) -> str:
        """``2.5.1+cu121`` from the catalog's index; ``2.5.1`` from any other source.

        Other sources (PyPI, a mirror, a wheelhouse) may publish the build without the local
        label, as PyPI does for its CUDA wheels, and so does the catalog's CPU index for arm64
        (``catalog.torch_local_label``). The devel stage checks which build pip installed
        instead (``render.torch_build_check``).
        """
        label = catalog.torch_local_label(self.torch_variant, self.platform)
        if self.torch_from_catalog_index and label is not None:
            return f"{self.torch}+{label}"
        return self.torch

    @property
    def torch_requirement(self) -> str:
        """Pinned with the local label where the index has it, so pip cannot pick another build."""
        return f"torch=={self.torch_release}"

    @property
    def archs(self) -> tuple[str, ...]:
        return self.cuda_archs if self.accelerator == "cuda" else self.rocm_archs

    @property
    def stable_modules(self) -> bool:
        """Some op gets a module built for torch's stable ABI (op_builder.stable_abi decides as here)."""
        return stable_headers_rule.stable_ops(
            self.accelerator, self.platform, self.torch, self.ops, self.registry
        )

    @property
    def build_variables(self) -> tuple[str, ...]:
        return tuple(self.registry.ops[name].build_variable for name in self.ops)

    def runtime_packages(self) -> tuple[str, ...]:
        """Debian packages the selected ops need at run time, named for this distro, sorted."""
        names = {
            catalog.runtime_package(pkg, self.distro)
            for op in self.ops
            for pkg in self.registry.ops[op].all_runtime_packages()
        }
        return tuple(sorted(names))

    def build_packages(self) -> tuple[str, ...]:
        return tuple(sorted({pkg for op in self.ops for pkg in self.registry.ops[op].build_packages()}))


def content_hash(ops: tuple[str, ...], archs: tuple[str, ...], packages: tuple[OpPackage, ...] = ()) -> str:
    """Eight hex digits naming the op set, arch list and op packages' sources (part of the default tag)."""
    text = ",".join(ops) + "|" + ";".join(archs)
    if packages:  # appended only when present: images without packages keep their tags
        text += "|" + ",".join(p.reference for p in packages)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _used_packages(
    packages: tuple[OpPackage, ...], names: tuple[str, ...], warnings: list[str]
) -> tuple[OpPackage, ...]:
    """The packages with at least one selected op: only those are staged and built."""
    used = []
    for package in packages:
        if any(op in names for op in package.ops):
            used.append(package)
        else:
            warnings.append(
                f"op package {package.root}: none of its ops ({', '.join(package.ops)}) is selected"
            )
    return tuple(used)


# The modules whose functions the options table names as checks (its rows' ``check``).
CHECK_MODULES: Mapping[str, ModuleType] = {
    "inputs": inputs,
    "checks": checks,
    "compile_cache": compile_cache_lib,
    "stable_headers": stable_headers_rule,
}


def option_check(name: str) -> Callable[[Any], Any]:
    """The function a row's ``check`` names ("inputs.max_jobs")."""
    module, _, function = name.partition(".")
    found: Callable[[Any], Any] = getattr(CHECK_MODULES[module], function)
    return found


def checked_values(inp: SpecInput) -> dict[str, Any]:
    """Every option of ``inp``, each value its row's check took (a value given or defaulted;
    None, no value, is left for build_spec's rules). Raises BadInputError."""
    values: dict[str, Any] = {}
    for name, value in inp.items():
        option = options.BY_NAME[name]
        if option.check and value is not None:
            value = option_check(option.check)(value)
        values[name] = value
    return values


def build_spec(inp: SpecInput) -> ImageSpec:
    """Resolve and validate ``inp`` against the catalog. Raises BadInputError.

    ``inp`` holds what the cascade found (``options.resolve``: flag > ``IMAGEGEN_*`` > the row's
    default), once per command. Each option's own check runs first (``checked_values``), then the
    rules that join several options, and what is still unset takes the catalog's default here,
    where the target is known.
    """
    given_values.versions(inp)  # before anything parses one
    values = checked_values(inp)
    target = checks.target(inp.cuda, inp.rocm, inp.cpu)
    platform = checks.platform(values["platform"], target)
    standins = inp.standins
    standin_bases = checks.standins(target, platform) if standins else None
    distro = checks.distro(inp.distro, target, standins)
    base_devel = inp.base_devel
    base_runtime = inp.base_runtime
    python = checks.python(inp.python, target, distro, standins, base_devel, base_runtime)
    given_index: str | None = values["torch_index"]
    # Shown, rendered and sealed with its userinfo as *** (the whole URL goes as a build secret).
    torch_index_flag = None if given_index is None else redact(given_index)
    warnings: list[str] = []
    torch, variant = checks.torch(inp.torch, target, python, torch_index_flag, warnings, platform)
    registry, packages = resolve_packages(values["op_sources"])
    names, from_all = checks.ops(inp.ops, target, registry)
    checks.system_packages(names, registry)
    cuda_archs, rocm_archs = checks.archs(inp.arch, target, platform)
    names, op_archs = checks.per_op_archs(
        names, cuda_archs, registry, explicit=not from_all, warnings=warnings
    )
    packages = _used_packages(packages, names, warnings)
    buildkit = inp.buildkit
    # The builder's platform, when not named, is the one images are built for when none is named.
    build_platform: str = values["build_platform"] or options.default("platform")
    given_values.build_platform(inp.build_platform, build_platform, platform, buildkit)
    if standin_bases is not None:
        standin_devel, standin_runtime = standin_bases
        if buildkit and build_platform != platform:
            # A cross build's devel stage runs on the build platform: that platform's stand-in (the
            # image store holds one platform per tag; a registry's base serves both under one tag).
            standin_devel = checks.standins(target, build_platform)[0]
        base_devel = base_devel or standin_devel
        base_runtime = base_runtime or standin_runtime
    base_devel = base_devel or target.base_devel(distro, python)
    base_runtime = base_runtime or target.base_runtime(distro, python)
    for what, ref in (("--base-devel", base_devel), ("--base-runtime", base_runtime)):
        check_reference(what, ref)  # a digest pins a base: allowed

    wheelhouse: Path | None = values["wheelhouse"]
    build_wheelhouse: Path | None = values["build_wheelhouse"] or wheelhouse
    offline = inp.offline
    if offline and wheelhouse is None:
        raise BadInputError(
            "--offline needs --wheelhouse: with no index, every wheel must come from it",
            hint="fill one with `pip download --dest DIR torch==VERSION setuptools wheel ninja packaging`",
        )
    # A wheelhouse replaces the torch index (it is for when that index cannot be reached);
    # an explicit --torch-index is still honoured next to it.
    torch_index = torch_index_flag or (None if wheelhouse is not None else catalog.torch_index(variant))
    if offline:
        torch_index = None
    ca_cert: Path | None = values["ca_cert"]
    if inp.keep_ca_cert and ca_cert is None:
        raise BadInputError("--keep-ca-cert needs --ca-cert FILE", hint="name the CA bundle to keep")
    bytecode: str = values["bytecode"]
    stable_headers = stable_headers_rule.pinned(
        values["stable_headers"], target, platform, torch, names, registry, offline
    )
    numpy = inp.numpy
    compile_cache = _compile_cache(values["compile_cache"], buildkit)
    index_secret = inputs.index_secret(given_index if torch_index is not None else None, buildkit)
    archs = cuda_archs if target.accelerator == "cuda" else rocm_archs
    tag = inp.tag or (
        f"imagegen:{target.name}{catalog.platform_tag_suffix(platform)}-torch{torch}-py{python}-"
        f"{content_hash(names, archs, packages)}{BYTECODE_TAG_SUFFIX[bytecode]}"
        f"{'' if numpy else NO_NUMPY_TAG_SUFFIX}"
    )
    check_reference("--tag", tag, allow_digest=False)
    return ImageSpec(
        accelerator=target.accelerator,
        target=target.name,
        toolkit_version=target.version,
        ops=names,
        python=python,
        torch=torch,
        torch_variant=variant,
        cuda_archs=cuda_archs,
        rocm_archs=rocm_archs,
        op_archs=op_archs,
        distro=distro,
        base_devel=base_devel,
        base_runtime=base_runtime,
        torch_index=torch_index,
        wheelhouse=wheelhouse,
        offline=offline,
        ca_cert=ca_cert,
        keep_ca_cert=inp.keep_ca_cert,
        tag=tag,
        max_jobs=values["max_jobs"],
        buildkit=buildkit,
        bytecode=bytecode,
        warnings=tuple(warnings),
        op_packages=packages,
        platform=platform,
        build_platform=build_platform,
        build_wheelhouse=build_wheelhouse if build_platform != platform else None,
        numpy=numpy,
        stable_headers=stable_headers,
        compile_cache=compile_cache,
        torch_index_secret=index_secret,
    )


def _compile_cache(cache: CompileCache | None, buildkit: bool) -> CompileCache | None:
    """The compile cache asked for (its row's check parsed it); it needs BuildKit (its secrets
    and cache mounts)."""
    if cache is None:
        return None
    if not buildkit:
        raise BadInputError(
            "--compile-cache needs BuildKit: the classic builder has no build secrets or cache mounts",
            hint="drop --no-buildkit (or IMAGEGEN_BUILDKIT=0), or build without --compile-cache",
        )
    return cache
