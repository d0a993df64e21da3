"""What verify says when an image cannot be verified, bounded; and the table on a narrow terminal.

Pure functions fed with what the engine and the verifier print; tests/integration's
test_verify_bad_images.py shows the same against images made to fail that way.
"""

from __future__ import annotations

import json
import signal

import pytest
from rich.console import Console

from imagegen.engine.build_log import describe_failure
from imagegen.engine.sealed import StreamTail
from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.verify import container as verify
from imagegen.verify.failures import (
    OUTPUT_LINE_CHARS,
    OUTPUT_TAIL_LINES,
    no_report_error,
    signal_of,
    start_error,
)
from imagegen.verify.table import render_table

COMMAND = "python -m op_builder verify --json"


# ---------------------------------------------------------------- the timeout's bounds


@pytest.mark.parametrize("timeout", [86400.0 + 1, 99999999999.0, 1e300])
def test_a_timeout_beyond_a_day_is_bad_input(timeout: float) -> None:
    with pytest.raises(BadInputError, match="longer than a day") as caught:
        verify.check_verify_input("imagegen:cpu", timeout)
    assert caught.value.exit_code == 2 and caught.value.hint


@pytest.mark.parametrize("timeout", [0.5, 300.0, 86400.0])
def test_timeouts_up_to_a_day_are_taken(timeout: float) -> None:
    verify.check_verify_input("imagegen:cpu", timeout)


# ---------------------------------------------------------------- a verifier killed by a signal


@pytest.mark.parametrize(
    ("code", "name", "cause"),
    [(135, "SIGBUS", "truncated"), (139, "SIGSEGV", "native code"), (137, "SIGKILL", "memory")],
)
def test_a_verifier_killed_by_a_signal_is_named(code: int, name: str, cause: str) -> None:
    error = no_report_error("img:1", COMMAND, code, "")
    assert error.exit_code == 1
    assert f"killed by {name} (exit {code})" in error.message
    assert error.hint is not None and cause in error.hint


def test_exit_codes_that_are_no_signal_are_not_called_one() -> None:
    assert signal_of(1) is None and signal_of(128) is None and signal_of(128 + 200) is None
    assert signal_of(128 + signal.SIGBUS) == signal.SIGBUS
    assert "killed" not in no_report_error("img:1", COMMAND, 1, "").message


def test_the_verifier_s_own_error_line_leads() -> None:
    output = "some warning\nerror: cannot read /opt/x: permission denied\n  hint: fix the image\n"
    error = no_report_error("img:1", COMMAND, 2, output)
    assert error.message == "could not verify img:1: the verifier said: cannot read /opt/x: permission denied"
    assert error.hint is not None and "exited 2" in error.hint


def test_a_python_traceback_s_last_line_leads() -> None:
    output = (
        'Traceback (most recent call last):\n  File "x.py", line 1\nImportError: libfoo.so: cannot open\n'
    )
    assert no_report_error("img:1", COMMAND, 1, output).message.endswith(
        "ImportError: libfoo.so: cannot open"
    )


# ---------------------------------------------------------------- the verifier's own error document


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        (
            "the installed-ops manifest /x/manifest.json is unreadable: Expecting value",
            "reinstall the package",
        ),
        ("unknown op 'no_such_op'", "known ops: cpu_adam, cpu_lion"),
    ],
)
def test_an_error_document_from_the_image_is_the_reason(message: str, hint: str) -> None:
    stdout = "a warning first\n" + json.dumps({"error": {"message": message, "hint": hint, "exit_code": 1}})
    with pytest.raises(VerificationFailedError) as caught:
        verify.parse_verify_output(stdout, ["cpu_adam"], "img:1", 1.0)
    assert caught.value.exit_code == 1
    assert message in caught.value.message and "not reported" not in caught.value.message
    assert caught.value.hint is not None and hint in caught.value.hint


def test_a_report_is_still_read_as_a_report() -> None:
    stdout = json.dumps({"ok": True, "torch": "2.13.0", "cuda": None, "hip": None, "ops": []})
    result = verify.parse_verify_output(stdout, ["cpu_adam"], "img:1", 1.0)
    assert result is not None and not result.ok
    assert result.ops[0].problems()[0].startswith("not reported by the image")


# ---------------------------------------------------------------- the engine's refusals


def test_gpus_without_a_gpu_runtime_say_what_is_missing() -> None:
    refusal = 'could not select device driver "" with capabilities: [[gpu]]'
    error = start_error("img:1", refusal, gpus="all")
    assert "could not pass GPUs (--gpus all)" in error.message
    assert (
        error.hint is not None and "NVIDIA container toolkit" in error.hint and "without --gpus" in error.hint
    )
    # Without --gpus the same words cannot come from a GPU request: the general hint stays.
    assert "NVIDIA" not in (start_error("img:1", refusal).hint or "")


