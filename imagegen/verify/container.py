"""Verify an image: load every op inside a sealed container and report what loaded from where.

The container has no network, a read-only root file system, no capabilities, runs as a
non-root user, and gets only a small tmpfs at /tmp. Inside it ``python -m op_builder
verify --json OPS`` loads each op with JIT disabled; an op passes only if it loaded from
its ahead-of-time module (``source == "aot"``). A requested op the image does not report
fails too. The container is the engine's sealed run (``imagegen.engine.sealed``), always removed,
Ctrl-C and SIGTERM included.

Why an image could not be verified is worded in ``imagegen.verify.failures``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from imagegen.engine.images import inspect_local
from imagegen.engine.sealed import SealedRun, run_sealed
from imagegen.errors import BadInputError
from imagegen.imagespec.reference import check_reference
from imagegen.verify.failures import in_image_error, no_report_error, start_error
from op_builder import settings as op_settings
from op_builder.errors import UnknownOpError
from op_builder.registry import ALL_OPS
from op_builder.report import OpVerification, VerifyReport
from op_builder.suggest import did_you_mean

OPS_LABEL = "io.imagegen.ops"
# The longest --timeout taken: a day is far more than any image's ops need, and larger values
# overflow the socket timeouts below them (1e11 s was reported as "no daemon answers").
MAX_TIMEOUT_S = 86400.0
# Every sealed run of an image's Python loads only what was built ahead of time.
_SEALED_ENV = {op_settings.DISABLE_JIT.name: "1"}


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
    data = last_json_object(stdout)
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


def last_json_object(text: str) -> dict[str, Any] | None:
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
    start = time.monotonic()
    config = inspect_local(image)["Config"] or {}
    labels = config.get("Labels") or {}
    check_image_op_names(ops or (), labels)
    wanted = requested_ops(ops, labels)
    command = verify_command(wanted, require_gpu, selftest)
    exit_code, stdout, stderr = run_python(SealedRun(image, "verify", config, command, timeout, gpus))
    seconds = time.monotonic() - start
    result = parse_verify_output(stdout, wanted, image, seconds, gpus)
    if result is None:
        raise no_report_error(image, " ".join(command), exit_code, stdout + "\n" + stderr)
    return result


def run_python(run: SealedRun) -> tuple[int, str, str]:
    """``run`` (the image's ``python``: the verifier, the proof's probe, the size probe) in the
    engine's sealed run (``imagegen.engine.sealed.run_sealed``), with JIT builds off and the
    engine's refusal to start it worded as the verifier's (``failures.start_error``)."""
    refused = partial(start_error, run.image, gpus=run.gpus)
    return run_sealed(run, environment=_SEALED_ENV, refused=refused)
