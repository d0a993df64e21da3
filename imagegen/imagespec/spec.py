"""ImageSpec: every choice about one image, resolved and validated once from the CLI flags.

Precedence, for every setting: command-line flag > ``IMAGEGEN_*`` environment variable >
catalog default (the first two by ``imagegen.options.resolve``, the catalog's here).
``build_spec`` is a pure function of the raw flags and an environment mapping; each problem
raises one ``BadInputError`` with a hint, so the CLI exits 2 with a clear message before
anything is rendered or built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from imagegen import options
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog, checks, given_values, inputs
from imagegen.imagespec import compile_cache as compile_cache_lib
from imagegen.imagespec.catalog import Accelerator
from imagegen.imagespec.checks import BYTECODE_MODES as BYTECODE_MODES
from imagegen.imagespec.checks import BYTECODE_TAG_SUFFIX as BYTECODE_TAG_SUFFIX
from imagegen.imagespec.checks import DEFAULT_BYTECODE
from imagegen.imagespec.compile_cache import CompileCache
from imagegen.imagespec.op_packages import OpPackage, resolve_packages
from imagegen.imagespec.reference import check_reference
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
class SpecInput:
    """The raw flags as typed; None means 'not given' (so the environment may fill it)."""

    ops: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    cpu: bool = False
    python: str | None = None
    torch: str | None = None
    arch: str | None = None
    distro: str | None = None
    base_devel: str | None = None
    base_runtime: str | None = None
    torch_index: str | None = None
    wheelhouse: str | None = None
    offline: bool | None = None
    ca_cert: str | None = None
    keep_ca_cert: bool = False
    tag: str | None = None
    max_jobs: int | str | None = None  # a variable's text until inputs.max_jobs checks it
    buildkit: bool | None = None
    standins: bool | None = None
    bytecode: str | None = None
    numpy: bool | None = None  # --numpy/--no-numpy
    op_sources: tuple[str, ...] = ()  # op package folders (--op-source, repeatable)
    platform: str | None = None  # "linux/amd64" / "linux/arm64"
    build_platform: str | None = None  # the builder's platform; another than platform cross-compiles
    build_wheelhouse: str | None = None  # a cross build's wheels for the build platform (its torch)
    compile_cache: str | None = None  # --compile-cache: local, redis://, s3://, gcs://


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


def op_source_dirs(flag: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The op package folders: the flags, else ``IMAGEGEN_OP_SOURCES`` (separated by ':')."""
    given = options.BY_NAME["op_sources"]
    return tuple(flag) if flag else tuple(given.from_env(env) or ())


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


def build_spec(inp: SpecInput, env: Mapping[str, str]) -> ImageSpec:
    """Resolve and validate ``inp`` against ``env`` and the catalog. Raises BadInputError.

    The cascade is ``imagegen.options.resolve``'s, once for every option (flag > ``IMAGEGEN_*``);
    what is still unset then takes the catalog's default here, where the target is known.
    """
    inp = options.resolve(inp, env)
    given_values.versions(inp)  # before anything parses one
    target = checks.target(inp.cuda, inp.rocm, inp.cpu)
    platform = checks.platform(inp.platform, target)
    standins = bool(inp.standins)
    standin_bases = checks.standins(target, platform) if standins else None
    distro = checks.distro(inp.distro, target, standins)
    base_devel = inp.base_devel
    base_runtime = inp.base_runtime
    python = checks.python(inp.python, target, distro, standins, base_devel, base_runtime)
    given_index = inputs.index_url(inp.torch_index)
    # Shown, rendered and sealed with its userinfo as *** (the whole URL goes as a build secret).
    torch_index_flag = None if given_index is None else redact(given_index)
    warnings: list[str] = []
    torch, variant = checks.torch(inp.torch, target, python, torch_index_flag, warnings, platform)
    source_dirs = inp.op_sources
    inputs.op_source_paths(source_dirs)
    registry, packages = resolve_packages(source_dirs)
    names, from_all = checks.ops(inp.ops, target, registry)
    checks.system_packages(names, registry)
    cuda_archs, rocm_archs = checks.archs(inp.arch, target, platform)
    names, op_archs = checks.per_op_archs(
        names, cuda_archs, registry, explicit=not from_all, warnings=warnings
    )
    packages = _used_packages(packages, names, warnings)
    build_platform = (
        catalog.DEFAULT_PLATFORM
        if inp.build_platform is None
        else checks.platform_name(inp.build_platform, "--build-platform")
    )
    buildkit = True if inp.buildkit is None else inp.buildkit
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

    wheelhouse = inputs.existing_dir(inp.wheelhouse)
    build_wheelhouse = inputs.existing_dir(inp.build_wheelhouse) or wheelhouse
    offline = bool(inp.offline)
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
    ca_cert = inputs.existing_file(inp.ca_cert)
    if inp.keep_ca_cert and ca_cert is None:
        raise BadInputError("--keep-ca-cert needs --ca-cert FILE", hint="name the CA bundle to keep")
    max_jobs = inputs.max_jobs(inp.max_jobs)
    bytecode = checks.bytecode(inp.bytecode)
    numpy = True if inp.numpy is None else inp.numpy
    compile_cache = _compile_cache(inp.compile_cache, buildkit)
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
        max_jobs=max_jobs,
        buildkit=buildkit,
        bytecode=bytecode,
        warnings=tuple(warnings),
        op_packages=packages,
        platform=platform,
        build_platform=build_platform,
        build_wheelhouse=build_wheelhouse if build_platform != platform else None,
        numpy=numpy,
        compile_cache=compile_cache,
        torch_index_secret=index_secret,
    )


def _compile_cache(value: str | None, buildkit: bool) -> CompileCache | None:
    """The compile cache asked for; it needs BuildKit (its secrets and cache mounts)."""
    if not value:
        return None
    cache = compile_cache_lib.parse(value)
    if not buildkit:
        raise BadInputError(
            "--compile-cache needs BuildKit: the classic builder has no build secrets or cache mounts",
            hint="drop --no-buildkit (or IMAGEGEN_BUILDKIT=0), or build without --compile-cache",
        )
    return cache
