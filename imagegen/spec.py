"""ImageSpec: every choice about one image, resolved and validated once from the CLI flags.

Precedence, for every setting: command-line flag > ``IMAGEGEN_*`` environment variable >
catalog default. ``build_spec`` is a pure function of the raw flags and an environment
mapping; each problem raises one ``BadInputError`` with a hint, so the CLI exits 2 with a
clear message before anything is rendered or built.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagegen import catalog
from imagegen.catalog import Accelerator, Target
from imagegen.errors import BadInputError
from op_builder import ALL_OPS, CUDAOpBuilder
from op_builder import archs as arch_lib
from op_builder.plan import env_flag
from op_builder.suggest import did_you_mean

# Environment variables read as the middle layer of the cascade.
ENV_PREFIX = "IMAGEGEN_"

# Docker image reference: lower-case path components, optional registry port, optional tag.
_REFERENCE_RE = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
)
_VERSION_RE = re.compile(r"^\d+\.\d+$")

# Which compiled bytecode (.pyc) the runtime venv keeps, and the suffix each adds to the
# default tag. "startup": only what a process imports to start torch and load the image's ops.
BYTECODE_TAG_SUFFIX = {"startup": "", "all": "-allbytecode", "none": "-nobytecode"}
BYTECODE_MODES = tuple(BYTECODE_TAG_SUFFIX)
DEFAULT_BYTECODE = "startup"


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
    max_jobs: int | None = None
    buildkit: bool | None = None
    push: bool = False
    verify: bool = True
    standins: bool | None = None
    bytecode: str | None = None


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
    torch_index: str | None  # None: no torch index (wheelhouse and the default index only)
    wheelhouse: Path | None
    offline: bool
    ca_cert: Path | None
    keep_ca_cert: bool
    tag: str
    max_jobs: int | None
    buildkit: bool
    push: bool
    bytecode: str = DEFAULT_BYTECODE  # one of BYTECODE_MODES: which .pyc files the runtime venv keeps
    warnings: tuple[str, ...] = field(default=())

    @property
    def torch_from_catalog_index(self) -> bool:
        """True when torch comes from the catalog's wheel index, whose wheels carry the local label."""
        return self.torch_index == catalog.torch_index(self.torch_variant)

    @property
    def torch_release(self) -> str:
        """``2.5.1+cu121`` from the catalog's index; ``2.5.1`` from any other source.

        Other sources (PyPI, a mirror, a wheelhouse) may publish the build without the local
        label, as PyPI does for its CUDA wheels. The devel stage checks which build pip
        installed instead (``render.torch_build_check``).
        """
        if self.torch_from_catalog_index:
            return f"{self.torch}+{self.torch_variant}"
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
        return tuple(ALL_OPS[name].build_variable for name in self.ops)

    def runtime_packages(self) -> tuple[str, ...]:
        """Debian packages the selected ops need at run time, named for this distro, sorted."""
        names = {
            catalog.runtime_package(pkg, self.distro)
            for op in self.ops
            for pkg in ALL_OPS[op].all_runtime_packages()
        }
        return tuple(sorted(names))

    def build_packages(self) -> tuple[str, ...]:
        return tuple(sorted({pkg for op in self.ops for pkg in ALL_OPS[op].build_packages()}))


def content_hash(ops: tuple[str, ...], archs: tuple[str, ...]) -> str:
    """Eight hex digits naming the op set and arch list (part of the default tag)."""
    text = ",".join(ops) + "|" + ";".join(archs)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


# ------------------------------------------------------------------ the cascade


def _pick(flag: str | None, env: Mapping[str, str], name: str) -> str | None:
    if flag is not None:
        return flag
    value = env.get(ENV_PREFIX + name, "").strip()
    return value or None


def _pick_bool(flag: bool | None, env: Mapping[str, str], name: str, default: bool) -> bool:
    if flag is not None:
        return flag
    value = env_flag(env, ENV_PREFIX + name)  # the same spellings as op_builder's DS_* switches
    return default if value is None else value


