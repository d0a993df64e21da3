"""scripts/portability.py's judgement of one self-test run, fed the reports a run can print.

The end-to-end run (native and qemu's Nehalem) is tests/kernels/test_portability.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests._script_module import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "portability.py"
ENOSYS = "io_setup(4) failed: Function not implemented"


def _load() -> ModuleType:
    return load_script(SCRIPT, "portability_script")


portability = _load()
NATIVE = portability.Run("native", (), "avx512")
NEHALEM = portability.Run("Nehalem", ("qemu-x86_64", "-cpu", "Nehalem"), "scalar")


def _report(isa: str = "scalar", aio_error: str | None = None, drop: str | None = None) -> str:
    ops: list[dict[str, Any]] = [
        {"name": n, "ok": True, "isa": isa, "seconds": 0.1, "error": None}
        for n in ("cpu_adam", "cpu_adagrad", "cpu_lion")
    ]
    ops.append({"name": "async_io", "ok": aio_error is None, "isa": None, "seconds": 0.1, "error": aio_error})
    ops = [op for op in ops if op["name"] != drop]
    return json.dumps({"ok": all(op["ok"] for op in ops), "ops": ops})


def _judge(run: Any, code: int, stdout: str, stderr: str = "", compiled: bool = False) -> list[str]:
    failures, _ = portability.judge(run, code, stdout, stderr, compiled)
    return failures  # type: ignore[no-any-return]


def test_a_run_on_the_expected_path_passes() -> None:
    assert _judge(NEHALEM, 0, _report("scalar")) == []
    assert _judge(NATIVE, 0, _report("avx512")) == []


def test_qemus_missing_aio_is_tolerated_only_under_emulation() -> None:
    failures, ops = portability.judge(NEHALEM, 1, _report(aio_error=ENOSYS), "", False)
    assert failures == []
    assert [op["note"] for op in ops if op["note"]] == [
        "loaded; qemu-user does not implement io_setup (ENOSYS), so not run"
    ]
    assert _judge(NATIVE, 1, _report("avx512", aio_error=ENOSYS)) == [
        f"async_io: {ENOSYS}",
        "selftest exited 1",
    ]
    # Any other async_io failure fails, emulated or not.
    assert _judge(NEHALEM, 1, _report(aio_error="short read")) == [
        "async_io: short read",
        "selftest exited 1",
    ]


@pytest.mark.parametrize(
    ("code", "stdout", "stderr", "compiled", "failure"),
    [
        (0, _report("avx2"), "", False, "cpu_adam: ran the avx2 path, expected scalar"),
        (
            0,
            _report(),
            "",
            True,
            "the JIT cache changed: this run compiled an op instead of loading the native build",
        ),
        (0, _report(), "compiling cpu_adam", False, "the JIT cache changed"),
        (0, _report(drop="cpu_lion"), "", False, "cpu_lion: missing from the report"),
        (-4, "", "Illegal instruction", False, "exit -4, no JSON report: Illegal instruction"),
        (2, _report(), "", False, "selftest exited 2"),
    ],
)
def test_a_wrong_run_fails_saying_why(
    code: int, stdout: str, stderr: str, compiled: bool, failure: str
) -> None:
    failures = _judge(NEHALEM, code, stdout, stderr, compiled)
    assert any(f.startswith(failure) for f in failures), failures


@pytest.mark.parametrize("arg", ["Nehalem", "=scalar", "Nehalem=sse", "Nehalem="])
def test_models_must_be_model_equals_isa(arg: str) -> None:
    with pytest.raises(ValueError, match="is not MODEL=ISA"):
        portability.parse_models(["Haswell=avx2", arg])
    assert portability.parse_models(["Haswell=avx2"]) == [("Haswell", "avx2")]


def test_bad_arguments_exit_2_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"TORCH_EXTENSIONS_DIR": "/nonexistent", "PORTABILITY_QEMU": "qemu-x86_64"}
    assert portability.main(["out.json", "Nehalem=sse"], env) == 2
    assert portability.main(["out.json", "Nehalem=scalar"], {}) == 2
    assert "TORCH_EXTENSIONS_DIR is not set" in capsys.readouterr().err


def test_table_lines_up_and_carries_the_notes() -> None:
    _, ops = portability.judge(NEHALEM, 1, _report(aio_error=ENOSYS), "", False)
    run = {
        "cpu": "Nehalem",
        "numpy": None,
        "expected_isa": "scalar",
        "isa": ["scalar"],
        "ok": True,
        "wall_seconds": 30.24,
        "ops": ops,
    }
    header, rule, row = portability.table([run]).splitlines()
    assert header.split("  ")[0] == "cpu" and set(rule) <= {"-", " "}
    assert row.startswith("Nehalem  scalar        scalar  pass (async_io: loaded;") and row.endswith("30.2")
