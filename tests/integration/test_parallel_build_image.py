"""The ops of a real image compile at once: the build report times each op, and when one op
does not compile while another compiles beside it, the error still names the right op."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import CPU_OPS, ChangedImage, Cli

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]


def test_the_build_report_times_each_op(changed_cpu_image: ChangedImage) -> None:
    # The session's image from sources with a new line in one of them: its build stage ran again
    # (the cached devel stage did not), both ops compiling at once.
    result = changed_cpu_image.build
    summary = json.loads(result.stdout)
    assert set(summary["compile_seconds"]) == set(CPU_OPS)
    assert all(seconds > 0 for seconds in summary["compile_seconds"].values())
    assert summary["ops"] == list(CPU_OPS) and summary["build_seconds"] > 0
    # The build's own lines, which the report was read from.
    assert "2 op(s) at once" in result.stderr


def test_a_failure_beside_a_compiling_op_names_the_failed_op(broken_build: Cli) -> None:
    # cpu_lion fails at once (a missing header is fatal) while cpu_adam goes on compiling: their
    # output interleaves, and cpu_adam, announced first, must not be blamed. The session's build
    # (conftest's broken_build).
    result = broken_build
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert "op cpu_lion did not compile" in error["message"]
    hint = error["hint"].splitlines()
    assert any("imagegen_missing_on_purpose.h" in line and "error" in line for line in hint)
    # The failing compiler command, without its op prefix, and nothing of cpu_adam's output.
    assert any(line.lstrip().startswith(("c++", "ccache")) and "cpu_lion.cpp" in line for line in hint)
    assert not any("cpu_adam" in line for line in hint)
