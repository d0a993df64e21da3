"""Every way a self-test can end is its op's result, and the report stays JSON.

A self-test that calls ``sys.exit(0)`` (or raises any ``BaseException`` but Ctrl-C) used to end
``python -m op_builder selftest`` / ``verify`` with exit 0 and no output, which an image's build
stage took for a pass; NaN or infinite values in a reference made the tolerance NaN (written as
``NaN``, which is not JSON) or infinite (every error passed). The op under test is a real one
(cpu_lion, compiled as the other kernel tests compile it) with self-test functions written here;
the command-level case uses a real op package compiled just in time.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from op_builder.report import SelfTestReport, SelfTestResult
from op_builder.selftest import SelfTest, SelfTestContext, Tolerance
from op_builder.selftest.harness import run_one
from tests.op_package_files import square_package, unique

REPO = Path(__file__).resolve().parents[2]


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def outcome(run: Callable[[SelfTestContext], None]) -> SelfTestResult:
    return run_one(SelfTest("cpu_lion", "cpu", run), "cpu", os.environ)


def as_json(result: SelfTestResult) -> Any:
    """The result as the command prints it, read back as strict JSON."""
    return strict_json(json.dumps(SelfTestReport("cpu", (result,)).to_json()))["ops"][0]


class Odd(BaseException):
    """Neither an Exception nor an exit: still the self-test's failure."""


def exits(ctx: SelfTestContext) -> None:
    sys.exit(0)


def raises_base(ctx: SelfTestContext) -> None:
    raise Odd("not an Exception")


@pytest.mark.parametrize(
    ("run", "said"),
    [(exits, "SystemExit: the self-test called sys.exit(0)"), (raises_base, "Odd: not an Exception")],
    ids=["sys-exit", "base-exception"],
)
def test_a_self_test_that_exits_or_raises_a_base_exception_fails_its_op(
    run: Callable[[SelfTestContext], None], said: str
) -> None:
    result = outcome(run)
    assert result.ok is False and result.error == said


def test_ctrl_c_in_a_self_test_still_stops_the_run() -> None:
    def interrupted(ctx: SelfTestContext) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        outcome(interrupted)


def test_nan_and_inf_in_the_reference_leave_the_tolerance_finite() -> None:
    special = torch.tensor([1.0, math.nan, math.inf, -math.inf, -2.0])

    def equal(ctx: SelfTestContext) -> None:
        ctx.compare("same specials", special.clone(), special, Tolerance(1e-3, 0.0))

    passed = outcome(equal)
    assert passed.ok is True and passed.error is None
    assert passed.tolerance == pytest.approx(2e-3)  # rtol times the largest finite |value|
    assert as_json(passed)["tolerance"] == pytest.approx(2e-3)

    def off(ctx: SelfTestContext) -> None:
        # The reference's infinity once made the bound infinite, so this error of 4 passed.
        ctx.compare(
            "off by 4", torch.tensor([5.0, math.inf]), torch.tensor([1.0, math.inf]), Tolerance(1e-3, 0)
        )

    failed = outcome(off)
    assert failed.ok is False and failed.max_abs_err == 4.0 and failed.tolerance == pytest.approx(1e-3)


def test_a_tolerance_that_is_not_a_number_is_null_in_json_and_says_why() -> None:
    def nan_tolerance(ctx: SelfTestContext) -> None:
        ctx.compare("good", torch.ones(3), torch.ones(3), Tolerance(0.0, 0.0))
        ctx.compare("judged by NaN", torch.ones(3), torch.ones(3), Tolerance(math.nan, 0.0))

    result = outcome(nan_tolerance)
    assert result.ok is False and result.tolerance is None
    assert (
        result.error
        == "judged by NaN: the tolerance is nan, not a finite number (fix the self-test's Tolerance)"
    )
    written = as_json(result)
    assert written["tolerance"] is None and "not a finite number" in written["error"]


def test_a_package_self_test_that_exits_fails_the_command(tmp_path: Path) -> None:
    """Through ``python -m op_builder selftest``, as an image's build stage runs it (compiles the op)."""
    op = unique("sq_exit_test")
    root = square_package(tmp_path, unique("pkg_exit_test"), op)
    # What the op computes is not under test, only its self-test's exit: a module of pybind11 alone
    # compiles in a few seconds, the square op (torch's C++ headers) in ~40 s on 2 cores.
    (root / "csrc" / "square.cpp").write_text(
        "#include <pybind11/pybind11.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n"
    )
    with (root / "selftest.py").open("a") as handle:
        handle.write(f"\n\ndef {op}_test(ctx):\n    import sys\n    sys.exit(0)\n")  # replaces the real one
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DS_", "TORCH_CUDA_ARCH", "OP_BUILDER"))
    }
    done = subprocess.run(
        [sys.executable, "-m", "op_builder", "selftest", op, "--json", "--op-source", str(root)],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = strict_json(done.stdout)
    assert report["ok"] is False
    (entry,) = report["ops"]
    assert entry["name"] == op and entry["ok"] is False
    assert entry["error"] == "SystemExit: the self-test called sys.exit(0)"
