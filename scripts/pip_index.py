"""Print the package index this machine's pip installs from, for a container build to use.

    python scripts/pip_index.py

A build container does not see the host's pip configuration, so `make image-cuda` and
`bench/image_size.py --cuda` pass this URL to `imagegen build --torch-index`: behind a
corporate mirror the image then installs torch from that mirror without edits, and this
repository names no index host. pip decides the URL as `pip install` would here:
PIP_INDEX_URL, then its configuration files (`pip config list`), then pip's own default.
Extra indexes (extra-index-url) are not carried. Exit 1, saying what to set instead, when
the index is a local path or file:// URL (a container cannot read it) or pip is set to
use no index.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from imagegen.compat.pip_config import pip_index_url

__all__ = ["pip_index_url"]


def main() -> int:
    try:
        print(pip_index_url())
    except (ImportError, ValueError) as exc:
        print(
            f"pip_index: {exc}; name an http(s) index for torch instead "
            "(CUDA_TORCH_INDEX=URL for make, --torch-index URL for imagegen and the bench)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
