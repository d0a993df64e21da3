"""setup.py is the entry point pip runs: op_builder raises, setup.py turns it into an exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from op_builder.errors import BadInputError
from op_builder.setup_support import planned_extensions

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    return {**clean, **extra}


def test_an_unknown_build_variable_is_bad_input_raised_not_an_exit() -> None:
    with pytest.raises(BadInputError) as caught:
        planned_extensions({"DS_BUILD_CPU_ADAMW": "1"})
    assert caught.value.exit_code == 2
    assert "DS_BUILD_CPU_ADAMW" in caught.value.message
    assert caught.value.hint is not None and "DS_BUILD_CPU_ADAM" in caught.value.hint


def test_an_op_asked_for_that_cannot_be_built_here_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="DS_BUILD_FUSED_ADAM=1 but fused_adam cannot be built"):
        planned_extensions({"DS_BUILD_FUSED_ADAM": "1", "DS_ACCELERATOR": "cpu"})


def test_a_garbled_max_jobs_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="MAX_JOBS"):
        env = {"DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1", "DS_ACCELERATOR": "cpu", "MAX_JOBS": "x"}
        planned_extensions(env)


def test_nothing_selected_plans_nothing() -> None:
    assert planned_extensions({}) == ([], {})


def test_setup_py_exits_2_with_the_message_and_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext"],
        cwd=REPO,
        env=_env(DS_BUILD_CPU_ADAMW="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "op_builder: error: unknown build variable DS_BUILD_CPU_ADAMW" in done.stderr
    assert "hint: did you mean 'DS_BUILD_CPU_ADAM'" in done.stderr
    assert "Traceback" not in done.stderr
