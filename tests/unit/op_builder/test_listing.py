"""``python -m op_builder list``: the registry's ops one a line, and the scripts and benches that
ask it instead of keeping lists of their own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from op_builder.__main__ import main
from op_builder.registry import builtin_ops

REPO = Path(__file__).resolve().parents[3]
ACME = REPO / "examples" / "acme_ops"
OURS = list(builtin_ops())
OUR_GPU_OPS = [name for name, builder in builtin_ops().items() if builder.target == "gpu"]


@pytest.fixture(autouse=True)
def _no_op_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DS_OP_SOURCES", raising=False)


def _list(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["list", *args], env={})
    return code, capsys.readouterr().out


def test_every_op_one_a_line_in_the_registrys_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _list(capsys)
    assert code == 0 and out.splitlines() == OURS


def test_gpu_and_cpu_split_the_ops_by_target(capsys: pytest.CaptureFixture[str]) -> None:
    gpu, cpu = _list(capsys, "--gpu")[1].splitlines(), _list(capsys, "--cpu")[1].splitlines()
    assert (
        gpu
        == OUR_GPU_OPS
        == ["fused_adam", "fused_lamb", "fused_lion", "transformer", "quantizer", "fp_quantizer"]
    )
    assert cpu == ["cpu_adam", "cpu_adagrad", "cpu_lion", "async_io"]
    assert all(builtin_ops()[name].target == "cpu" for name in cpu)


def test_an_op_source_adds_its_ops_after_ours(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _list(capsys, "--op-source", str(ACME))
    assert code == 0 and out.splitlines() == [*OURS, "acme_rmsnorm", "acme_rmsnorm_cuda"]
    code, out = _list(capsys, "--gpu", "--json", "--op-source", str(ACME))
    ops = json.loads(out)["ops"]
    assert [op["name"] for op in ops] == [*OUR_GPU_OPS, "acme_rmsnorm_cuda"]
    assert {op["target"] for op in ops} == {"gpu"}
    assert ops[0]["origin"]["kind"] == "builtin"
    assert ops[-1]["origin"] == {
        "kind": "directory",
        "where": str(ACME),
        "package": "acme_ops",
        "root": str(ACME),
    }


def test_cpu_and_gpu_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["list", "--cpu", "--gpu", "--json"], env={})
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and "not allowed with" in error["message"]


# ------------------------------------------------------------------ the scripts that ask it

# A stand-in for the GPU machine's python: it writes down each call, hands `-m op_builder list`
# to the real interpreter, and answers every other call (builds, self-tests) with success.
RECORDER = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:4] == ["-m", "op_builder", "list"]:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""


def _gpu_proof(
    tmp_path: Path, *steps: str, python_text: str = RECORDER.format(python=sys.executable)
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    python = tmp_path / "python"
    python.write_text(python_text)
    python.chmod(0o755)
    record = tmp_path / "record.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    env.update(
        PYTHON=str(python),
        RECORD=str(record),
        LOG_DIR=str(tmp_path / "logs"),
        TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"),
        EXT_CACHE="",
    )
    done = subprocess.run(
        ["bash", "scripts/gpu_proof.sh", *steps],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, record.read_text().splitlines() if record.exists() else []


def test_gpu_proof_builds_and_tests_the_ops_the_registry_lists(tmp_path: Path) -> None:
    done, lines = _gpu_proof(tmp_path, "build", "selftest")
    assert done.returncode == 0, done.stdout + done.stderr
    listing, *builds, selftest = [json.loads(line) for line in lines]
    assert listing == ["-m", "op_builder", "list", "--gpu"]  # once, for both steps
    assert sorted(builds) == sorted(["scripts/gpu_proof.py", "load", op] for op in OUR_GPU_OPS)
    assert selftest == ["-m", "op_builder", "selftest", *OUR_GPU_OPS, "--device", "cuda"]


def test_gpu_proof_fails_the_step_when_the_ops_cannot_be_listed(tmp_path: Path) -> None:
    # A python that cannot import op_builder (no packaging, say): it fails every call.
    failing = '#!/bin/sh\necho "$*" >> "$RECORD"\necho "No module named op_builder" >&2\nexit 1\n'
    done, calls = _gpu_proof(tmp_path, "selftest", python_text=failing)
    assert done.returncode == 1
    assert "!!! selftest (listing the GPU ops) failed (exit 1)" in done.stdout
    assert calls == ["-m op_builder list --gpu"]  # and no self-test run


def test_no_script_or_bench_keeps_its_own_list_of_our_gpu_ops() -> None:
    """They ask the registry (`op_builder list --gpu`, listing.op_names): a list written out in one
    drifts when an op is added. The check can fail: the line the scripts had is caught."""
    words = re.compile(r"[a-z][a-z0-9_]*")

    def names_them_all(line: str) -> bool:
        return set(OUR_GPU_OPS) <= set(words.findall(line))

    assert names_them_all("GPU_OPS=(fused_adam fused_lamb fused_lion transformer quantizer fp_quantizer)")
    files = [
        *(REPO / "scripts").rglob("*.sh"),
        *(REPO / "scripts").rglob("*.py"),
        *(REPO / "bench").glob("*.py"),
    ]
    files.append(REPO / "Makefile")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if names_them_all(line)
    ]
    assert len(files) > 20 and offenders == []
