"""Compile every op against every torch minor the catalog admits, and every toolkit here.

    python scripts/compat.py                 # everything: make compat (long; results cached)
    python scripts/compat.py --sample        # CI's sample: the CPU ops, oldest and newest torch
    python scripts/compat.py --torch 2.4,2.5 # some minors (host code only unless --device)
    python scripts/compat.py --torch 2.16    # a torch the catalog does not know yet: make compat TORCH=2.16

--torch takes minors the catalog admits (at the release the catalog names) and any other final
torch release, X.Y (the newest X.Y.* the package index publishes) or X.Y.Z (published there):
what ``imagegen catalog --check-upstream`` asks for before a new torch goes into the catalog.
Such a release gets both the CPU ops and the GPU ops' bindings (a new torch breaks either), and
with --device the device code under the C++ standard it asks for, with the newest toolkits
here. Its row lands in the results under its minor like any other; no target admits it yet.

Host code: each op's sources (the GPU ops' bindings) with op_builder's flags for that torch
release, against the headers of its wheel on this machine's pip index (read in place with HTTP
ranges, cached under ~/.cache/imagegen/torch-headers). Device code: each .cu file with each
nvcc / hipcc here or in a CUDA stand-in image. Results go to imagegen/data/compat.json (not for
--sample) and their tables to docs/compat.md.

Exit status: 0 when everything compiled; 1 when something failed (listed); 2 on bad arguments
(a --torch release the index does not publish among them) or an index without what is needed
(the JSON simple API, the release's wheel); 3 when the package index cannot be reached to look
up a --torch release the catalog does not know.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from imagegen.compat import check, results  # noqa: E402
from imagegen.errors import IndexUnreachableError, UserFacingError  # noqa: E402

DOCS = ROOT / "docs" / "compat.md"


def _index_url(given: str | None) -> str:
    if given:
        return given
    sys.path.insert(0, str(ROOT / "scripts"))
    from pip_index import pip_index_url

    return pip_index_url()


def _selection(args: argparse.Namespace, index_url: str) -> check.Selection:
    if args.sample:
        return check.sample_selection()
    if args.device_only:
        return check.Selection((), (), device=True)
    if not args.torch:
        return check.full_selection()
    wanted = [m.strip() for m in args.torch.split(",") if m.strip()]
    if not wanted:
        raise ValueError("--torch names no torch version")
    return check.torch_selection(wanted, index_url, device=args.device)


def _error(exc: UserFacingError) -> int:
    """One line for the error (no traceback); 3 for an index that cannot be read, else 2."""
    print(f"compat: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
    return 3 if isinstance(exc, IndexUnreachableError) else 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0],
        epilog="exit status: 0 all compiled, 1 something failed, 2 bad arguments (a --torch release "
        "the index does not publish), 3 the package index cannot be reached",
    )
    parser.add_argument("--sample", action="store_true", help="CI's sample; writes nothing")
    parser.add_argument(
        "--torch",
        metavar="X.Y[.Z],...",
        help="only these torch minors; one the catalog does not admit is looked up on the index "
        "(X.Y: its newest release there, X.Y.Z: that release) and gets the GPU bindings too",
    )
    parser.add_argument("--device", action="store_true", help="with --torch: the device code too")
    parser.add_argument("--device-only", action="store_true", help="only the device code")
    parser.add_argument("--no-cache", action="store_true", help="compile even what a cached result covers")
    parser.add_argument("--jobs", type=int, default=1, help="compiles at a time (default 1)")
    parser.add_argument("--index-url", help="the package index to read torch wheels from (default: pip's)")
    parser.add_argument("--results", type=Path, default=results.RESULTS_FILE, help="results file to update")
    args = parser.parse_args(argv)
    try:
        index = _index_url(args.index_url)
        selection = _selection(args, index)
    except (ValueError, ImportError) as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2
    except UserFacingError as exc:
        return _error(exc)
    for minor, release in selection.releases.items():
        print(f"compat: torch {minor} is {release} on the index; no catalog target admits it yet")
    path = None if args.sample else args.results
    try:
        run = check.check(selection, index, path, use_cache=not args.no_cache, workers=args.jobs)
    except UserFacingError as exc:
        return _error(exc)
    if path is not None and path.resolve() == results.RESULTS_FILE:
        # The docs show the committed results only, not a scratch file's.
        DOCS.write_text(results.markdown(run.data))
    if run.failures:
        print(f"compat: {len(run.failures)} failed:\n  " + "\n  ".join(run.failures))
        return 1
    print("compat: every source compiled" + ("" if path else " (the sample)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
