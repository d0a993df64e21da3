"""The options table's rows that each belong to one command: every option of the commands that
make no image (``standins``, ``matrix``, ``new-op``) but ``--json`` and ``matrix --op-source`` (the
image commands' row), and the own options of ``dockerfile``, ``bake``, ``verify``, ``sbom`` and
``catalog``. Some read like the image options' (``--cuda``, ``--cpu``, ``--platform``, ``--ops``,
``--push``) but mean something else there, each under a name of its own and said in its help; the
others are each command's own (``matrix --out``, ``verify --key``, ``bake --builder``...). None has
an ``IMAGEGEN_*`` variable. docs/imagegen.md's options table lists those of ``dockerfile`` and
``bake`` (the commands it is for); the others are in ``--help`` and their commands' sections.

Their values are checked where the command uses them, in the order its messages were always
given (``verify`` judges ``--ops``, then ``--gpus``, ``--key``, the image and ``--timeout``), so
none has a row's ``check``: the table checks the values of what the image is
(``imagespec.spec.checked_values``)."""

from __future__ import annotations

from pathlib import Path

from imagegen.options.declared_target import AMD64
from imagegen.options.model import (
    BAKE,
    CATALOG,
    DOCKERFILE,
    MATRIX,
    NEW_OP,
    SBOM,
    STANDINS,
    VERIFY,
    ImageOption,
)

