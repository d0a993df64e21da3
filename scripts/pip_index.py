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
from urllib.parse import urlsplit


def pip_index_url() -> str:
    """The index URL pip resolves for ``pip install`` from the environment and its config files."""
    # pip has no public API for its resolved options; its command's own option parser (the one
    # `pip install` runs, pip._internal.commands.create_command since pip 19.3) is the only
    # way to get the precedence of environment, config sections and default exactly right.
    from pip._internal.commands import create_command

    options, _ = create_command("install").parse_args([])
    if options.no_index:
        raise ValueError("pip is configured with no-index (only --find-links folders)")
    url = str(options.index_url)
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"pip's index is {url}, which a container build cannot read")
    return url


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
