"""The options table's rows for the commands that make no image (``standins``, ``matrix``,
``new-op``): flags that read like the image options' (``--cuda``, ``--cpu``, ``--platform``) but
mean something else there, each under a name of its own and said in its help. None has an
``IMAGEGEN_*`` variable, and docs/imagegen.md's options table lists none (``--help`` does)."""

from __future__ import annotations

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
)
