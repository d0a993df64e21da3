"""The CPU ops run on an older x86-64 CPU than the build machine's, on their scalar path.

``scripts/portability.sh`` compiles the ops here (no -march=native), then runs their
self-tests under ``qemu-x86_64 -cpu Nehalem`` (SSE4.2, no AVX), with the same JIT cache and
no recompile. ``make portability`` adds the AVX2 model (Haswell), which takes about a minute
and a half more under emulation; this test runs the scalar one only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from op_builder.toolchain import probe_library

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    # Emulation, about a minute: `make portability` runs it (with the AVX2 model too) and
    # docs/benchmarks.md records the result; SLOW=1 runs this scalar case with the tests.
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("qemu-x86_64") or shutil.which("qemu-x86_64-static")),
        reason="qemu-x86_64 is not installed (apt-get install qemu-user)",
    ),
    pytest.mark.skipif(
        not probe_library("aio", "libaio.h", "io_submit").ok,
        reason="libaio is missing: no async_io (apt-get install libaio-dev)",
    ),
]


def test_scalar_cpu_runs_the_ops(tmp_path: Path) -> None:
    out = tmp_path / "portability.json"
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "portability.sh"), "--out", str(out), "Nehalem=scalar"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["ok"]
    emulated = [run for run in report["runs"] if run["cpu"] == "Nehalem"]
    assert len(emulated) == 1 and emulated[0]["ok"], emulated
    simd = [op for op in emulated[0]["ops"] if op["name"] != "async_io"]
    assert {op["name"] for op in simd} == {"cpu_adam", "cpu_adagrad", "cpu_lion"}
    assert all(op["ok"] and op["isa"] == "scalar" for op in simd), simd
