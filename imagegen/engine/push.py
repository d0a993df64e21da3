"""Pushing an image to the registry its name points at: through the docker CLI when there is
one (its credential helpers and ``docker login`` apply), else through the Docker SDK.

What follows a push (the proof's referrers, the cosign tags, an index) is ``imagegen.oci``'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from imagegen.engine.client import connection, explanation
from imagegen.engine.images import split_tag
from imagegen.engine.process import stream_process
from imagegen.engine.progress import LogView
from imagegen.engine.types import Engine
from imagegen.errors import BuildFailedError


def push_image(engine: Engine, tag: str) -> None:
    """Push ``tag`` to the registry its name points at (CLI when there is one: credential helpers)."""
    if engine.client is not None:
        _push_cli(engine.client, tag)
    else:
        _push_sdk(tag)


def _push_cli(client: str, tag: str) -> None:
    view = LogView("buildkit", plain=True)
    try:
        rc = stream_process([client, "push", tag], os.environ, view)
    finally:
        view.close()
    if rc != 0:
        raise BuildFailedError(f"pushing {tag} failed", hint=_push_hint(view.lines))


def _push_sdk(tag: str) -> None:
    import docker  # deferred for the reason imagegen.engine.client gives

    lines: list[str] = []
    with connection(f"pushing {tag}", timeout=None) as client:
        repository, version = split_tag(tag)
        try:
            for item in client.api.push(repository, tag=version, stream=True, decode=True):
                text = str(item.get("error") or item.get("status") or "")
                if text:
                    lines.append(text)
                    print(text, file=sys.stderr, flush=True)
                if "error" in item:
                    raise BuildFailedError(f"pushing {tag} failed: {item['error']}", hint=_push_hint(lines))
        except docker.errors.APIError as exc:  # refused before any progress (no such image, ...)
            raise BuildFailedError(
                f"pushing {tag} failed: {explanation(exc)}", hint=_push_hint(lines)
            ) from exc


def _push_hint(lines: Iterable[str]) -> str:
    tail = list(lines)[-10:]
    return "check the registry address and `docker login`; last output:\n" + "\n".join(tail)
