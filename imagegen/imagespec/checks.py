"""The checks of ``imagegen.imagespec.spec``, one per option: each returns the value resolved, or raises
one ``BadInputError`` with a hint (exit 2)."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from imagegen import options, settings
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.catalog import Accelerator, Target
from op_builder import CUDAOpBuilder
from op_builder import archs as arch_lib
from op_builder.cross import PLATFORM_ALIASES
from op_builder.registry import Registry, check_op_names
from op_builder.suggest import did_you_mean

# Environment variables read as the middle layer of the cascade.
ENV_PREFIX = settings.ENV_PREFIX

_VERSION_RE = re.compile(r"\d+\.\d+\Z")  # \Z: "$" would let a trailing newline through

# Which compiled bytecode (.pyc) the runtime venv keeps, and the suffix each adds to the
# default tag. "startup": only what a process imports to start torch and load the image's ops.
BYTECODE_TAG_SUFFIX = {"startup": "", "all": "-allbytecode", "none": "-nobytecode"}
BYTECODE_MODES = tuple(BYTECODE_TAG_SUFFIX)
DEFAULT_BYTECODE: str = options.default("bytecode")


def target(cuda: str | None, rocm: str | None, cpu: bool) -> Target:
    given = [name for name, on in (("--cuda", cuda), ("--rocm", rocm), ("--cpu", cpu)) if on]
    if not given:
        raise BadInputError("no target given", hint="pick exactly one of --cuda X.Y, --rocm X.Y or --cpu")
    if len(given) > 1:
        raise BadInputError(
            f"two targets at once: {' and '.join(given)}",
            hint="an image has one target; render one image per target (see `imagegen matrix`)",
        )
    if cpu:
        return catalog.CPU_TARGET
    accelerator: Accelerator = "cuda" if cuda else "rocm"
    version = (cuda or rocm or "").strip()
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


def platform_name(value: str, option: str = "--platform") -> str:
    """``value`` as one of ``catalog.PLATFORMS``, or bad input with the OCI name it may have meant."""
    chosen = value.strip().lower()
    if chosen in catalog.PLATFORMS:
        return chosen
    meant = PLATFORM_ALIASES.get(chosen)
    suggestion = f"did you mean {meant}? " if meant else ""
    raise BadInputError(
        f"{option} {value!r} is not a platform imagegen builds for",
        hint=suggestion + "use " + " or ".join(catalog.PLATFORMS),
    )


def build_platform(value: str) -> str:
    """``--build-platform``'s value as one of ``catalog.PLATFORMS`` (its row's check)."""
    return platform_name(value, "--build-platform")


def platform_list(value: str) -> tuple[str, ...]:
    """``linux/amd64,linux/arm64`` -> each platform once, in the order given; bad input for an empty
    item or a platform named twice (an image index holds one manifest per platform)."""
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise BadInputError(
            f"--platform {value!r} has an empty item", hint="e.g. --platform linux/amd64,linux/arm64"
        )
    chosen = tuple(platform_name(item) for item in items)
    twice = sorted({p for p in chosen if chosen.count(p) > 1})
    if twice:
        raise BadInputError(
            f"--platform {value!r} names {', '.join(twice)} twice", hint="name each platform once"
        )
    return chosen


def platform(value: str | None, target: Target) -> str:
    """The image's platform (``linux/amd64`` by default), refused where the catalog has no
    torch build for the target on it."""
    chosen = catalog.DEFAULT_PLATFORM if value is None else platform_name(value)
    if chosen in target.platforms:
        return chosen
    if target.accelerator == "rocm":
        raise BadInputError(
            f"{target.name} has no {chosen} build: torch's ROCm wheels are for x86-64 only",
            hint="build ROCm images for linux/amd64, or --cpu / --cuda X.Y for linux/arm64",
        )
    arm64_cuda = [v for v, t in catalog.CUDA_TARGETS.items() if chosen in t.platforms]
    raise BadInputError(
        f"{target.name} has no {chosen} build: torch publishes aarch64 CUDA wheels from "
        f"CUDA {catalog.ARM64_CUDA_SINCE} on",
        hint="CUDA versions with arm64 builds: " + ", ".join(arm64_cuda),
    )


def standins(target: Target, platform: str) -> tuple[str, str]:
    """The stand-in bases for ``target`` on ``platform``, or bad input naming those that exist."""
    found = catalog.standin_bases(target.name, platform)
    if found is not None:
        return found
    have = ", ".join(f"{name} ({where})" for name, where in catalog.STANDINS)
    if target.accelerator == "cuda" and platform == catalog.AMD64:
        hint = (
            "NVIDIA's wheels hold a whole compiler from CUDA 13 on (12.x: only ptxas) and Debian "
            "packages 12.4 only, so other versions have no stand-in: build on the real nvidia/cuda "
            "bases (pull them, or pass --base-devel/--base-runtime)"
        )
    else:
        hint = "pull the real bases, or pass --base-devel/--base-runtime"
    raise BadInputError(f"no stand-in bases for {target.name} on {platform}; there are: {have}", hint=hint)


def distro(value: str | None, target: Target, standins: bool) -> str:
    if value is None:
        return catalog.standin_distro(target.name) if standins else target.distros[0]
    if value not in target.distros:
        suggestion = did_you_mean(value, target.distros)
        raise BadInputError(
            f"distro {value!r} is not available for {target.name}",
            hint=(suggestion + " " if suggestion else "") + "available: " + ", ".join(target.distros),
        )
    return value


def bytecode(value: str | None) -> str:
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


def python(
    value: str | None,
    target: Target,
    distro: str,
    standins: bool,
    base_devel: str | None,
    base_runtime: str | None,
) -> str:
    default = catalog.standin_python(target.name) if standins else target.default_python(distro)
    if value is None:
        return default
    if not _VERSION_RE.match(value):
        raise BadInputError(f"--python {value!r} is not a Python version", hint="use MAJOR.MINOR, e.g. 3.11")
    if base_devel and base_runtime:
        return value  # the user's own bases decide which Python there is
    if standins and value != default:
        raise BadInputError(
            f"the stand-in bases have Python {default}, not {value}",
            hint=f"drop --python, or pass --python {default}",
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


# A torch release as the catalog names them: X.Y (its newest patch) or X.Y.Z, nothing more.
_TORCH_RELEASE_RE = re.compile(r"\d+\.\d+(?:\.\d+)?\Z")


def torch(
    value: str | None,
    target: Target,
    python: str,
    custom_index: str | None,
    warnings: list[str],
    platform: str = catalog.DEFAULT_PLATFORM,
) -> tuple[str, str]:
    """(torch release, wheel variant) for ``target`` on ``platform``: ``value`` checked, or the
    platform's default, one whose build exists there (arm64's CPU builds stop at 2.10)."""
    built = target.torch_versions(platform)
    known = True
    if value is None:
        torch = target.default_torch_for(platform)
    else:
        torch, known = _torch_release(value, target, custom_index, platform)
    torch_range = target.torch_range(torch, platform) if known else None
    if torch_range is None:
        limit = target.platform_limit(platform)
        if custom_index is None and limit is not None and target.torch_range(torch) is not None:
            raise BadInputError(
                f"torch {torch} has no {target.name} build for {platform}: {limit.why}",
                hint=f"torch built for {target.name} on {platform}: {_span(built)}: pass --torch "
                f"{limit.default}, or for this platform alone (`imagegen bake`, a build of several "
                f"platforms) --platform-torch {platform}={limit.default}; or --torch-index for your "
                "own index",
            )
        if custom_index is None:
            raise BadInputError(
                f"torch {torch} is not built for {target.name}",
                hint=f"torch built for {target.name}: {_span(built)} "
                "(or pass --torch-index for your own index)",
            )
        # With the user's own index we cannot know what it holds: say so once and go on.
        variant = target.torch[-1].variant
        if known:
            where = target.name if target.platform_limit(platform) is None else f"{target.name} on {platform}"
            warnings.append(
                f"torch {torch} is not in the catalog for {where}; trusting --torch-index {custom_index}"
            )
        else:  # nor which Pythons it has wheels for: the devel stage's pip finds out
            warnings.append(
                f"torch {torch} is not a release in the catalog; trusting --torch-index {custom_index} "
                f"to have it for {target.name} and Python {python}"
            )
            return torch, variant
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


def _torch_release(
    value: str, target: Target, custom_index: str | None, platform: str = catalog.DEFAULT_PLATFORM
) -> tuple[str, bool]:
    """``--torch`` as a release: (version, whether the catalog knows it).

    Only final releases: ``2.13.0rc1``, ``2.13.0.post1`` or ``2.13.0+cpu`` would otherwise be
    read as ``2.13.0`` and silently pin another build than the one asked for. A release the
    catalog does not list is accepted only from the user's own index (``--torch-index``).
    """
    where = target.name if target.platform_limit(platform) is None else f"{target.name} on {platform}"
    releases = f"torch built for {where}: {_span(target.torch_versions(platform))}"
    if not _TORCH_RELEASE_RE.match(value):
        try:
            parsed: Version | None = Version(value)
        except InvalidVersion:
            parsed = None
        if parsed is not None and (parsed.is_prerelease or parsed.is_postrelease):
            kind = (
                "a development release"
                if parsed.is_devrelease
                else "a pre-release"
                if parsed.pre is not None
                else "a post-release"
            )
            raise BadInputError(
                f"torch {value} is {kind}: imagegen pins final releases only",
                hint=f"pre-, post- and development releases are not in the catalog; {releases}",
            )
        if parsed is not None and parsed.local is not None:
            raise BadInputError(
                f"torch {value} has a local label (+{parsed.local}): the target decides the build",
                hint=f"pass the release alone, e.g. --torch {parsed.base_version}; {releases}",
            )
        raise BadInputError(f"torch {value!r} is not a torch release", hint=f"use X.Y or X.Y.Z; {releases}")
    resolved = catalog.resolve_torch_release(value)
    if resolved is not None:
        return resolved, True
    if custom_index is None:
        raise BadInputError(
            f"torch {value} is not a torch release we know",
            hint=f"{releases} (or pass --torch-index for your own index, which may have others)",
        )
    if value.count(".") == 1:  # X.Y: its newest patch is known only for releases in the catalog
        raise BadInputError(
            f"torch {value} is not in the catalog, so its newest patch release is unknown",
            hint=f"name the release your index has, e.g. --torch {value}.0",
        )
    return str(Version(value)), False


def _span(versions: tuple[str, ...]) -> str:
    if not versions:
        return "none"
    return f"{versions[0]} to {versions[-1]}" if len(versions) > 2 else ", ".join(versions)


def op_list(
    value: str, empty_hint: str, all_hint: str = "did you mean all? (--ops all: every op of the target)"
) -> tuple[str, ...]:
    """The names of a comma-separated ``--ops``, each once, in the order given.

    An empty list is bad input (it would otherwise mean "no ops" or "every op", depending on
    the command), and so is ``all`` spelt in another case: op names are lower case.
    """
    tokens = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if not tokens:
        raise BadInputError("--ops is empty", hint=empty_hint)
    for token in tokens:
        if token != "all" and token.lower() == "all":
            raise BadInputError(f"unknown op {token!r}", hint=all_hint)
    return tokens


def ops(value: str | None, target: Target, registry: Registry) -> tuple[tuple[str, ...], bool]:
    """The selected ops in registry order, and whether they came from ``all``."""
    known = registry.ops
    fits = tuple(n for n, b in known.items() if target.accelerator != "cpu" or b.target == "cpu")
    if value is None:
        raise BadInputError(
            "no ops given",
            hint="pass --ops A,B or --ops all; ops for " + target.name + ": " + ", ".join(fits),
        )
    tokens = op_list(value, empty_hint="for example --ops cpu_adam,cpu_lion, or --ops all")
    if tokens == ("all",):
        return fits, True
    if "all" in tokens:
        raise BadInputError("--ops all cannot be combined with op names", hint="pass either all or a list")
    check_op_names(list(tokens), registry)
    for name in tokens:
        if name not in fits:
            raise BadInputError(
                f"{name} is a GPU op and the target is the CPU",
                hint="build it with --cuda X.Y or --rocm X.Y, or drop it; CPU ops: " + ", ".join(fits),
            )
    wanted = set(tokens)
    return tuple(n for n in known if n in wanted), False


# Debian policy 5.6.1: lower-case letters, digits, '+', '-' and '.'; at least two characters,
# starting with a letter or digit. Names are rendered into apt-get's command line.
_DEBIAN_PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")


def system_packages(names: tuple[str, ...], registry: Registry) -> None:
    """Every Debian package the selected ops name is a package name, and nothing else.

    An op package's builder is code from outside the project, and its package names land in
    the image's ``apt-get install`` lines: ``"a; touch /pwned"`` must not become a command.
    """
    for name in names:
        builder = registry.ops[name]
        for kind, packages in (
            ("runtime_packages", builder.all_runtime_packages()),
            ("build_packages", builder.build_packages()),
        ):
            for package in packages:
                if isinstance(package, str) and _DEBIAN_PACKAGE_RE.fullmatch(package):
                    continue
                where = registry.origins[name].describe()
                raise BadInputError(
                    f"op {name} ({where}) lists {package!r} in its {kind}: not a Debian package name",
                    hint="a Debian package name has lower-case letters, digits, '+', '-' and '.', "
                    "at least two characters, e.g. libaio1; fix the op's builder",
                )


def archs(
    value: str | None, target: Target, platform: str = catalog.DEFAULT_PLATFORM
) -> tuple[tuple[str, ...], tuple[str, ...]]:
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
        return catalog.default_cuda_archs(version, platform), ()
    # No 'native': the build runs in a container, usually on a machine without the GPU.
    parsed = arch_lib.parse_cuda_arch_list(value, native=None)
    arch_lib.validate_for_toolkit(parsed, version)
    return tuple(str(a) for a in parsed), ()


def per_op_archs(
    names: tuple[str, ...],
    cuda_archs: tuple[str, ...],
    registry: Registry,
    explicit: bool,
    warnings: list[str],
) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Each CUDA op's own arch list (the op_builder rule); ops left with none are an error
    when named, and dropped with a warning when they came in through ``all``."""
    if not cuda_archs:
        return names, ()
    parsed = arch_lib.parse_cuda_arch_list(";".join(cuda_archs))
    kept_names: list[str] = []
    per_op: list[tuple[str, tuple[str, ...]]] = []
    for name in names:
        builder = registry.ops[name]
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
