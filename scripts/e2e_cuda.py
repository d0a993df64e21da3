"""The checks of ``scripts/e2e_cuda.sh``, run with the Python of its CUDA venv.

    python scripts/e2e_cuda.py torch-is-cuda             # the venv's torch is a CUDA build
    python scripts/e2e_cuda.py aot VERIFY_JSON OP [OP...] # each op loaded ahead of time

``aot`` reads the report of ``python -m op_builder verify --json`` and requires every named
op in it, ok, loaded from its ahead-of-time module (``source`` "aot"), and the report's
``ok``. Only the standard library and (for ``torch-is-cuda``) torch are imported: the venv
holds the installed wheel, not this checkout.

Exit status: 0 when the check holds; 1, with the reason, when it does not; 2 on bad arguments
or a report that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def torch_is_cuda() -> int:
    import torch

    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    if torch.version.cuda is None:
        print("the installed torch is not a CUDA build", file=sys.stderr)
        return 1
    return 0


def not_ahead_of_time(report: Mapping[str, Any], wanted: Sequence[str]) -> list[str]:
    """The ops of ``wanted`` the verify report does not show ok and loaded from ``aot``."""
    by_name = {op["name"]: op for op in report["ops"]}
    return [
        name for name in wanted if by_name.get(name, {}).get("source") != "aot" or not by_name[name]["ok"]
    ]


def check_aot(path: Path, wanted: Sequence[str]) -> int:
    try:
        report = json.loads(path.read_text())
        bad = not_ahead_of_time(report, wanted)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"e2e_cuda: cannot read the verify report {path}: {exc!r}", file=sys.stderr)
        return 2
    if bad or not report["ok"]:
        print(f"not loaded ahead of time: {', '.join(bad) or 'see report'}", file=sys.stderr)
        return 1
    print(
        f"all {len(wanted)} GPU ops load from their AOT modules "
        f"(torch {report.get('torch')}, CUDA {report.get('cuda')})"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("torch-is-cuda", help="the installed torch is a CUDA build")
    aot = commands.add_parser("aot", help="every op named is loaded from its ahead-of-time module")
    aot.add_argument("report", type=Path, help="the JSON of `python -m op_builder verify --json`")
    aot.add_argument("ops", nargs="+", help="the ops that must be in it")
    args = parser.parse_args(argv)
    if args.command == "torch-is-cuda":
        return torch_is_cuda()
    return check_aot(args.report, args.ops)


if __name__ == "__main__":
    sys.exit(main())
