"""`make setup`: the development venv, with the torch the tests are written against.

    python3 scripts/setup_venv.py [--venv DIR] [--torch SPEC] [--dry-run]

Makes the venv (``--venv``, default .venv) when it has no Python yet, then installs into it,
from the index this machine's pip uses: current pip, setuptools and wheel; torch (``--torch``,
a pip requirement; default below); and this checkout, editable, with its cli, dev and parity
extras (no build isolation: the build uses that torch). An empty ``--torch`` is the default,
as make passes TORCH_SPEC through set or not. Only the standard library is used: this runs
before the venv exists. Each command is printed before it runs; the first that fails ends
the run with its exit status (2 on bad arguments).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The torch release the tests and the committed figures (docs/benchmarks.md) were taken with.
TORCH = "torch==2.13.0"
EXTRAS = "cli,dev,parity"


def commands(venv: Path, torch: str) -> list[list[str]]:
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q"]
    make = [] if (venv / "bin" / "python").exists() else [[sys.executable, "-m", "venv", str(venv)]]
    return [
        *make,
        [*pip, "--upgrade", "pip", "setuptools", "wheel"],
        [*pip, torch or TORCH],
        [*pip, "--no-build-isolation", "-e", f".[{EXTRAS}]"],
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--venv", type=Path, default=Path(".venv"), help="the venv (default .venv)")
    parser.add_argument("--torch", default="", help=f"torch's pip requirement (default {TORCH})")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    for command in commands(ROOT / args.venv, args.torch):
        print(shlex.join(command), flush=True)
        if not args.dry_run:
            code = subprocess.run(command, cwd=ROOT).returncode
            if code:
                return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
