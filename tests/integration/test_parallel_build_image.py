"""The ops of a real image compile at once: the build report times each op, and when one op
does not compile while another compiles beside it, the error still names the right op."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from imagegen.building.build_inputs import copy_build_inputs
from op_builder import get_builder
from op_builder.paths import PACKAGE_ROOT
from tests.integration.conftest import CPU_OPS, REPO, build_args, imagegen

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]


def _checkout(tmp_path: Path, op: str, text: str, at_end: bool) -> Path:
    """A copy of the build inputs with ``text`` added to ``op``'s first source."""
    copy = copy_build_inputs(REPO, tmp_path / "checkout")
    source = copy / Path(get_builder(op).source_paths()[0]).relative_to(PACKAGE_ROOT)
    old = source.read_text()
    source.write_text(old + text if at_end else text + old)
    return copy


def test_the_build_report_times_each_op(tmp_path: Path) -> None:
    # A new line in one source: the build stage runs again (the cached devel stage does not).
    checkout = _checkout(tmp_path, "cpu_adam", f"\n// {uuid.uuid4().hex}\n", at_end=True)
    result = imagegen(*build_args("imagegen-it/parallel:timed"), "--no-verify", "--source", str(checkout))
    assert result.returncode == 0, result.stderr[-5000:]
    summary = json.loads(result.stdout)
    assert set(summary["compile_seconds"]) == set(CPU_OPS)
    assert all(seconds > 0 for seconds in summary["compile_seconds"].values())
    assert summary["ops"] == list(CPU_OPS) and summary["build_seconds"] > 0
    # The build's own lines, which the report was read from.
    assert "2 op(s) at once" in result.stderr


def test_a_failure_beside_a_compiling_op_names_the_failed_op(tmp_path: Path) -> None:
    # cpu_lion fails at once (a missing header is fatal) while cpu_adam goes on compiling: their
    # output interleaves, and cpu_adam, announced first, must not be blamed.
    checkout = _checkout(tmp_path, "cpu_lion", '#include "imagegen_missing_on_purpose.h"\n', at_end=False)
    result = imagegen(*build_args("imagegen-it/parallel:broken"), "--source", str(checkout))
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert "op cpu_lion did not compile" in error["message"]
    hint = error["hint"].splitlines()
    assert any("imagegen_missing_on_purpose.h" in line and "error" in line for line in hint)
    # The failing compiler command, without its op prefix, and nothing of cpu_adam's output.
    assert any(line.lstrip().startswith(("c++", "ccache")) and "cpu_lion.cpp" in line for line in hint)
    assert not any("cpu_adam" in line for line in hint)
