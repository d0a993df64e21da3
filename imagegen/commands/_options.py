"""Options shared by several commands, as ``Annotated`` aliases.

Typer reads these annotations at run time, so this module spells optional types with
``Optional`` (the package supports Python 3.9, where ``X | None`` cannot be evaluated).
"""

from collections.abc import Sequence
from typing import Annotated, Optional

import typer

from imagegen.errors import BadInputError
from imagegen.imagespec.checks import platform_name

# ctx.meta key: set by --json's callback so the error handler knows the output format.
JSON_META_KEY = "imagegen.json"

_TARGET = "Target (exactly one)"
_IMAGE = "Image"
_SOURCES = "Sources and network"
_BUILD = "Build"


def _remember_json(ctx: typer.Context, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META_KEY] = True
    return value


JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print a JSON document on stdout instead of text.", callback=_remember_json),
]
OpsOption = Annotated[
    Optional[str],
    typer.Option("--ops", help="Comma-separated ops, or 'all' (every op of the target). (env: IMAGEGEN_OPS)"),
]
OpSourceOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--op-source",
        metavar="DIR",
        help="An op package folder whose ops join ours (repeatable). (env: IMAGEGEN_OP_SOURCES, "
        "folders separated by ':')",
    ),
]
CudaOption = Annotated[
    Optional[str],
    typer.Option("--cuda", metavar="X.Y", help="Build for this CUDA version.", rich_help_panel=_TARGET),
]
RocmOption = Annotated[
    Optional[str],
    typer.Option("--rocm", metavar="X.Y", help="Build for this ROCm version.", rich_help_panel=_TARGET),
]
CpuOption = Annotated[bool, typer.Option("--cpu", help="Build for the CPU only.", rich_help_panel=_TARGET)]
PlatformOption = Annotated[
    Optional[str],
    typer.Option(
        "--platform",
        metavar="OS/ARCH",
        help="linux/amd64 (default) or linux/arm64 (Grace Hopper / Grace Blackwell nodes; CUDA 12.6+ "
        "or the CPU). Built elsewhere under emulation. (env: IMAGEGEN_PLATFORM)",
        rich_help_panel=_TARGET,
    ),
]
PythonOption = Annotated[
    Optional[str],
    typer.Option(
        "--python", metavar="X.Y", help="Python version. (env: IMAGEGEN_PYTHON)", rich_help_panel=_IMAGE
    ),
]
TorchOption = Annotated[
    Optional[str],
    typer.Option(
        "--torch",
        metavar="X.Y[.Z]",
        help="torch release (X.Y: newest patch). (env: IMAGEGEN_TORCH)",
        rich_help_panel=_IMAGE,
    ),
]
ArchOption = Annotated[
    Optional[str],
    typer.Option(
        "--arch",
        metavar="LIST",
        help="CUDA archs ('8.0;9.0+PTX', 'Ampere') or ROCm gfx targets ('gfx90a;gfx942'). "
        "Default: the toolkit's list. (env: IMAGEGEN_ARCH)",
        rich_help_panel=_IMAGE,
    ),
]
DistroOption = Annotated[
    Optional[str],
    typer.Option(
        "--distro",
        help="Base distro (bookworm, ubuntu22.04, ...). (env: IMAGEGEN_DISTRO)",
        rich_help_panel=_IMAGE,
    ),
]
BaseDevelOption = Annotated[
    Optional[str],
    typer.Option(
        "--base-devel",
        metavar="IMAGE",
        help="Base of the devel/build stages. (env: IMAGEGEN_BASE_DEVEL)",
        rich_help_panel=_IMAGE,
    ),
]
BaseRuntimeOption = Annotated[
    Optional[str],
    typer.Option(
        "--base-runtime",
        metavar="IMAGE",
        help="Base of the runtime stage. (env: IMAGEGEN_BASE_RUNTIME)",
        rich_help_panel=_IMAGE,
    ),
]
StandinsOption = Annotated[
    Optional[bool],
    typer.Option(
        "--standins",
        help="Use the local stand-in bases (`imagegen standins`) for the target. (env: IMAGEGEN_STANDINS=1)",
        rich_help_panel=_IMAGE,
    ),
]
TorchIndexOption = Annotated[
    Optional[str],
    typer.Option(
        "--torch-index",
        metavar="URL",
        help="Wheel index for torch. (env: IMAGEGEN_TORCH_INDEX)",
        rich_help_panel=_SOURCES,
    ),
]
WheelhouseOption = Annotated[
    Optional[str],
    typer.Option(
        "--wheelhouse",
        metavar="DIR",
        help="Folder of wheels (torch, ...) to install from, before any index. (env: IMAGEGEN_WHEELHOUSE)",
        rich_help_panel=_SOURCES,
    ),
]
OfflineOption = Annotated[
    Optional[bool],
    typer.Option(
        "--offline",
        help="Install wheels from --wheelhouse only (pip --no-index). (env: IMAGEGEN_OFFLINE=1)",
        rich_help_panel=_SOURCES,
    ),
]
CaCertOption = Annotated[
    Optional[str],
    typer.Option(
        "--ca-cert",
        metavar="FILE",
        help="Extra CA bundle trusted while building (not in the runtime image). (env: IMAGEGEN_CA_CERT)",
        rich_help_panel=_SOURCES,
    ),
]
KeepCaCertOption = Annotated[
    bool,
    typer.Option(
        "--keep-ca-cert", help="Also trust --ca-cert in the runtime image.", rich_help_panel=_SOURCES
    ),
]
BuildkitOption = Annotated[
    Optional[bool],
    typer.Option(
        "--buildkit/--no-buildkit",
        help="BuildKit variant (cache mounts) or the classic one. Default: BuildKit. "
        "(env: IMAGEGEN_BUILDKIT)",
        rich_help_panel=_BUILD,
    ),
]
BytecodeOption = Annotated[
    Optional[str],
    typer.Option(
        "--bytecode",
        metavar="startup|all|none",
        help="Compiled .pyc files the runtime image keeps. startup (default): those of the modules "
        "a process imports to start torch and load the ops (~15 MB); all: every module's "
        "(~120 MB more, for torch.compile and other lazily imported parts); none: a read-only "
        "container then compiles torch's modules again at every start (~1 s). "
        "(env: IMAGEGEN_BYTECODE)",
        rich_help_panel=_BUILD,
    ),
]
NumpyOption = Annotated[
    Optional[bool],
    typer.Option(
        "--numpy/--no-numpy",
        help="NumPy in the runtime venv, from torch's index or wheelhouse (default: yes; without it "
        "torch warns at every import that it cannot initialize NumPy). (env: IMAGEGEN_NUMPY)",
        rich_help_panel=_IMAGE,
    ),
]
MaxJobsOption = Annotated[
    Optional[int],
    typer.Option(
        "--max-jobs",
        metavar="N",
        help="Parallel compile jobs. Default: from the build machine's cores and memory. "
        "(env: IMAGEGEN_MAX_JOBS)",
        rich_help_panel=_BUILD,
    ),
]
TagOption = Annotated[
    Optional[str],
    typer.Option(
        "--tag",
        "-t",
        help="Image tag. Default: imagegen:<target>-torch<v>-py<v>-<hash of ops+archs>. (env: IMAGEGEN_TAG)",
        rich_help_panel=_BUILD,
    ),
]
CompileCacheOption = Annotated[
    Optional[str],
    typer.Option(
        "--compile-cache",
        metavar="URL",
        help="Compile through sccache with this cache: local (a BuildKit cache mount), "
        "redis://HOST:PORT, s3://BUCKET/PREFIX or gcs://BUCKET/PREFIX; credentials from the "
        "environment go in as a build secret. Default: ccache in a cache mount. "
        "(env: IMAGEGEN_COMPILE_CACHE)",
        rich_help_panel=_BUILD,
    ),
]

PlatformTorchOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--platform-torch",
        metavar="OS/ARCH=X.Y.Z",
        help="torch for one platform (repeatable), e.g. linux/arm64=2.10.0. Default: --torch, else "
        "the catalog's for that platform (the CPU on arm64: 2.10.0, the newest aarch64 CPU build).",
    ),
]
PlatformWheelhouseOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--platform-wheelhouse",
        metavar="OS/ARCH=DIR",
        help="The wheelhouse for one platform (repeatable), e.g. linux/arm64=DIR. Default: --wheelhouse.",
    ),
]


def by_platform(option: str, values: Sequence[str], example: str) -> dict[str, str]:
    """``OS/ARCH=VALUE`` items (``--platform-torch``, ``--platform-wheelhouse``) -> {platform:
    value}; bad input for an item without ``=`` or a value."""
    chosen: dict[str, str] = {}
    for value in values:
        platform, sep, given = value.partition("=")
        if not sep or not given.strip():
            raise BadInputError(f"{option} {value!r}: give OS/ARCH=VALUE", hint=f"e.g. {option} {example}")
        chosen[platform_name(platform)] = given.strip()
    return chosen