def build_spec(inp: SpecInput, env: Mapping[str, str]) -> ImageSpec:
    """Resolve and validate ``inp`` against ``env`` and the catalog. Raises BadInputError."""
    target = _target(inp)
    standins = _pick_bool(inp.standins, env, "STANDINS", False)
    if standins and target.name not in catalog.STANDINS:
        raise BadInputError(
            f"stand-in base images exist for --cpu and --cuda 13.0 only, not {target.name}",
            hint="other GPU images need the real nvidia/cuda or rocm/dev bases (pull them, or pass "
            "--base-devel/--base-runtime)",
        )
    distro = _distro(_pick(inp.distro, env, "DISTRO"), target, standins)
    base_devel = _pick(inp.base_devel, env, "BASE_DEVEL")
    base_runtime = _pick(inp.base_runtime, env, "BASE_RUNTIME")
    python = _python(_pick(inp.python, env, "PYTHON"), target, distro, standins, base_devel, base_runtime)
    torch_index_flag = _pick(inp.torch_index, env, "TORCH_INDEX")
    warnings: list[str] = []
    torch, variant = _torch(_pick(inp.torch, env, "TORCH"), target, python, torch_index_flag, warnings)
    names, from_all = _ops(_pick(inp.ops, env, "OPS"), target)
    cuda_archs, rocm_archs = _archs(_pick(inp.arch, env, "ARCH"), target)
    names, op_archs = _per_op_archs(names, cuda_archs, explicit=not from_all, warnings=warnings)
    if standins:
        standin_devel, standin_runtime = catalog.STANDINS[target.name]
        base_devel = base_devel or standin_devel
        base_runtime = base_runtime or standin_runtime
    base_devel = base_devel or target.base_devel(distro, python)
    base_runtime = base_runtime or target.base_runtime(distro, python)
    for what, ref in (("--base-devel", base_devel), ("--base-runtime", base_runtime)):
        _check_reference(what, ref)

    wheelhouse = _existing_dir(_pick(inp.wheelhouse, env, "WHEELHOUSE"))
    offline = _pick_bool(inp.offline, env, "OFFLINE", False)
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
    ca_cert = _existing_file(_pick(inp.ca_cert, env, "CA_CERT"))
    if inp.keep_ca_cert and ca_cert is None:
        raise BadInputError("--keep-ca-cert needs --ca-cert FILE", hint="name the CA bundle to keep")
    max_jobs = _max_jobs(inp.max_jobs, env)
    if inp.push and not inp.verify:
        raise BadInputError(
            "--push with --no-verify: images are pushed only after verification passed",
            hint="drop --no-verify, or push the image yourself",
        )
    bytecode = _bytecode(_pick(inp.bytecode, env, "BYTECODE"))
    archs = cuda_archs if target.accelerator == "cuda" else rocm_archs
    tag = _pick(inp.tag, env, "TAG") or (
        f"imagegen:{target.name}-torch{torch}-py{python}-{content_hash(names, archs)}"
        + BYTECODE_TAG_SUFFIX[bytecode]
    )
    _check_reference("--tag", tag)
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
        buildkit=_pick_bool(inp.buildkit, env, "BUILDKIT", True),
        push=inp.push,
        bytecode=bytecode,
        warnings=tuple(warnings),
    )


# ------------------------------------------------------------------ one check each


def _target(inp: SpecInput) -> Target:
    given = [name for name, on in (("--cuda", inp.cuda), ("--rocm", inp.rocm), ("--cpu", inp.cpu)) if on]
    if not given:
        raise BadInputError("no target given", hint="pick exactly one of --cuda X.Y, --rocm X.Y or --cpu")
    if len(given) > 1:
        raise BadInputError(
            f"two targets at once: {' and '.join(given)}",
            hint="an image has one target; render one image per target (see `imagegen matrix`)",
        )
    if inp.cpu:
        return catalog.CPU_TARGET
    accelerator: Accelerator = "cuda" if inp.cuda else "rocm"
    version = (inp.cuda or inp.rocm or "").strip()
    label = "CUDA" if accelerator == "cuda" else "ROCm"
    supported = ", ".join(catalog.targets(accelerator))
    if not _VERSION_RE.match(version):
        raise BadInputError(
            f"--{accelerator} {version!r} is not a {label} version",
            hint=f"use MAJOR.MINOR; supported: {supported}",
        )
    found = catalog.lookup(accelerator, version)
    if found is None:
        closest = catalog.closest_version(accelerator, version)
        raise BadInputError(
            f"{label} {version} is not supported",
            hint=f"the closest supported version is {closest}; supported: {supported}",
        )
    return found


