"""Verify an image: load every op inside a sealed container and report what loaded from where.

The container has no network, a read-only root file system, no capabilities, runs as a
non-root user, and gets only a small tmpfs at /tmp. Inside it ``python -m op_builder
verify --json OPS`` loads each op with JIT disabled; an op passes only if it loaded from
its ahead-of-time module (``source == "aot"``). A requested op the image does not report
fails too. The container is always removed, Ctrl-C and SIGTERM included.

Why an image could not be verified is worded in ``imagegen.verify.failures``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagegen.engine.client import docker_client
from imagegen.engine.images import inspect_local
from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.imagespec.reference import check_reference
from imagegen.verify.failures import (
    StreamTail,
    in_image_error,
    no_report_error,
    start_error,
)
from op_builder import settings as op_settings
from op_builder.errors import UnknownOpError
from op_builder.registry import ALL_OPS
from op_builder.report import OpVerification, VerifyReport
from op_builder.suggest import did_you_mean

VERIFY_LABEL = "io.imagegen.verify"
OPS_LABEL = "io.imagegen.ops"
# The user a verify container runs as when the image itself says root (or nothing).
FALLBACK_USER = "65534:65534"
# The longest --timeout taken: a day is far more than any image's ops need, and larger values
# overflow the socket timeouts below them (1e11 s was reported as "no daemon answers").
MAX_TIMEOUT_S = 86400.0


@dataclass(frozen=True)
class VerifyResult:
    """What verifying one image found: every requested op's entry (``op_builder.report``)."""

    image: str
    ok: bool
    torch: str
    cuda: str | None
    hip: str | None
    ops: tuple[OpVerification, ...]
    seconds: float
    gpus: str | None = None  # what --gpus passed to the container; None: no GPU

    @property
    def gpu_selftests_skipped(self) -> tuple[str, ...]:
        """GPU ops whose self-test did not run for want of a GPU (their load and audit did)."""
        return tuple(
            op.name
            for op in self.ops
            if op.selftest is not None and op.selftest.skipped and op.selftest.device == "cuda"
        )

    @property
    def cpu_selftests_skipped(self) -> tuple[tuple[str, str], ...]:
        """CPU ops whose self-test could not run here, and why (``async_io`` under emulation)."""
        return tuple(
            (op.name, op.selftest.skipped)
            for op in self.ops
            if op.selftest is not None and op.selftest.skipped and op.selftest.device == "cpu"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "ok": self.ok,
            "torch": self.torch,
            "cuda": self.cuda,
            "hip": self.hip,
            "seconds": round(self.seconds, 3),
            "gpus": self.gpus,
            "ops": [op.to_json() for op in self.ops],
        }

    def failure_summary(self) -> str:
        """One line naming each failed op and what differed."""
        failed = [f"{op.name} ({'; '.join(op.problems())})" for op in self.ops if not op.ok]
        return ", ".join(failed) or "no op was verified"


# --------------------------------------------------------------------------- pure parts


def parse_verify_output(
    stdout: str, requested: Sequence[str] | None, image: str, seconds: float, gpus: str | None = None
) -> VerifyResult | None:
    """The result from ``op_builder verify --json`` output, or None when there is no JSON in it.

    Verdicts are recomputed (``op_builder.report``) rather than trusted, and every requested
    op (or, with none requested, every reported op, of which there must be at least one)
    must be reported and pass. The verifier's own error document (``{"error": ...}``: it could
    not check any op) raises VerificationFailedError with its message.
    """
    data = _last_json_object(stdout)
    if data is None:
        return None
    error = data.get("error")
    if isinstance(error, Mapping) and not data.get("ops"):
        raise in_image_error(image, error)
    report = VerifyReport.from_json(data)
    reported = {op.name: op for op in report.ops}
    names = list(requested) if requested else list(reported)
    ops = tuple(reported.get(name) or OpVerification.not_reported(name) for name in names)
    return VerifyResult(
        image=image,
        ok=bool(ops) and all(op.ok for op in ops),
        torch=report.torch,
        cuda=report.cuda,
        hip=report.hip,
        ops=ops,
        seconds=seconds,
        gpus=gpus,
    )