# ---------------------------------------------------------------- bounded output


def test_the_stream_tail_keeps_only_the_end() -> None:
    tail = StreamTail(limit=1000)
    for _ in range(10_000):
        tail.feed(b"x" * 999 + b"\n")
    tail.feed(b'{"ok": true}\n')
    text = tail.text()
    assert len(text) < 1100
    assert text.endswith('{"ok": true}\n')
    assert text.startswith("[... ") and "bytes of earlier output left out" in text


def test_a_short_stream_is_whole() -> None:
    assert StreamTail().feed_all([b"a\n", b"b\n"]).text() == "a\nb\n"


def test_an_error_s_hint_is_bounded_however_long_the_output() -> None:
    output = ("y" * 10_000_000 + "\n") * 3 + "\n".join(f"line {i}" for i in range(1000))
    error = no_report_error("img:1", COMMAND, 1, output)
    assert error.hint is not None
    assert len(error.hint) < (OUTPUT_TAIL_LINES + 2) * (OUTPUT_LINE_CHARS + 10)
    assert error.hint.endswith("line 999")


# ------------------------------------------------------- a failed build leads with op_builder's error


def test_a_failed_build_leads_with_op_builder_s_error_not_the_run_line() -> None:
    run = "RUN --mount=type=cache,target=/root/.cache " + " ".join(f"DS_BUILD_OP{i}=1" for i in range(100))
    log = [
        f"#12 [build 4/7] {run}",
        "#12 1.2 op_builder: will build cpu_adam (host CPU)",
        "#12 1.3 op_builder: error: unknown op in DS_BUILD_CPU_ADAMM (hint: did you mean DS_BUILD_CPU_ADAM?)",
        "#12 ERROR: executor failed running [/bin/sh -c pip wheel .]: exit code: 1",
    ]
    error = describe_failure(log, "buildkit", {"cpu_adam": ("optim/csrc/cpu_adam.cpp",)}, "img")
    assert error.message == (
        "building img failed: unknown op in DS_BUILD_CPU_ADAMM (hint: did you mean DS_BUILD_CPU_ADAM?)"
    )
    assert error.hint is not None and error.hint.startswith("at step [build 4/7] RUN --mount")
    assert len(error.hint.splitlines()[0]) < 120


def test_a_long_step_title_is_cut_in_the_message() -> None:
    run = "RUN " + "x" * 1000
    log = [f"#7 [build 1/4] {run}", "#7 2.0 some failure", "#7 ERROR: executor failed running: exit code: 1"]
    error = describe_failure(log, "buildkit", {}, "img")
    assert error.message.startswith("building img failed at step [build 1/4] RUN xxx")
    assert len(error.message) < 160


# ---------------------------------------------------------------- the table on an 80-column terminal


def _result(*names: str, problem: str | None = None) -> verify.VerifyResult:
    selftest = {"name": "", "ok": True, "device": "cpu", "max_abs_err": 0.0, "tolerance": 1e-5,
                "seconds": 0.1, "isa": "avx2", "error": None, "skipped": None}  # fmt: skip
    ops = [
        {"name": n, "ok": problem is None, "source": "aot", "seconds": 0.25, "error": problem,
         "selftest": {**selftest, "name": n}, "binary": None}
        for n in names
    ]  # fmt: skip
    raw = json.dumps({"ok": problem is None, "torch": "2.13.0+cpu", "cuda": None, "hip": None, "ops": ops})
    result = verify.parse_verify_output(raw, None, "imagegen:cpu-torch2.13.0-py3.11-6f963e15", 3.0)
    assert result is not None
    return result


def _rendered(result: verify.VerifyResult, width: int) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(render_table(result, width=width))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 60])
def test_op_names_stay_whole_on_a_narrow_terminal(width: int) -> None:
    names = ("cpu_adam", "cpu_adagrad", "cpu_lion", "fp_quantizer", "my_package_fused_kernel_op")
    text = _rendered(_result(*names, problem="libaio.so.1: cannot open shared object file"), width)
    if width == 80:  # room for every cell once the least useful columns are gone
        assert "…" not in text
    for name in names:
        assert f" {name} " in text
    assert all(len(line) <= width for line in text.splitlines())


def test_a_narrow_terminal_drops_the_seconds_before_anything_else() -> None:
    result = _result("cpu_adam", "my_package_fused_kernel_op", problem="libaio.so.1: cannot open")
    assert "seconds" in _rendered(result, 160)
    narrow = _rendered(result, 80)
    assert "seconds" not in narrow and "self-test" in narrow and "problem" in narrow