def _distro(value: str | None, target: Target, standins: bool) -> str:
    if value is None:
        return catalog.STANDIN_DISTRO if standins else target.distros[0]
    if value not in target.distros:
        suggestion = did_you_mean(value, target.distros)
        raise BadInputError(
            f"distro {value!r} is not available for {target.name}",
            hint=(suggestion + " " if suggestion else "") + "available: " + ", ".join(target.distros),
        )
    return value


def _bytecode(value: str | None) -> str:
    if value is None:
        return DEFAULT_BYTECODE
    mode = value.strip().lower()
    if mode not in BYTECODE_MODES:
        suggestion = did_you_mean(mode, BYTECODE_MODES)
        raise BadInputError(
            f"--bytecode {value!r} is not a bytecode mode",
            hint=(suggestion + " " if suggestion else "")
            + "use startup (the default: what torch and the ops import), all, or none",
        )
    return mode


def _python(
    value: str | None,
    target: Target,
    distro: str,
    standins: bool,
    base_devel: str | None,
    base_runtime: str | None,
) -> str:
    default = catalog.STANDIN_PYTHON if standins else target.default_python(distro)
    if value is None:
        return default
    if not _VERSION_RE.match(value):
        raise BadInputError(f"--python {value!r} is not a Python version", hint="use MAJOR.MINOR, e.g. 3.11")
    if base_devel and base_runtime:
        return value  # the user's own bases decide which Python there is
    if standins and value != catalog.STANDIN_PYTHON:
        raise BadInputError(
            f"the stand-in bases have Python {catalog.STANDIN_PYTHON}, not {value}",
            hint=f"drop --python, or pass --python {catalog.STANDIN_PYTHON}",
        )
    if target.accelerator == "cpu":
        if value not in catalog.CPU_PYTHONS:
            raise BadInputError(
                f"Python {value} has no python:{value}-slim image we support",
                hint="supported: " + ", ".join(catalog.CPU_PYTHONS),
            )
        return value
    if value != default:
        others = [d for d, py in catalog.UBUNTU_PYTHON.items() if py == value and d in target.distros]
        hint = f"use --distro {others[0]}" if others else f"drop --python (it is {default} on {distro})"
        raise BadInputError(
            f"{target.name} images use {distro}'s python3, which is {default}, not {value}",
            hint=hint + ", or pass --base-devel and --base-runtime images that ship your Python",
        )
    return value


def _torch(
    value: str | None, target: Target, python: str, custom_index: str | None, warnings: list[str]
) -> tuple[str, str]:
    built = target.torch_versions()
    if value is None:
        torch = target.default_torch
    else:
        resolved = catalog.resolve_torch_release(value)
        if resolved is None:
            raise BadInputError(
                f"torch {value} is not a torch release we know",
                hint=f"torch built for {target.name}: {_span(built)}",
            )
        torch = resolved
    torch_range = target.torch_range(torch)
    if torch_range is None:
        if custom_index is None:
            raise BadInputError(
                f"torch {torch} is not built for {target.name}",
                hint=f"torch built for {target.name}: {_span(built)} "
                "(or pass --torch-index for your own index)",
            )
        # With the user's own index we cannot know what it holds: say so once and go on.
        variant = target.torch[-1].variant
        warnings.append(
            f"torch {torch} is not in the catalog for {target.name}; trusting --torch-index {custom_index}"
        )
    else:
        variant = torch_range.variant
    if not catalog.torch_supports_python(torch, python):
        bounds = catalog.python_range(torch)
        span = f"{bounds[0]} to {bounds[1]}" if bounds else "unknown"
        fits = [t for t in built if catalog.torch_supports_python(t, python)]
        hint = f"torch {torch} supports Python {span}"
        if fits:
            hint += f"; for Python {python} on {target.name} use torch {_span(tuple(fits))}"
        raise BadInputError(f"torch {torch} has no wheels for Python {python}", hint=hint)
    return torch, variant


def _span(versions: tuple[str, ...]) -> str:
    if not versions:
        return "none"
    return f"{versions[0]} to {versions[-1]}" if len(versions) > 2 else ", ".join(versions)


