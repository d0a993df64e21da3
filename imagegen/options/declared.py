"""The options table itself: one ``ImageOption`` per option of the image commands, in the order
``--help`` and the docs list them (``imagegen.options``: what each field means)."""

from __future__ import annotations

from imagegen.options.declared_commands import COMMAND_OPTIONS
from imagegen.options.declared_target import TARGET_OPTIONS
from imagegen.options.model import (
    _IMAGE_CMDS,
    _WITH_BAKE,
    BUILD,
    BUILD_CMD,
    IMAGE,
    MATRIX,
    OPS,
    SOURCES,
    ImageOption,
)
from imagegen.options.run_options import RUN_OPTIONS

# What the image is (SpecInput's fields) and its tag; then how a run behaves (run_options.py);
# then the options of the commands that make no image (declared_commands.py).
OPTIONS: tuple[ImageOption, ...] = (
    ImageOption(
        name="ops",
        flags=("--ops",),
        form="value",
        commands=_WITH_BAKE,
        help="Comma-separated ops, or 'all' (every op of the target).",
        docs_option="`--ops A,B` / `--ops all`",
        docs_default="(required)",
        docs_meaning=(
            "ops to compile, each once; `all` = every op of the target (on `--cpu`: the CPU ops). Unknown "
            'names get a "did you mean" (`ALL`: `all`)'
        ),
        env_kind="list",
        command_defaults=(("bake", "all"),),  # bake builds every op of each target
    ),
    ImageOption(
        name="op_sources",
        flags=("--op-source",),
        form="repeat",
        commands=_WITH_BAKE | {MATRIX, OPS},
        help="An op package folder whose ops join ours (repeatable).",
        docs_option="`--op-source DIR` (repeatable)",
        docs_meaning=(
            "an op package whose ops `--ops` may name beside ours ([op-packages.md](op-packages.md)); only "
            "packages with a selected op are staged and built. A folder that is not an op package, a "
            "package that does not import, an invalid builder, an op name that clashes, or a "
            "`runtime_packages` / build package that is not a Debian package name (lower-case letters, "
            "digits, `+ - .`) exits 2 naming the op"
        ),
        metavar="DIR",
        env_kind="path",
        env_note="(folders separated by `:`)",
        default=(),
        check="inputs.op_source_paths",
    ),
    *TARGET_OPTIONS,
    ImageOption(
        name="build_wheelhouse",
        flags=("--build-wheelhouse",),
        form="value",
        commands=_IMAGE_CMDS,
        help="A cross build's wheelhouse for the build platform's own torch (default --wheelhouse).",
        docs_option="`--build-wheelhouse DIR`",
        docs_default="`--wheelhouse`",
        docs_meaning=(
            "a cross build installs two torches: the target's (from `--wheelhouse` or the index) and a CPU "
            "build for the build platform, which runs torch's extension builder; this folder holds the "
            "latter (`--platform-wheelhouse` of the build platform in a several-platform build)"
        ),
        panel=SOURCES,
        metavar="DIR",
        env_kind="path",
        check="inputs.existing_dir",
    ),
    ImageOption(
        name="python",
        flags=("--python",),
        form="value",
        commands=_IMAGE_CMDS,
        help="Python version.",
        docs_option="`--python X.Y`",
        docs_default="catalog",
        docs_meaning=(
            "CPU: any of 3.9–3.14. CUDA/ROCm: the distro's python3 (3.10 on ubuntu22.04, 3.12 on "
            "ubuntu24.04), unless you pass both base images"
        ),
        panel=IMAGE,
        metavar="X.Y",
        env_kind="text",
    ),
    ImageOption(
        name="torch",
        flags=("--torch",),
        form="value",
        commands=_WITH_BAKE,
        help="torch release (X.Y: newest patch).",
        docs_option="`--torch X.Y[.Z]`",
        docs_default="catalog",
        docs_meaning=(
            "a torch release built for the target (`X.Y` = its newest patch); checked against the Python "
            "version too. Final releases only: a pre-, post- or development release (`2.13.0rc1`, "
            "`2.13.0.post1`) or a local label (`2.13.0+cpu`) exits 2. A release outside the catalog needs "
            "`--torch-index` (below) and its full `X.Y.Z`"
        ),
        panel=IMAGE,
        metavar="X.Y[.Z]",
        env_kind="text",
    ),
    ImageOption(
        name="arch",
        flags=("--arch",),
        form="value",
        commands=_IMAGE_CMDS,
        help=(
            "CUDA archs ('8.0;9.0+PTX', 'Ampere') or ROCm gfx targets ('gfx90a;gfx942'). Default: the "
            "toolkit's list."
        ),
        docs_option="`--arch LIST`",
        docs_default="the toolkit's list (arm64: the Grace GPUs')",
        docs_meaning=(
            "CUDA: `8.0;9.0+PTX`, `Ampere`, `9.0a` (validated against the target CUDA version; `native` is "
            "refused: builds run without the GPU). ROCm: `gfx90a;gfx942`"
        ),
        panel=IMAGE,
        metavar="LIST",
        env_kind="list",
    ),
    ImageOption(
        name="distro",
        flags=("--distro",),
        form="value",
        commands=_IMAGE_CMDS,
        help="Base distro (bookworm, ubuntu22.04, ...).",
        docs_option="`--distro D`",
        docs_default="first in the catalog",
        docs_meaning="`bookworm`/`trixie` for the CPU, `ubuntu22.04`/`ubuntu24.04` for GPUs",
        panel=IMAGE,
        env_kind="text",
    ),
    ImageOption(
        name="base_devel",
        flags=("--base-devel",),
        form="value",
        commands=_IMAGE_CMDS,
        help="Base of the devel/build stages.",
        docs_option="`--base-devel IMAGE`",
        docs_default="catalog",
        docs_meaning=(
            "override the base of the devel and build stages (any Debian/Ubuntu image with apt; Python must "
            "sit at the same path as in the runtime base)"
        ),
        panel=IMAGE,
        metavar="IMAGE",
        env_kind="text",
    ),
    ImageOption(
        name="base_runtime",
        flags=("--base-runtime",),
        form="value",
        commands=_IMAGE_CMDS,
        help="Base of the runtime stage.",
        docs_option="`--base-runtime IMAGE`",
        docs_default="catalog",
        docs_meaning="override the base of the runtime stage (likewise)",
        panel=IMAGE,
        metavar="IMAGE",
        env_kind="text",
    ),
    ImageOption(
        name="standins",
        flags=("--standins",),
        form="switch",
        commands=_WITH_BAKE,
        help="Use the local stand-in bases (`imagegen standins`) for the target.",
        docs_option="`--standins`",
        docs_meaning=(
            "use the local stand-in bases (see [containers.md](containers.md)): `--cpu` on amd64 and arm64, "
            "CUDA 12.4 (Debian trixie's toolkit, Python 3.13) and every CUDA 13.x of the catalog on amd64. "
            "Others exit 2 (NVIDIA's CUDA 12 wheels hold only ptxas, and Debian packages 12.4 only)"
        ),
        panel=IMAGE,
        env_kind="flag",
        default=False,
    ),
    ImageOption(
        name="torch_index",
        flags=("--torch-index",),
        form="value",
        commands=_WITH_BAKE,
        help="Wheel index for torch.",
        docs_option="`--torch-index URL`",
        docs_default="`https://download.pytorch.org/whl/<variant>`",
        docs_meaning=(
            "where torch (and NumPy) come from: an `https://`, `http://` or `file:///` URL with a host (or "
            "an absolute path), RFC 3986 characters only, less the single quote (percent-encode the rest); "
            "anything else exits 2. With your own index, a torch version outside the catalog (`X.Y.Z`, for "
            "any target and Python) is accepted with a warning"
        ),
        panel=SOURCES,
        metavar="URL",
        env_kind="text",
        check="inputs.index_url",
    ),
    ImageOption(
        name="wheelhouse",
        flags=("--wheelhouse",),
        form="value",
        commands=_WITH_BAKE,
        help="Folder of wheels (torch, ...) to install from, before any index.",
        docs_option="`--wheelhouse DIR`",
        docs_meaning=(
            "a folder of wheels installed first (`pip --find-links`); it replaces the torch index unless "
            "`--torch-index` is given"
        ),
        panel=SOURCES,
        metavar="DIR",
        env_kind="path",
        check="inputs.existing_dir",
    ),
    ImageOption(
        name="offline",
        flags=("--offline",),
        form="switch",
        commands=_WITH_BAKE,
        help="Install wheels from --wheelhouse only (pip --no-index).",
        docs_option="`--offline`",
        docs_meaning="with `--wheelhouse`: `pip --no-index`, every wheel must be in the wheelhouse",
        panel=SOURCES,
        env_kind="flag",
        default=False,
    ),
    ImageOption(
        name="ca_cert",
        flags=("--ca-cert",),
        form="value",
        commands=_WITH_BAKE,
        help="Extra CA bundle trusted while building (not in the runtime image).",
        docs_option="`--ca-cert FILE`",
        docs_meaning=(
            "extra CA bundle trusted while building (apt and pip); **not** in the runtime image. Must be a "
            "PEM file (a `-----BEGIN CERTIFICATE-----` line); a directory, a DER file or anything else "
            "exits 2 naming the file"
        ),
        panel=SOURCES,
        metavar="FILE",
        env_kind="path",
        check="inputs.existing_file",
    ),
    ImageOption(
        name="keep_ca_cert",
        flags=("--keep-ca-cert",),
        form="switch",
        commands=_IMAGE_CMDS,
        help="Also trust --ca-cert in the runtime image.",
        docs_option="`--keep-ca-cert`",
        docs_meaning="also trust it in the runtime image",
        panel=SOURCES,
        default=False,
    ),
    ImageOption(
        name="buildkit",
        flags=("--buildkit/--no-buildkit",),
        form="toggle",
        commands=_IMAGE_CMDS,
        help="BuildKit variant (cache mounts) or the classic one. Default: BuildKit.",
        docs_option="`--buildkit/--no-buildkit`",
        docs_default="BuildKit",
        docs_meaning="which Dockerfile variant (below)",
        panel=BUILD,
        env_kind="flag",
        default=True,
    ),
    ImageOption(
        name="bytecode",
        flags=("--bytecode",),
        form="value",
        commands=_IMAGE_CMDS,
        help=(
            "Compiled .pyc files the runtime image keeps. startup (default): those of the modules a process "
            "imports to start torch and load the ops (~15 MB); all: every module's (~120 MB more, for "
            "torch.compile and other lazily imported parts); none: a read-only container then compiles "
            "torch's modules again at every start (~1 s)."
        ),
        docs_option="`--bytecode MODE`",
        docs_meaning=(
            "which compiled `.pyc` files the runtime venv keeps. `startup`: those of the modules a process "
            "imports to start torch and load the image's ops (~750 files, 15 MB; the rest of pip's 120 MB "
            "is dropped). `all`: every module's, for jobs that use lazily imported parts such as "
            "`torch.compile`; the tag gets `-allbytecode`. `none`: a read-only container compiles torch's "
            "modules again at every start (`import torch` 2.3 s instead of 1.5 s here); the tag gets "
            "`-nobytecode`"
        ),
        panel=BUILD,
        metavar="startup|all|none",
        env_kind="text",
        default="startup",
        check="checks.bytecode",
    ),
    ImageOption(
        name="stable_headers",
        flags=("--stable-headers",),
        form="value",
        commands=_IMAGE_CMDS,
        help=(
            "torch headers the stable-ABI ops compile against (torch >= 2.10, CPU or CUDA). "
            "newest (default): those of the target's newest torch, so every image of the target gets the "
            "same op modules; own: the image's torch's; or a release such as 2.15.0."
        ),
        docs_option="`--stable-headers WHICH`",
        docs_default="`newest`",
        docs_meaning=(
            "the torch headers the ops built for torch's stable ABI compile against (an image with torch "
            ">= 2.10, CPU or CUDA). `newest`: those of the newest torch release the catalog "
            "has for the target, read out of its wheel on this machine's pip index and staged into the "
            "build context: every image of the target, whatever its torch, gets byte-identical op modules "
            "(one ops layer to pull, one compile for the compile cache). `own`: the image's own torch's "
            "(also what `--offline` uses). A release (`2.15.0`): that torch's"
        ),
        panel=BUILD,
        metavar="newest|own|X.Y.Z",
        env_kind="text",
        default="newest",
        check="stable_headers.value",
    ),
    ImageOption(
        name="numpy",
        flags=("--numpy/--no-numpy",),
        form="toggle",
        commands=_IMAGE_CMDS,
        help=(
            "NumPy in the runtime venv, from torch's index or wheelhouse (default: yes; without it torch "
            "warns at every import that it cannot initialize NumPy)."
        ),
        docs_option="`--numpy/--no-numpy`",
        docs_default="NumPy",
        docs_meaning=(
            "NumPy in the runtime venv, installed by the same `pip install` as torch (so from the same "
            "index or wheelhouse; `numpy<2` for torch up to 2.3). `--no-numpy` leaves it out: torch then "
            "warns at every import that it cannot initialize NumPy, as it should; the tag gets `-nonumpy`"
        ),
        panel=IMAGE,
        env_kind="flag",
        default=True,
    ),
    ImageOption(
        name="max_jobs",
        flags=("--max-jobs",),
        form="value",
        commands=_WITH_BAKE,
        help="Parallel compile jobs. Default: from the build machine's cores and memory.",
        docs_option="`--max-jobs N`",
        docs_default="from cores and memory",
        docs_meaning="parallel compile jobs (`MAX_JOBS` build arg), 1 to 1024",
        panel=BUILD,
        metavar="N",
        env_kind="int",
        value_type=int,
        check="inputs.max_jobs",
    ),
    ImageOption(
        name="compile_cache",
        flags=("--compile-cache",),
        form="value",
        commands=_WITH_BAKE,
        help=(
            "Compile through sccache with this cache: local (a BuildKit cache mount), redis://HOST:PORT, "
            "s3://BUCKET/PREFIX or gcs://BUCKET/PREFIX; credentials from the environment go in as a build "
            "secret. Default: ccache in a cache mount."
        ),
        docs_option="`--compile-cache URL`",
        docs_default="none (ccache in a cache mount)",
        docs_meaning=(
            "compile through sccache with this cache: `local` (a BuildKit cache mount), "
            "`redis://HOST:PORT[/DB]`, `s3://BUCKET[/PREFIX]`, `gcs://BUCKET[/PREFIX]`; needs BuildKit; see "
            "[A compile cache shared by builders](#a-compile-cache-shared-by-builders)"
        ),
        panel=BUILD,
        metavar="URL",
        env_kind="text",
        check="compile_cache.parse",
    ),
    ImageOption(
        name="tag",
        flags=("--tag", "-t"),
        form="value",
        commands=frozenset({BUILD_CMD}),
        help="Image tag. Default: imagegen:<target>-torch<v>-py<v>-<hash of ops+archs>.",
        docs_option="`--tag T`",
        docs_default="`imagegen:<target>[-arm64]-torch<v>-py<v>-<hash8>`",
        docs_meaning=(
            "hash8 names the op set and arch list, e.g. `imagegen:cpu-torch2.13.0-py3.11-6f963e15`; arm64 "
            "images add `-arm64` after the target (amd64 tags are as they always were). Checked against "
            "Docker's reference grammar, as are the base images: lower-case name, tag at most 128 "
            "characters, name at most 255 characters as Docker spells it (`name` counts as "
            "`docker.io/library/name`); a tag cannot have a digest, a base image can"
        ),
        panel=BUILD,
        env_kind="text",
    ),
    *RUN_OPTIONS,
    *COMMAND_OPTIONS,
)
