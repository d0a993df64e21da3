"""Stage 5, publishing: the one place imagegen pushes, and its one rule, that only an image
whose every op verified leaves this machine.

``check_push_request`` refuses, before any work, a push that no verification would precede;
``publish`` pushes after a passing verification and does nothing otherwise. Pushing goes through
the docker CLI when there is one (its credential helpers and ``docker login`` apply), else
the Docker SDK.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from imagegen.build.engine.client import docker_client
from imagegen.build.engine.process import stream_process
from imagegen.build.engine.progress import LogView
from imagegen.build.engine.types import Engine
from imagegen.errors import BadInputError, BuildFailedError
from imagegen.verify.image import VerifyResult


def check_push_request(push: bool, verify: bool) -> None:
    """BadInputError for ``--push`` with ``--no-verify``: nothing is pushed unverified."""
    if push and not verify:
        raise BadInputError(
            "--push with --no-verify: images are pushed only after verification passed",
            hint="drop --no-verify, or push the image yourself",
        )


def publish(engine: Engine, tag: str, verified: VerifyResult | None) -> bool:
    """Push ``tag`` when its verification passed; True when it was pushed. An image not
    verified (``verified`` None) or failing verification is never pushed."""
    if verified is None or not verified.ok:
        return False
    push_image(engine, tag)
    return True


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
    client = docker_client(os.environ, timeout=None)
    lines: list[str] = []
    try:
        repository, _, version = tag.rpartition(":") if _has_tag(tag) else (tag, "", "latest")
        for item in client.api.push(repository, tag=version, stream=True, decode=True):
            text = str(item.get("error") or item.get("status") or "")
            if text:
                lines.append(text)
                print(text, file=sys.stderr, flush=True)
            if "error" in item:
                raise BuildFailedError(f"pushing {tag} failed: {item['error']}", hint=_push_hint(lines))
    finally:
        client.close()


def _has_tag(name: str) -> bool:
    # registry:5000/repo has a port, not a tag: a tag is after the last "/".
    return ":" in name.rsplit("/", 1)[-1]


def _push_hint(lines: Iterable[str]) -> str:
    tail = list(lines)[-10:]
    return "check the registry address and `docker login`; last output:\n" + "\n".join(tail)
