"""The options table's rows for the commands that make no image (``standins``, ``matrix``,
``new-op``): every option of theirs but ``--json`` and ``matrix --op-source`` (the image
commands' row). Some read like the image options' (``--cuda``, ``--cpu``, ``--platform``) but mean
something else there, each under a name of its own and said in its help; the others are each
command's own (``matrix --out``, ``standins --force``, ``new-op --output``...). None has an
``IMAGEGEN_*`` variable, and docs/imagegen.md's options table lists none (``--help`` does)."""

from __future__ import annotations

from pathlib import Path

from imagegen.options.declared_target import AMD64
from imagegen.options.model import MATRIX, NEW_OP, STANDINS, ImageOption

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
)
