"""The options table's target rows: what the image is built for (exactly one of --cuda, --rocm,
--cpu) and on which platform, with the platform of the machine that builds it."""

from __future__ import annotations

from imagegen.options.model import _IMAGE_CMDS, TARGET, ImageOption

# The image's platform when none is named, and the builder's (the catalog's DEFAULT_PLATFORM).
AMD64 = "linux/amd64"

TARGET_OPTIONS: tuple[ImageOption, ...] = (
    ImageOption(
        name="cuda",
        flags=("--cuda",),
        form="value",
        commands=_IMAGE_CMDS,
        help="Build for this CUDA version.",
        docs_option="`--cuda X.Y`",
        docs_default="(exactly one of `--cuda`, `--rocm`, `--cpu`)",
        docs_meaning="the target: this CUDA version; an unsupported one names the closest supported one",
        panel=TARGET,
        metavar="X.Y",
    ),
    ImageOption(
        name="rocm",
        flags=("--rocm",),
        form="value",
        commands=_IMAGE_CMDS,
        help="Build for this ROCm version.",
        docs_option="`--rocm X.Y`",
        docs_default="(exactly one)",
        docs_meaning="the target: this ROCm version; an unsupported one names the closest supported one",
        panel=TARGET,
        metavar="X.Y",
    ),
    ImageOption(
        name="cpu",
        flags=("--cpu",),
        form="switch",
        commands=_IMAGE_CMDS,
        help="Build for the CPU only.",
        docs_option="`--cpu`",
        docs_default="(exactly one)",
        docs_meaning="the target: the CPU only",
        panel=TARGET,
        default=False,
    ),
    ImageOption(
        name="platform",
        flags=("--platform",),
        form="value",
        commands=_IMAGE_CMDS,
        help=(
            "linux/amd64 (default) or linux/arm64 (Grace Hopper / Grace Blackwell nodes; CUDA 12.6+ or the "
            "CPU). Cross-compiled on a builder of another platform (--build-platform)."
        ),
        docs_option="`--platform OS/ARCH`",
        docs_meaning=(
            "`linux/amd64` or `linux/arm64` (Grace Hopper / Grace Blackwell nodes, DGX Spark, Graviton): "
            "the build's `--platform`, which picks each base's variant; the tag and the "
            "`io.imagegen.platform` label name it. `build` takes both, `linux/amd64,linux/arm64`: [one "
            "image for several platforms](#one-image-for-several-platforms) (an empty item or a platform "
            "named twice exits 2). arm64 takes `--cpu` and `--cuda` 12.6 or newer (torch's aarch64 CUDA "
            "wheels start there); ROCm and older CUDA exit 2. See "
            "[arm64](#arm64-grace-hopper-and-grace-blackwell)"
        ),
        panel=TARGET,
        metavar="OS/ARCH",
        env_kind="text",
        default=AMD64,
        check="checks.platform_name",
    ),
    ImageOption(
        name="build_platform",
        flags=("--build-platform",),
        form="value",
        commands=_IMAGE_CMDS,
        help=(
            "The platform of the machine that builds (default linux/amd64). Another --platform is "
            "cross-compiled: only the runtime stage runs under emulation."
        ),
        docs_option="`--build-platform OS/ARCH`",
        docs_default="`linux/amd64`",
        docs_meaning=(
            "the platform the devel and build stages run on (`FROM --platform=$BUILDPLATFORM`). When "
            "`--platform` names another (arm64 images on an amd64 builder), the ops are "
            "[cross-compiled](#arm64-grace-hopper-and-grace-blackwell) natively and only the runtime stage "
            "runs the target's code (under emulation on this builder). The same platform as `--platform` "
            "builds every stage for the target, under emulation where the builder differs. Needs BuildKit"
        ),
        panel=TARGET,
        metavar="OS/ARCH",
        env_kind="text",
        # No default filled in by the cascade: a --build-platform given with --no-buildkit is
        # refused, the default is not. build_spec then takes --platform's default, one builder.
        check="checks.build_platform",
    ),
)