def _ops(value: str | None, target: Target) -> tuple[tuple[str, ...], bool]:
    """The selected ops in registry order, and whether they came from ``all``."""
    fits = tuple(n for n, b in ALL_OPS.items() if target.accelerator != "cpu" or b.target == "cpu")
    if value is None:
        raise BadInputError(
            "no ops given",
            hint="pass --ops A,B or --ops all; ops for " + target.name + ": " + ", ".join(fits),
        )
    tokens = [t.strip() for t in value.split(",") if t.strip()]
    if not tokens:
        raise BadInputError("--ops is empty", hint="for example --ops cpu_adam,cpu_lion, or --ops all")
    if tokens == ["all"]:
        return fits, True
    if "all" in tokens:
        raise BadInputError("--ops all cannot be combined with op names", hint="pass either all or a list")
    for name in tokens:
        if name not in ALL_OPS:
            raise BadInputError(
                f"unknown op {name!r}",
                hint=did_you_mean(name, ALL_OPS) or "known ops: " + ", ".join(ALL_OPS) + " (imagegen ops)",
            )
        if name not in fits:
            raise BadInputError(
                f"{name} is a GPU op and the target is the CPU",
                hint="build it with --cuda X.Y or --rocm X.Y, or drop it; CPU ops: " + ", ".join(fits),
            )
    wanted = set(tokens)
    return tuple(n for n in ALL_OPS if n in wanted), False


def _archs(value: str | None, target: Target) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if target.accelerator == "cpu":
        if value is not None:
            raise BadInputError(
                "--arch applies to --cuda and --rocm images only", hint="drop --arch for --cpu"
            )
        return (), ()
    if target.accelerator == "rocm":
        if value is None:
            return (), catalog.default_rocm_archs()
        return (), arch_lib.parse_rocm_arch_list(value)
    version = target.version or ""
    if value is None:
        return catalog.default_cuda_archs(version), ()
    # No 'native': the build runs in a container, usually on a machine without the GPU.
    parsed = arch_lib.parse_cuda_arch_list(value, native=None)
    arch_lib.validate_for_toolkit(parsed, version)
    return tuple(str(a) for a in parsed), ()


def _per_op_archs(
    names: tuple[str, ...], cuda_archs: tuple[str, ...], explicit: bool, warnings: list[str]
) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Each CUDA op's own arch list (the op_builder rule); ops left with none are an error
    when named, and dropped with a warning when they came in through ``all``."""
    if not cuda_archs:
        return names, ()
    parsed = arch_lib.parse_cuda_arch_list(";".join(cuda_archs))
    kept_names: list[str] = []
    per_op: list[tuple[str, tuple[str, ...]]] = []
    for name in names:
        builder = ALL_OPS[name]
        if not isinstance(builder, CUDAOpBuilder):
            kept_names.append(name)
            continue
        decision = builder.arch_decision(parsed)
        if decision.reason is not None:
            if explicit:
                raise BadInputError(decision.reason, hint=f"add an arch in range to --arch, or drop {name}")
            warnings.append(decision.reason + f", so --ops all leaves {name} out")
            continue
        kept_names.append(name)
        per_op.append((name, tuple(str(a) for a in decision.kept)))
    return tuple(kept_names), tuple(per_op)


def _check_reference(what: str, ref: str) -> None:
    if not _REFERENCE_RE.match(ref):
        raise BadInputError(
            f"{what} {ref!r} is not a valid image reference",
            hint="use [registry/]name[:tag] in lower case, e.g. imagegen:cpu-dev",
        )


def _existing_dir(value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise BadInputError(
            f"wheelhouse {value} is not a directory",
            hint="pass a folder of wheels, e.g. --wheelhouse /opt/wheels (pip download --dest DIR ...)",
        )
    return path.resolve()


def _existing_file(value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise BadInputError(
            f"CA certificate file {value} does not exist",
            hint="pass a PEM bundle, e.g. --ca-cert /etc/ssl/certs/ca-certificates.crt",
        )
    return path.resolve()


def _max_jobs(flag: int | None, env: Mapping[str, str]) -> int | None:
    if flag is not None:
        value: int | str = flag
    else:
        text = env.get(ENV_PREFIX + "MAX_JOBS", "").strip()
        if not text:
            return None
        value = text
    if isinstance(value, str) and not value.isdigit():
        raise BadInputError(f"max jobs {value!r} is not a whole number", hint="for example --max-jobs 4")
    jobs = int(value)
    if jobs < 1:
        raise BadInputError(f"max jobs {jobs} is below 1", hint="for example --max-jobs 4, or leave it out")
    return jobs
