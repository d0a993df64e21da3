"""A command run in a sealed container of an image, and the container always removed.

The container has no network, a read-only root file system, no capabilities or privilege gain,
few processes, runs as a non-root user and gets only a small tmpfs at /tmp. The verifier, the
proof's probe and the size probe all run here; what their output means is theirs to say, and so
is the wording of the engine's refusal to start one (``refused``).
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.engine.client import connection
from imagegen.errors import UserFacingError, VerificationFailedError

# Every sealed container carries this label, so what a Ctrl-C might leave behind can be found.
SEALED_LABEL = "io.imagegen.verify"
# The user a sealed container runs as when the image itself says root (or nothing).
FALLBACK_USER = "65534:65534"
# The most of each output stream kept (the tail: the verifier's report is printed last; it is a
# few kilobytes per op, so this holds hundreds of ops).
STREAM_TAIL_BYTES = 4 * 1024 * 1024
# How long a removal waits for a container the engine is still creating (see remove_container).
CREATE_GRACE_S = 10.0


def sealed_container_options() -> dict[str, Any]:
    """Docker SDK ``containers.create``/``run`` options of the sealed container: no network, a
    read-only root, no capabilities or privilege gain, few processes, a small tmpfs at /tmp.

    A fresh dict each call, so a caller may add to its environment.
    """
    return {
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,size=256m"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": 512,
        # HOME on the tmpfs: the image's home is read-only here and torch may cache under it.
        "environment": {"HOME": "/tmp", "TMPDIR": "/tmp"},
    }


def run_user(image_user: str) -> str:
    """The image's own user when it is not root, else an unprivileged one."""
    user = image_user.strip()
    name = user.split(":", 1)[0]
    if not user or name in ("root", "0"):
        return FALLBACK_USER
    return user


def device_requests(gpus: str | None) -> list[Any]:
    """The engine's device requests for ``gpus`` (the NVIDIA container toolkit serves them)."""
    if gpus is None:
        return []
    # Deferred for the reason imagegen.engine.client gives.
    from docker.types import DeviceRequest

    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]


@dataclass(frozen=True)
class SealedRun:
    """One command for a sealed container: ``command`` in a container of ``image`` (``config``:
    the image's Config), named for ``purpose`` (verify, proof, size), given ``timeout`` seconds,
    with the GPUs ``gpus`` names (``all``, ``0,1``; None: none)."""

    image: str
    purpose: str
    config: Mapping[str, Any]
    command: Sequence[str]
    timeout: float
    gpus: str | None = None


def run_sealed(
    run: SealedRun, *, environment: Mapping[str, str], refused: Callable[[str], UserFacingError]
) -> tuple[int, str, str]:
    """Run ``run`` in a sealed container named ``imagegen-<purpose>-<random>``; (exit code,
    stdout, stderr), each cut to its tail.

    ``environment`` is added to the container's; ``refused`` words the engine's refusal to start
    the container (its explanation in, the error raised out). The container is always removed:
    by name, so a Ctrl-C that lands between its creation and any assignment still cleans up, with
    a second Ctrl-C or SIGTERM held until that is done."""
    name = f"imagegen-{run.purpose}-{uuid.uuid4().hex[:12]}"
    # Longer than the container may run: no request of the run gives up before the wait for it.
    wait = max(60, int(run.timeout) + 30)
    with connection(f"running the {run.purpose} container of {run.image}", wait) as client:
        try:
            return _run(client, run, name, environment, refused)
        finally:
            with interrupts_deferred():
                remove_container(client, name)


def _run(
    client: Any,
    run: SealedRun,
    name: str,
    environment: Mapping[str, str],
    refused: Callable[[str], UserFacingError],
) -> tuple[int, str, str]:
    import docker
    import requests

    options = sealed_container_options()
    options["environment"].update(environment)
    try:
        container = client.containers.create(
            run.image,
            # The image's ENTRYPOINT (a shell, tini, a server) would get the command as its
            # arguments: the command's program is the entrypoint instead.
            entrypoint=list(run.command[:1]),
            command=list(run.command[1:]),
            device_requests=device_requests(run.gpus),
            name=name,
            user=run_user(str(run.config.get("User") or "")),
            labels={SEALED_LABEL: "1"},
            detach=True,
            **options,
        )
        container.start()
    except docker.errors.APIError as exc:  # the edge where the engine's refusals enter: translated once
        raise refused(str(exc.explanation or exc)) from exc
    try:
        status = container.wait(timeout=run.timeout)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
        raise VerificationFailedError(
            f"the {run.purpose} container of {run.image} did not finish within {run.timeout:.0f}s",
            hint="it may hang while loading; pass a longer timeout or check the image by hand",
        ) from exc
    return int(status.get("StatusCode", -1)), _tail(container, stdout=True), _tail(container, stdout=False)


def _tail(container: Any, stdout: bool) -> str:
    return (
        StreamTail()
        .feed_all(container.logs(stdout=stdout, stderr=not stdout, stream=True, follow=False))
        .text()
    )


class StreamTail:
    """The last ``limit`` bytes of a stream fed in chunks: memory stays bounded however much
    an image prints at start (hundreds of megabytes), and what it printed last is kept."""

    def __init__(self, limit: int = STREAM_TAIL_BYTES) -> None:
        self.limit = limit
        self.total = 0
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._buffer += chunk[-self.limit :]
        if len(self._buffer) > 2 * self.limit:  # trimmed now and then, not on every chunk
            del self._buffer[: len(self._buffer) - self.limit]

    def feed_all(self, chunks: Iterable[bytes]) -> StreamTail:
        for chunk in chunks:
            self.feed(chunk)
        return self

    def text(self) -> str:
        kept = bytes(self._buffer[-self.limit :])
        text = kept.decode("utf-8", "replace")
        if self.total > len(kept):
            dropped = self.total - len(kept)
            # Start at a line boundary so a cut line does not look like the image's own.
            text = f"[... {dropped} bytes of earlier output left out]\n" + text.split("\n", 1)[-1]
        return text


def remove_container(client: Any, name: str, grace: float = CREATE_GRACE_S) -> None:
    """Remove the container ``name``, whatever state it is in.

    A Ctrl-C can abort the create request while the engine is still making the container: it
    is then listed under its name but not yet removable (NotFound, or a conflict), and would
    be left behind once made. So while the engine lists it, keep trying, for up to ``grace``
    seconds.
    """
    import docker

    deadline = time.monotonic() + grace
    while True:
        try:
            client.api.remove_container(name, force=True)
            return
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409 or time.monotonic() >= deadline:  # 409: still being created
                raise
        listed = client.api.containers(all=True, quiet=True, filters={"name": f"^/{re.escape(name)}$"})
        if not listed or time.monotonic() >= deadline:
            return
        time.sleep(0.1)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold a second Ctrl-C or SIGTERM until the cleanup inside is done (main thread only)."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