def _last_json_object(text: str) -> dict[str, Any] | None:
    # The verifier prints one JSON document; anything a sitecustomize or a warning printed
    # before it is skipped by trying each "{" that starts a line, last first.
    starts = [i for i, ch in enumerate(text) if ch == "{" and (i == 0 or text[i - 1] == "\n")]
    for start in reversed(starts):
        try:
            data = json.loads(text[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    return None


def label_ops(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The ops the image's io.imagegen.ops label lists."""
    return tuple(op.strip() for op in labels.get(OPS_LABEL, "").split(",") if op.strip())


def requested_ops(ops: Sequence[str] | None, labels: Mapping[str, str]) -> tuple[str, ...] | None:
    """Ops to check: those asked for, else those the image's io.imagegen.ops label lists, else all."""
    if ops:
        return tuple(ops)
    return label_ops(labels) or None


def check_image_op_names(ops: Sequence[str], labels: Mapping[str, str]) -> None:
    """UnknownOpError for a name that is neither one of ours nor an op the image's labels list
    (an op package's op is known to the image, not necessarily here)."""
    known = [*ALL_OPS, *(op for op in label_ops(labels) if op not in ALL_OPS)]
    for name in ops:
        if name not in known:
            raise UnknownOpError(
                f"unknown op {name!r}: not one of ours, and the image's {OPS_LABEL} label does not list it",
                hint=did_you_mean(name, known) or "ops here and in the image: " + ", ".join(known),
            )


def run_user(image_user: str) -> str:
    """The image's own user when it is not root, else an unprivileged one."""
    user = image_user.strip()
    name = user.split(":", 1)[0]
    if not user or name in ("root", "0"):
        return FALLBACK_USER
    return user


def verify_command(ops: Sequence[str] | None, require_gpu: bool = False, selftest: bool = True) -> list[str]:
    options = (["--require-gpu"] if require_gpu else []) + ([] if selftest else ["--no-selftest"])
    return ["python", "-m", "op_builder", "verify", "--json", *options, *(ops or ())]


def parse_gpus(value: str | None) -> str | None:
    """``--gpus``: ``all``, or a comma-separated list of device indexes or UUIDs; None: no GPU."""
    if value is None:
        return None
    text = value.strip()
    items = [item.strip() for item in text.split(",")]
    if text.lower() == "all":
        return "all"
    if not text or not all(re.fullmatch(r"[0-9]+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F/-]+", i) for i in items):
        raise BadInputError(
            f"--gpus {value!r} is not a GPU selection",
            hint="use --gpus all, or device indexes or UUIDs: --gpus 0,1 or --gpus GPU-3f2a...",
        )
    return ",".join(items)


def device_requests(gpus: str | None) -> list[Any]:
    """The engine's device requests for ``gpus`` (the NVIDIA container toolkit serves them)."""
    if gpus is None:
        return []
    # Deferred for the reason imagegen.engine.client gives.
    from docker.types import DeviceRequest

    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]


def check_verify_input(image: str, timeout: float) -> None:
    """Bad input (exit 2) before the engine is touched: the daemon would answer a malformed
    reference or a zero timeout with an API error, not a message a user can act on."""
    check_reference("IMAGE", image)
    if not math.isfinite(timeout) or timeout <= 0:
        raise BadInputError(
            f"--timeout {timeout:g} is not a positive number of seconds",
            hint="for example --timeout 300 (the default)",
        )
    if timeout > MAX_TIMEOUT_S:
        raise BadInputError(
            f"--timeout {timeout:g} is longer than a day ({MAX_TIMEOUT_S:.0f} seconds), the most taken",
            hint="for example --timeout 300 (the default), or 3600 for slow GPU self-tests",
        )


# --------------------------------------------------------------------------- running


def verify_image(
    image: str,
    ops: Sequence[str] | None = None,
    timeout: float = 300,
    gpus: str | None = None,
    require_gpu: bool = False,
    selftest: bool = True,
) -> VerifyResult:
    """Verify ``ops`` (default: the image's io.imagegen.ops label, else every installed op) in
    ``image``: load, self-test (on the GPUs ``gpus`` passes, see ``parse_gpus``) and audit each.

    Raises BadInputError for a malformed reference or timeout and when the image is not
    here, VerificationFailedError when the verifier could not run at all (no Python, no
    op_builder, timed out).
    """
    check_verify_input(image, timeout)
    client = docker_client(os.environ, timeout=max(60, int(timeout) + 30))
    start = time.monotonic()
    try:
        config = inspect_local(client, image)["Config"] or {}
        labels = config.get("Labels") or {}
        check_image_op_names(ops or (), labels)
        wanted = requested_ops(ops, labels)
        command = verify_command(wanted, require_gpu, selftest)
        exit_code, stdout, stderr = run_sealed(client, image, "verify", config, command, timeout, gpus)
    finally:
        client.close()
    seconds = time.monotonic() - start
    result = parse_verify_output(stdout, wanted, image, seconds, gpus)
    if result is None:
        raise no_report_error(image, " ".join(command), exit_code, stdout + "\n" + stderr)
    return result


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


def run_sealed(
    client: Any,
    image: str,
    purpose: str,
    config: Mapping[str, Any],
    command: Sequence[str],
    timeout: float,
    gpus: str | None = None,
) -> tuple[int, str, str]:
    """Run ``command`` in a sealed container of ``image`` (``config``: the image's Config) named
    ``imagegen-<purpose>-<random>``; (exit code, stdout, stderr). The container is always removed:
    by name, so a Ctrl-C that lands between its creation and any assignment still cleans up, with a
    second Ctrl-C or SIGTERM held until that is done."""
    name = f"imagegen-{purpose}-{uuid.uuid4().hex[:12]}"
    try:
        return _run_sealed(client, image, name, config, command, timeout, gpus)
    finally:
        with _interrupts_deferred():
            _remove(client, name)


def _run_sealed(
    client: Any,
    image: str,
    name: str,
    config: Mapping[str, Any],
    command: Sequence[str],
    timeout: float,
    gpus: str | None,
) -> tuple[int, str, str]:
    import docker
    import requests

    options = sealed_container_options()
    options["environment"][op_settings.DISABLE_JIT.name] = "1"
    try:
        container = client.containers.create(
            image,
            # The image's ENTRYPOINT (a shell, tini, a server) would get the verifier's command
            # as its arguments: the verifier is the entrypoint instead.
            entrypoint=list(command[:1]),
            command=list(command[1:]),
            device_requests=device_requests(gpus),
            name=name,
            user=run_user(str(config.get("User") or "")),
            labels={VERIFY_LABEL: "1"},
            detach=True,
            **options,
        )
        container.start()
    except docker.errors.APIError as exc:  # the edge where the engine's refusals enter: translated once
        raise start_error(image, str(exc.explanation or exc), gpus) from exc
    try:
        status = container.wait(timeout=timeout)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
        raise VerificationFailedError(
            f"verifying {image} did not finish within {timeout:.0f}s",
            hint="an op may hang while loading; pass a longer timeout or check the image by hand",
        ) from exc
    stdout = _log_tail(container.logs(stdout=True, stderr=False, stream=True, follow=False))
    stderr = _log_tail(container.logs(stdout=False, stderr=True, stream=True, follow=False))
    return int(status.get("StatusCode", -1)), stdout, stderr


def _log_tail(chunks: Iterable[bytes]) -> str:
    # Streamed and cut to a tail: an image that prints hundreds of megabytes at start must not
    # cost that much memory here, nor end up in an error message.
    return StreamTail().feed_all(chunks).text()


# How long a removal waits for a container the engine is still creating (see _remove).
CREATE_GRACE_S = 10.0


def _remove(client: Any, name: str, grace: float = CREATE_GRACE_S) -> None:
    """Remove the verify container ``name``, whatever state it is in.

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
def _interrupts_deferred() -> Iterator[None]:
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
