"""scripts/stable_abi_proof.py's judgements, fed what a run can report: each wrong answer fails.

The run itself (a wheel, two venvs, two torch releases) is tests/kernels/test_stable_abi_proof.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._script_module import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "stable_abi_proof.py"
proof = load_script(SCRIPT, "stable_abi_proof_script")
OPS = proof.OPS
SITE = Path("/venv/lib/python3.11/site-packages")


def _module(op: str, **changes: Any) -> dict[str, Any]:
    return {
        "file": str(SITE / "kernels" / "_ops" / f"{op}.abi3.so"),
        "sha256": f"sha-{op}",
        "manifest_stable_abi": "2.10",
        "check_ok": True,
        "check": "",
        **changes,
    }


def _probe(**changes: dict[str, Any]) -> dict[str, Any]:
    return {
        "op_builder": str(SITE / "op_builder" / "__init__.py"),
        "kernels": str(SITE / "kernels" / "__init__.py"),
        "ops": {op: _module(op, **changes.get(op, {})) for op in OPS},
    }


def _env(label: str, torch: str, **sha: str) -> Any:
    modules = {op: _module(op, sha256=sha.get(op, f"sha-{op}")) for op in OPS}
    return proof.EnvResult(label, "/venv", torch, None, [], modules, {}, {}, ())


WHEEL = {
    op: {"member": f"kernels/_ops/{op}.abi3.so", "sha256": f"sha-{op}", "stable_abi": "2.10"} for op in OPS
}


def test_the_same_bytes_on_two_releases_pass() -> None:
    assert proof.judge_across([_env("a", "2.13.0+cpu"), _env("b", "2.10.0+cu128")], WHEEL) == []


@pytest.mark.parametrize(
    ("envs", "expected"),
    [
        ([_env("a", "2.13.0+cpu"), _env("b", "2.10.0", cpu_lion="other")], "cpu_lion's module differs"),
        ([_env("a", "2.13.0+cpu"), _env("b", "2.13.1")], "the same torch release"),
        ([_env("a", "2.13.0+cpu"), _env("b", "2.9.1")], "older than the target 2.10"),
    ],
    ids=["other-bytes", "one-release", "too-old"],
)
def test_across_the_venvs_each_wrong_answer_fails(envs: list[Any], expected: str) -> None:
    failures = proof.judge_across(envs, WHEEL)
    assert any(expected in f for f in failures), failures


def test_the_other_torchs_build_must_give_the_same_bytes() -> None:
    assert proof.judge_rebuild(WHEEL, WHEEL, "2.10.0+cu128") == []
    other = {**WHEEL, "cpu_adam": {**WHEEL["cpu_adam"], "sha256": "other"}}
    assert proof.judge_rebuild(WHEEL, other, "2.10.0+cu128") == [
        "cpu_adam's module built with torch 2.10.0+cu128 differs: other against sha-cpu_adam"
    ]
    missing = {op: entry for op, entry in WHEEL.items() if op != "cpu_lion"}
    assert (
        "cpu_lion's module built with torch 2.10.0+cu128 differs: None"
        in proof.judge_rebuild(WHEEL, missing, "2.10.0+cu128")[0]
    )


def test_the_installed_stable_modules_pass() -> None:
    assert proof.judge_modules(_probe(), SITE) == []


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (_probe(cpu_adam={"file": "/work/main/kernels/_ops/cpu_adam.abi3.so"}), "not the installed"),
        (_probe(cpu_lion={"file": "/cache/cpu_lion_1234/cpu_lion_1234.so"}), "not the installed"),
        (_probe(cpu_lion={"check_ok": False, "check": "torch C++ symbols _ZN3c10x"}), "_ZN3c10x"),
        (_probe(cpu_adagrad={"manifest_stable_abi": None}), "stable_abi None"),
        ({**_probe(), "kernels": "/work/main/kernels/__init__.py"}, "kernels came from /work/main"),
        (None, "no report"),
    ],
    ids=["checkout", "jit", "symbols", "per-torch", "checkout-package", "no-probe"],
)
def test_a_module_that_is_not_the_installed_stable_one_fails(probe: Any, expected: str) -> None:
    failures = proof.judge_modules(probe, SITE)
    assert any(expected in f for f in failures), failures


def _verify(**changes: dict[str, Any]) -> dict[str, Any]:
    ops = []
    for op in OPS:
        entry = {
            "name": op,
            "ok": True,
            "source": "aot",
            "error": None,
            "selftest": {"ok": True, "skipped": False},
        }
        ops.append({**entry, **changes.get(op, {})})
    return {"ok": True, "ops": ops}


@pytest.mark.parametrize(
    ("code", "report", "expected"),
    [
        (0, _verify(), None),
        (1, _verify(cpu_lion={"source": "jit", "ok": False}), "from jit, not aot"),
        (1, _verify(cpu_adam={"ok": False, "selftest": {"ok": False}}), "cpu_adam failed"),
        (0, _verify(cpu_adam={"selftest": {"ok": True, "skipped": True}}), "cpu_adam failed"),
        (1, {"ops": _verify()["ops"][:2]}, "did not report cpu_lion"),
        (2, None, "no JSON report"),
    ],
    ids=["pass", "jit", "selftest", "skipped", "missing", "no-json"],
)
def test_verify_passes_only_with_every_op_ahead_of_time(code: int, report: Any, expected: str | None) -> None:
    failures = proof.judge_verify(code, report)
    assert failures == [] if expected is None else any(expected in f for f in failures), failures


def test_the_tests_must_run_on_the_probed_modules() -> None:
    files = {op: _module(op)["file"] for op in OPS}
    counts = {"passed": 210, "failed": 0, "errors": 0, "skipped": 0}
    assert proof.judge_tests(0, counts, files, files) == []
    other = {**files, "cpu_adam": "/work/main/kernels/_ops/cpu_adam.abi3.so"}
    assert any("the tests used /work/main" in f for f in proof.judge_tests(0, counts, other, files))
    assert any("passed no test" in f for f in proof.judge_tests(0, {**counts, "passed": 0}, files, files))
    assert any("did not record" in f for f in proof.judge_tests(0, counts, None, files))


def test_torch_versions_become_pip_requirements() -> None:
    assert proof.torch_requirement("2.10.0") == "torch==2.10.0"
    assert proof.torch_requirement("2.11") == "torch==2.11.*"
    with pytest.raises(proof.BadInput, match=r"like 2\.10\.0"):
        proof.torch_requirement("latest")


def test_only_the_named_tests_and_their_helpers_are_copied(tmp_path: Path) -> None:
    proof.copy_tests(["tests/kernels/test_cpu_optim_half.py"], tmp_path)
    copied = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.py")}
    assert {"tests/__init__.py", "tests/conftest.py", "tests/kernels/conftest.py"} <= copied
    assert "tests/kernels/_half_bounds.py" in copied  # the test imports it
    assert not any(p.startswith(("op_builder", "kernels")) for p in copied)  # nothing of the package
    assert "tests/kernels/test_cpu_optim.py" not in copied
    with pytest.raises(proof.BadInput, match="not a test file"):
        proof.copy_tests(["op_builder/loader.py"], tmp_path)
