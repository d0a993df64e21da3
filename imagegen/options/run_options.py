"""The options table's run options: how one run of ``build`` or ``bake`` behaves (push, verify,
sign, the size budget, per-platform torch and wheels), handed to the command as they are rather
than resolved into the image's spec."""

from __future__ import annotations

from pathlib import Path

from imagegen.options.model import BAKE, BUILD_CMD, ImageOption

RUN_OPTIONS: tuple[ImageOption, ...] = (
    ImageOption(
        name="push",
        flags=("--push",),
        form="switch",
        commands=frozenset({BUILD_CMD}),
        help=(
            "Push the tag after verification passed, with its SBOM and provenance as OCI referrers. Several "
            "platforms: each platform's image, then one image index under --tag."
        ),
        docs_option="`--push`",
        docs_meaning=(
            "push after verification passed (refused together with `--no-verify`), the SBOM and provenance "
            "following as [OCI referrers](#pushed-with-the-image-oci-referrers); several platforms: see "
            "[one image for several platforms](#one-image-for-several-platforms) (needs `--tag "
            "REGISTRY/NAME:TAG`, else exit 2)"
        ),
        spec=False,
        default=False,
    ),
    ImageOption(
        name="no_verify",
        flags=("--no-verify",),
        form="switch",
        commands=frozenset({BUILD_CMD, BAKE}),
        help="Build only: skip loading the ops in a sealed container.",
        docs_option="`--no-verify`",
        docs_meaning=(
            "build only: no op is loaded in a sealed container, and nothing can be pushed (`--push` with it "
            "exits 2)"
        ),
        spec=False,
        default=False,
    ),
    ImageOption(
        name="platform_torch",
        flags=("--platform-torch",),
        form="repeat",
        commands=frozenset({BUILD_CMD, BAKE}),
        help=(
            "torch for one platform (repeatable), e.g. linux/arm64=2.10.0. Default: --torch, else the "
            "catalog's for that platform (the CPU on arm64: 2.10.0, the newest aarch64 CPU build)."
        ),
        docs_option="`--platform-torch P=X.Y.Z`",
        docs_default="`--torch`, else the catalog's for that platform",
        docs_meaning=(
            "torch for one platform of a `--platform A,B` build (repeatable), e.g. `linux/arm64=2.10.0`; a "
            "malformed item exits 2"
        ),
        metavar="OS/ARCH=X.Y.Z",
        spec=False,
        default=(),
    ),
    ImageOption(
        name="platform_wheelhouse",
        flags=("--platform-wheelhouse",),
        form="repeat",
        commands=frozenset({BUILD_CMD, BAKE}),
        help="The wheelhouse for one platform (repeatable), e.g. linux/arm64=DIR. Default: --wheelhouse.",
        docs_option="`--platform-wheelhouse P=DIR`",
        docs_default="`--wheelhouse`",
        docs_meaning=(
            "the wheelhouse for one platform (repeatable), e.g. `linux/arm64=.cache/wheelhouse-linux-arm64`"
        ),
        metavar="OS/ARCH=DIR",
        spec=False,
        default=(),
    ),
    ImageOption(
        name="max_size",
        flags=("--max-size",),
        form="value",
        commands=frozenset({BUILD_CMD}),
        help="Fail (exit 1, not pushed) when the runtime image is larger: 2GiB, 1.5GB, 500MiB, bytes.",
        docs_option="`--max-size SIZE`",
        docs_meaning=(
            "fail the build (exit 1, the image kept but not pushed) when the runtime image is larger than "
            "SIZE, as the engine counts it (`docker image inspect`'s `Size`), printing its size by part: "
            "`2GiB`, `500MiB` (powers of 1024; `2G` too, as Docker reads it), `1.5GB` (powers of 1000) or "
            "bytes. Anything else exits 2 before anything is built"
        ),
        metavar="SIZE",
        spec=False,
    ),
    ImageOption(
        name="sign_key",
        flags=("--sign-key",),
        form="value",
        commands=frozenset({BUILD_CMD}),
        help=(
            "Sign the image's provenance with this Ed25519 or ECDSA P-256 private key (PEM, unencrypted); "
            "`imagegen verify --key` checks it."
        ),
        docs_option="`--sign-key FILE`",
        docs_meaning=(
            "sign the provenance statement with this Ed25519 or ECDSA P-256 private key (PEM, "
            "unencrypted: `openssl genpkey -algorithm ed25519`, or `-algorithm EC -pkeyopt "
            "ec_paramgen_curve:P-256`); the image then carries the DSSE envelope. A file that is not "
            "such a key exits 2 before anything is built"
        ),
        metavar="FILE",
        value_type=Path,
        spec=False,
    ),
    ImageOption(
        name="source",
        flags=("--source",),
        form="value",
        commands=frozenset({BUILD_CMD, BAKE}),
        help="Project checkout to build from. Default: the one imagegen runs from.",
        docs_option="`--source DIR`",
        docs_default="the checkout imagegen runs from",
        docs_meaning="the project checkout whose op_builder, kernels and setup.py the build stage compiles",
        metavar="DIR",
        value_type=Path,
        spec=False,
    ),
)
