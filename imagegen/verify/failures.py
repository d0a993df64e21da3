"""Why an image could not be verified, in words: the verifier's refusals, crashes and in-image errors.

Pure functions over what the engine and the verifier said, so tests feed them captured text.
Each returns a ``VerificationFailedError`` (exit 1: the image exists but cannot pass), led by
the line that says what went wrong; the verifier's output comes after, in the hint, bounded:
an image may print any amount at start, and the error must stay one screenful.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

from imagegen.engine.build_log import without_tracebacks
from imagegen.errors import VerificationFailedError

# Lines of the verifier's output put into a hint, and characters kept of each.
OUTPUT_TAIL_LINES = 30
OUTPUT_LINE_CHARS = 500

# What a verifier killed by a signal most likely met, by signal.
_SIGNAL_CAUSES = {
    signal.SIGBUS: "a truncated or damaged file mapped in memory, usually an op's module "
    "(a copy cut short, a full disk while the image was written): rebuild the image",
    signal.SIGSEGV: "a crash in native code, an op's module or a library it loads: run the "
    "verifier by hand to see which op (`docker run --rm --entrypoint python IMAGE -m op_builder "
    "verify OP`)",
    signal.SIGKILL: "the container ran out of memory (the engine's OOM killer), or was killed from outside",
    signal.SIGILL: "an instruction this CPU lacks: the image was built for another CPU "
    "(DS_CPU_NATIVE=1 builds for the build machine's CPU only)",
}


def tail_lines(output: str, lines: int = OUTPUT_TAIL_LINES, chars: int = OUTPUT_LINE_CHARS) -> str:
    """The last ``lines`` lines of ``output``, each cut to ``chars`` characters."""
    kept = output.strip().splitlines()[-lines:]
    return _cut(kept, chars)


def output_tail(output: str) -> str:
    """What a hint quotes of the verifier's output: its last lines, without Python tracebacks
    (the message already has a traceback's last line, and the CLI never shows one)."""
    return _cut(without_tracebacks(output.strip().splitlines())[-OUTPUT_TAIL_LINES:], OUTPUT_LINE_CHARS)


def _cut(kept: list[str], chars: int) -> str:
    return "\n".join(line if len(line) <= chars else line[:chars] + " [...]" for line in kept)


def signal_of(exit_code: int) -> signal.Signals | None:
    """The signal that killed a container's main process, from its exit code (128 + signal)."""
    if exit_code <= 128:
        return None
    try:
        return signal.Signals(exit_code - 128)
    except ValueError:
        return None


def no_report_error(image: str, command: str, exit_code: int, output: str) -> VerificationFailedError:
    """Why the verifier printed no report, in words (exit 1: the image cannot be verified)."""
    tail = output_tail(output)
    if "No module named op_builder" in output:
        return VerificationFailedError(
            f"{image} has python but not op_builder (this project) installed, so it cannot be verified",
            hint="verify images built by `imagegen build`; its output:\n" + tail,
        )
    killed = signal_of(exit_code)
    if killed is not None:
        cause = _SIGNAL_CAUSES.get(killed, "a crash inside the image")
        return VerificationFailedError(
            f"the verifier in {image} was killed by {killed.name} (exit {exit_code}) before it reported",
            hint=f"{killed.name} here usually means {cause}; its output:\n" + (tail or "(none)"),
        )
    said = _error_line(output)
    if said is not None:
        by_hand = f"docker run --rm --entrypoint python {image} {command.split(' ', 1)[-1]}"
        return VerificationFailedError(
            f"could not verify {image}: the verifier said: {said}",
            hint=f"`{command}` exited {exit_code} without a report"
            + (f"; its output:\n{tail}" if tail else "")
            + f"\nrun it by hand to see all of it: {by_hand}",
        )
    return VerificationFailedError(
        f"could not verify {image}: `{command}` exited {exit_code} without a report",
        hint="the image needs python with this project installed on PATH; its output:\n" + (tail or "(none)"),
    )


def _error_line(output: str) -> str | None:
    # The first line a Python program or op_builder wrote to say why it stopped.
    for line in output.splitlines():
        text = line.strip()
        if text.startswith(("error: ", "op_builder: error: ")):
            return tail_lines(text.split("error: ", 1)[1], 1)
    lines = output.strip().splitlines()
    if lines and "Error" in lines[-1].split(":", 1)[0]:  # a traceback's last line: "ImportError: ..."
        return tail_lines(lines[-1], 1)
    return None


def in_image_error(image: str, error: Mapping[str, Any]) -> VerificationFailedError:
    """The verifier's own ``{"error": ...}`` document (a corrupt manifest, a label naming an op
    the image does not know), said as the reason instead of every op "not reported"."""
    message = tail_lines(str(error.get("message") or "no message"), 5)
    hint = error.get("hint")
    return VerificationFailedError(
        f"the verifier in {image} stopped before checking any op: {message}",
        hint=(f"{tail_lines(str(hint), 5)}\n" if hint else "")
        + "the image itself is at fault (exit 1): rebuild it with `imagegen build`",
    )


def start_error(image: str, explanation: str, gpus: str | None = None) -> VerificationFailedError:
    """The engine's refusal to start the verifier, in words; an image without python is the usual case."""
    if "executable file not found" in explanation or "no such file or directory" in explanation:
        return VerificationFailedError(
            f"{image} has no `python` on its PATH, so op_builder cannot be verified in it",
            hint="the verifier runs `python -m op_builder verify` in the image: verify images built "
            "by `imagegen build`, or any image with python and this project (op_builder) installed",
        )
    lines = explanation.strip().splitlines()
    first = tail_lines(lines[0], 1) if lines else "no reason given"
    if gpus is not None and _no_gpu_runtime(explanation):
        return VerificationFailedError(
            f"could not pass GPUs (--gpus {gpus}) to the verifier in {image}: {first}",
            hint="this engine has no GPU device driver: install the NVIDIA container toolkit and "
            "register it (`nvidia-ctk runtime configure --runtime=docker`, then restart the daemon), "
            "or verify without --gpus (GPU self-tests are then reported skipped)",
        )
    return VerificationFailedError(
        f"could not start the verifier in {image}: {first}",
        hint="check the image with `docker run --rm --entrypoint python IMAGE -m op_builder verify`",
    )


def _no_gpu_runtime(explanation: str) -> bool:
    # dockerd without the NVIDIA toolkit: 'could not select device driver "" with capabilities:
    # [[gpu]]'; with the toolkit but no driver, the hook fails naming nvidia-container-cli.
    text = explanation.lower()
    return "could not select device driver" in text or "nvidia-container-cli" in text