COMMAND_OPTIONS: tuple[ImageOption, ...] = (
    ImageOption(
        name="standin_cudas",
        flags=("--cuda",),
        form="repeat",
        commands=frozenset({STANDINS}),
        help=(
            "Also the CUDA X.Y stand-ins (repeatable): 12.4 from Debian trixie's nvidia-cuda-toolkit, 13.0 "
            "this machine's toolkit (CUDA_HOME) when it is 13.0, other 13.x NVIDIA's compiler wheels."
        ),
        metavar="X.Y",
        default=(),
        spec=False,
    ),
    ImageOption(
        name="cpu_only",
        flags=("--cpu",),
        form="switch",
        commands=frozenset({STANDINS}),
        help="Only the CPU stand-ins (the default when no --cuda is given).",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="standin_platform",
        flags=("--platform",),
        form="value",
        commands=frozenset({STANDINS}),
        help="linux/amd64 (default) or linux/arm64 (tags end in -arm64; made under qemu-user-static).",
        metavar="OS/ARCH",
        default=AMD64,
        spec=False,
    ),
    ImageOption(
        name="standin_force",
        flags=("--force",),
        form="switch",
        commands=frozenset({STANDINS}),
        help="Remake them even when current.",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="standin_mirrors",
        flags=("--mirrors",),
        form="switch",
        commands=frozenset({STANDINS}),
        help="Print the Debian mirrors a base would be made from, and exit.",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="matrix_out",
        flags=("--out",),
        form="value",
        commands=frozenset({MATRIX}),
        help="Where to write (the repository's dockerfiles/).",
        metavar="DIR",
        default=Path("dockerfiles"),
        value_type=Path,
        show_default=True,  # --help has always said "[default: dockerfiles]"
        spec=False,
    ),
    ImageOption(
        name="matrix_check",
        flags=("--check",),
        form="switch",
        commands=frozenset({MATRIX}),
        help="Write nothing; exit 1 if the files differ from what the code renders.",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="matrix_platforms",
        flags=("--platform",),
        form="repeat",
        commands=frozenset({MATRIX}),
        help=(
            "Write (or --check) only this platform's Dockerfiles, linux/amd64 or linux/arm64 (repeatable); "
            "docker-bake.hcl always names the whole matrix. Default: every platform."
        ),
        metavar="OS/ARCH",
        default=(),
        spec=False,
    ),
    ImageOption(
        name="cuda_op",
        flags=("--cuda",),
        form="switch",
        commands=frozenset({NEW_OP}),
        help="A CUDA op (device code, launcher, binding), not a C++ / OpenMP one.",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="op_output",
        flags=("--output", "-o"),
        form="value",
        commands=frozenset({NEW_OP}),
        help=(
            "The op package folder to create; its name is the package's import name. Default: ./NAME_ops "
            "(--in-tree: a new folder of kernels/, default kernels/NAME)."
        ),
        metavar="DIR",
        value_type=Path,  # no default value: new-op names the folder after the op
        spec=False,
    ),
    ImageOption(
        name="in_tree",
        flags=("--in-tree",),
        form="switch",
        commands=frozenset({NEW_OP}),
        help=(
            "A family of ours in this source checkout (kernels/NAME, its test in tests/kernels/), which the "
            "registry finds as it is, instead of an op package of your own."
        ),
        default=False,
        spec=False,
    ),
    ImageOption(
        name="dockerfile_output",
        flags=("--output", "-o"),
        form="value",
        commands=frozenset({DOCKERFILE}),
        help="Write here (atomically) instead of stdout ('-': stdout).",
        docs_option="`--output FILE` / `-o FILE`",
        docs_default="stdout",
        docs_meaning=(
            "write the Dockerfile to FILE, atomically (temp file + rename), instead of stdout; `-` is "
            "stdout. A path that cannot be written exits 2 (see output files, below)"
        ),
        metavar="FILE",
        value_type=Path,
        spec=False,
    ),
    ImageOption(
        name="builder",
        flags=("--builder",),
        form="value",
        commands=frozenset({BAKE}),
        help="The buildx builder to bake on. Default: the current one.",
        docs_option="`--builder NAME`",
        docs_default="the current builder",
        docs_meaning=(
            "the `docker buildx` builder the targets are baked on; one `docker buildx inspect` does not know "
            "exits 2 before anything builds"
        ),
        metavar="NAME",
        spec=False,
    ),
    ImageOption(
        name="torch_releases",
        flags=("--torch-releases",),
        form="value",
        commands=frozenset({BAKE}),
        help=(
            "Several torch releases, comma-separated (2.14.1,2.15.0): one image of each target per release, "
            "their stable-ABI op modules compiled once for all of them."
        ),
        docs_option="`--torch-releases A,B`",
        docs_default="`--torch`: one image per target",
        docs_meaning=(
            "one image of each target per torch release (its target name and tag end in the release); the "
            "images of a target whose ops build for torch's stable ABI share their op modules, so one of "
            "them builds first and the others then take its compiles from the compile cache "
            "(`--compile-cache local` unless one is given). Refused with `--torch` or `--platform-torch`; a "
            "release the target does not have exits 2 before anything builds"
        ),
        metavar="X.Y[.Z],...",
        spec=False,
    ),
    ImageOption(
        # Not build's --push (a switch, the tag's own registry): bake pushes under this registry.
        name="push_registry",
        flags=("--push",),
        form="value",
        commands=frozenset({BAKE}),
        help="Push each image that passed verification as REGISTRY/TAG (a host, a port, a path).",
        docs_option="`--push REGISTRY`",
        docs_meaning=(
            "push each image that passed verification as `REGISTRY/<tag>` (refused together with "
            "`--no-verify`); a REGISTRY that is not `HOST[:PORT][/PATH]` exits 2 before anything builds"
        ),
        metavar="REGISTRY",
        spec=False,
    ),
    ImageOption(
        name="bake_file",
        flags=("--bake-file",),
        form="value",
        commands=frozenset({BAKE}),
        help="Also write the bake file this run used here.",
        docs_option="`--bake-file FILE`",
        docs_meaning=(
            "also write the bake file the run used there (atomically, at the end); a path that cannot be "
            "written exits 2 before anything builds"
        ),
        metavar="FILE",
        value_type=Path,
        spec=False,
    ),
    ImageOption(
        # Not the image's --ops: no 'all' here, and no value means the image's label.
        name="verify_ops",
        flags=("--ops",),
        form="value",
        commands=frozenset({VERIFY}),
        help="Comma-separated ops to check. Default: the image's io.imagegen.ops label.",
        spec=False,
    ),
    ImageOption(
        name="verify_timeout",
        flags=("--timeout",),
        form="value",
        commands=frozenset({VERIFY}),
        help="Give up after this long.",
        metavar="SECONDS",
        default=300.0,
        value_type=float,
        show_default=True,  # --help has always said "[default: 300.0]"
        spec=False,
    ),
    ImageOption(
        name="gpus",
        flags=("--gpus",),
        form="value",
        commands=frozenset({VERIFY}),
        help=(
            "GPUs for the verify container (all, or indexes/UUIDs: 0,1): GPU ops then run their self-tests "
            "on them. Needs the NVIDIA container toolkit."
        ),
        metavar="all|IDS",
        spec=False,
    ),
    ImageOption(
        name="require_gpu",
        flags=("--require-gpu",),
        form="switch",
        commands=frozenset({VERIFY}),
        help="A GPU op's self-test skipped for want of a GPU fails verification.",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="verify_key",
        flags=("--key",),
        form="value",
        commands=frozenset({VERIFY}),
        help="Ed25519 or ECDSA P-256 public key (PEM): the provenance must be signed with its private key.",
        metavar="FILE",
        value_type=Path,
        spec=False,
    ),
    ImageOption(
        name="derived",
        flags=("--derived",),
        form="switch",
        commands=frozenset({VERIFY}),
        help=(
            "With --key: IMAGE is built FROM a signed image. Prove what the signature still covers (the "
            "signed layers, intact, and the op modules they hold) and list every added layer, file and "
            "setting as not covered. Without it, only the signed image itself passes."
        ),
        default=False,
        spec=False,
    ),
    ImageOption(
        name="provenance",
        flags=("--provenance",),
        form="switch",
        commands=frozenset({SBOM}),
        help="The provenance statement (in-toto, SLSA v1) instead of the SBOM.",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="signature",
        flags=("--signature",),
        form="switch",
        commands=frozenset({SBOM}),
        help="The provenance's signed DSSE envelope (images built with --sign-key).",
        default=False,
        spec=False,
    ),
    ImageOption(
        name="sbom_output",
        flags=("--output", "-o"),
        form="value",
        commands=frozenset({SBOM}),
        help="Write the document here, byte for byte ('-': stdout).",
        metavar="FILE",
        value_type=Path,
        spec=False,
    ),
    ImageOption(
        name="check_upstream",
        flags=("--check-upstream",),
        form="switch",
        commands=frozenset({CATALOG}),
        help=(
            "Compare the catalog with the package index: new torch releases and minors, new CUDA releases, "
            "stale defaults. Exit 1 when something is missing, 3 when the index cannot be read."
        ),
        default=False,
        spec=False,
    ),
    ImageOption(
        # Only read with --check-upstream: the command says so when it is given alone, and checks it
        # (catalog.checked_index_url) only then, as it checks pip's index URL taken in its place.
        name="index_url",
        flags=("--index-url",),
        form="value",
        commands=frozenset({CATALOG}),
        help=(
            "With --check-upstream: the index to read (a PEP 691 simple API). Default: the one pip installs "
            "from here (PIP_INDEX_URL, pip's configuration, else pip's own default)."
        ),
        metavar="URL",
        spec=False,
    ),
)
