"""The Python steps of ``scripts/gpu_proof.sh``, run with the Python it tests.

    python scripts/gpu_proof.py env        # python, torch, its CUDA, the GPU and its capability
    python scripts/gpu_proof.py load OP    # JIT-build (or load) one op from this checkout, timed

Exit status: 0 on success; 1 when torch sees no CUDA GPU (env); op_builder's exit code when
the op does not load (1 failed, 2 bad input; its message and hint, a traceback only with
OP_BUILDER_DEBUG=1); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout


def describe_env() -> int:
    import torch

    if not torch.cuda.is_available():
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA GPU", file=sys.stderr)
        return 1
    print(
        "python",
        sys.version.split()[0],
        "torch",
        torch.__version__,
        "cuda",
        torch.version.cuda,
        torch.cuda.get_device_name(),
        torch.cuda.get_device_capability(),
    )
    return 0


def load(op: str) -> int:
    from op_builder import UserFacingError, get_builder, settings

    start = time.time()
    try:
        get_builder(op).load()
    except UserFacingError as exc:
        if os.environ.get(settings.DEBUG.name) == "1":
            raise
        print(f"{op}: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return exc.exit_code
    print(f"{op} loaded in {time.time() - start:.1f}s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("env", help="python, torch, its CUDA, the GPU and its capability")
    load_step = steps.add_parser("load", help="JIT-build (or load) one op, timed")
    load_step.add_argument("op")
    args = parser.parse_args(argv)
    return describe_env() if args.step == "env" else load(args.op)


if __name__ == "__main__":
    sys.exit(main())
