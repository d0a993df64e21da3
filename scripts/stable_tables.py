"""Write op_builder/data's two tables of the stable-ABI symbol check from their sources.

* stable_shims.txt: torch's C shims added from 2.10 on, each with the release that added it, read
  from the version guards of the installed torch's headers (``op_builder.stable_abi
  .shims_from_headers``); entries of releases newer than the installed torch are kept, so run it
  with the newest torch at hand.
* abi3_symbols.txt: CPython's stable ABI as of 3.10 (functions and data), from abi3info.

    python scripts/stable_tables.py          # rewrite both
    python scripts/stable_tables.py --check  # exit 1 when either would change
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import abi3info
import torch

from op_builder import stable_abi


def shim_lines() -> list[str]:
    table = dict(stable_abi.shim_versions()) if stable_abi.SHIM_TABLE.exists() else {}
    table.update(stable_abi.shims_from_headers(Path(torch.__file__).parent / "include"))
    rows = sorted(table.items(), key=lambda item: (item[1], item[0]))
    return [f"{name} {major}.{minor}" for name, (major, minor) in rows]


def abi3_lines() -> list[str]:
    limit = stable_abi.LIMITED_API_PYTHON
    members = [*abi3info.FUNCTIONS.values(), *abi3info.DATAS.values()]
    return sorted({m.symbol.linux for m in members if (m.added.major, m.added.minor) <= limit})


HEADERS = {
    stable_abi.SHIM_TABLE: "# torch C shims added from 2.10 on: NAME RELEASE (older shims are not listed).\n"
    "# Written by scripts/stable_tables.py from torch's headers; do not edit.\n",
    stable_abi.ABI3_TABLE: "# CPython's stable ABI as of 3.10: the symbols a limited-API module may take.\n"
    "# Written by scripts/stable_tables.py from abi3info; do not edit.\n",
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a table would change")
    args = parser.parse_args(argv)
    stale = []
    for path, lines in ((stable_abi.SHIM_TABLE, shim_lines()), (stable_abi.ABI3_TABLE, abi3_lines())):
        text = HEADERS[path] + "".join(f"{line}\n" for line in lines)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path} ({len(lines)} entries)")
    if args.check and stale:
        print("out of date: " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
