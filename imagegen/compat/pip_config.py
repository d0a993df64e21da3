"""The package index this machine's pip installs from: where imagegen reads upstream by default.

pip decides the URL as ``pip install`` would here: PIP_INDEX_URL, then its configuration files
(``pip config list``), then pip's own default. So behind a corporate mirror imagegen reads that
mirror without being told, and the repository names no index host of its own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from imagegen.urls import redact


def pip_install_options() -> Any:
    """pip's options for ``pip install`` as the environment and its config files set them.

    ImportError without pip.
    """
    # pip has no public API for its resolved options; its command's own option parser (the one
    # `pip install` runs, pip._internal.commands.create_command since pip 19.3) is the only
    # way to get the precedence of environment, config sections and default exactly right.
    from pip._internal.commands import create_command

    options, _ = create_command("install").parse_args([])
    return options


def pip_index_url() -> str:
    """The index URL pip resolves for ``pip install`` from the environment and its config files.

    ValueError when pip is set to use no index, or one a container build could not read (a
    local path or file:// URL); ImportError without pip.
    """
    options = pip_install_options()
    if options.no_index:
        raise ValueError("pip is configured with no-index (only --find-links folders)")
    url = str(options.index_url)
    if urlsplit(url).scheme not in ("http", "https"):
        # Whatever its scheme, the URL may carry a user and password: never shown (imagegen.urls).
        raise ValueError(f"pip's index is {redact(url)}, which a container build cannot read")
    return url
