"""The torch headers an image's stable ops compile against (``--stable-headers``), found for a run.

A build that pins them (``ImageSpec.stable_headers``) needs that release's ``include`` folder on
this machine before its context is staged: from imagegen's cache of headers, or read out of the
release's wheel on this machine's pip index (``imagegen.compat.headers``: about 10 MB with HTTP
range requests). Staging copies it into the context (``imagegen.building.staging``).
"""

from __future__ import annotations

from pathlib import Path

from imagegen import log
from imagegen.compat.headers import cached_include, fetch_headers
from imagegen.compat.pip_config import pip_index_url
from imagegen.errors import ImagegenError
from imagegen.imagespec.spec import ImageSpec
from imagegen.urls import redact


def pinned_headers(spec: ImageSpec) -> Path | None:
    """The include folder ``spec``'s stable ops compile against; None: the image's own torch's."""
    return None if spec.stable_headers is None else torch_include(spec.stable_headers)


def torch_include(version: str) -> Path:
    """torch ``version``'s include folder, from the cache or this machine's pip index.

    ``IndexUnreachableError`` (exit 3) and the other errors of ``fetch_headers``, with a hint
    that names ``--stable-headers own``."""
    cached = cached_include(version)
    if cached is not None:
        return cached
    index = pip_index_url()
    log.info(f"reading torch {version}'s headers out of its wheel on {redact(index)} (--stable-headers)")
    try:
        return fetch_headers(version, index)
    except ImagegenError as exc:
        raise type(exc)(
            exc.message,
            hint="--stable-headers own compiles against the image's own torch (its op modules then "
            "differ from other torch releases' images); or check the network and pip's index",
        ) from None
