"""The JIT path for real: compile a tiny extension, kill a build midway, race first loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("jit_probe.py")
# pybind11 only (no torch headers) keeps each real compile to a few seconds.
SOURCE = """
#include <pybind11/pybind11.h>
static int answer() { return 42; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("answer", &answer); }
"""


@pytest.fixture
def probe_source(tmp_path: Path) -> Path:
    source = tmp_path / "probe.cpp"
    source.write_text(SOURCE)
    return source


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    env.update(TORCH_EXTENSIONS_DIR=str(cache), PYTHONPATH=str(REPO), **extra)
    return env


def _start(source: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(PROBE), str(source)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so a kill reaches ninja and the compiler too
    )


def _result(proc: subprocess.Popen[str], timeout: float = 240) -> dict[str, object]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_first_load_compiles_then_cached_load_does_not(tmp_path: Path, probe_source: Path) -> None:
    env = _env(tmp_path / "cache")
    first = _result(_start(probe_source, env))
    assert first == {"compiled": True, "source": "jit", "answer": 42}
    second = _result(_start(probe_source, env))
    assert second == {"compiled": False, "source": "jit", "answer": 42}
    # A changed source is a different build, not a stale cache hit.
    probe_source.write_text(SOURCE.replace("42", "43"))
    third = _result(_start(probe_source, env))
    assert third == {"compiled": True, "source": "jit", "answer": 43}


def test_build_killed_midway_does_not_wedge_later_loads(tmp_path: Path, probe_source: Path) -> None:
    cache = tmp_path / "cache"
    # A real compiler behind a delay, so the build is surely in flight when killed. Only a
    # compile (-c) waits: the loader's toolchain probe (`c++ --version`, which gives up after 30 s)
    # and torch's own compiler check come before the build and would only delay its start.
    slow = tmp_path / "slow-c++"
    slow.write_text('#!/bin/sh\ncase " $* " in *" -c "*) sleep 60 ;; esac\nexec c++ "$@"\n')
    slow.chmod(0o755)
    victim = _start(probe_source, _env(cache, CXX=str(slow)))
    deadline = time.monotonic() + 120
    batons: list[Path] = []
    while time.monotonic() < deadline and not batons:
        batons = list(cache.glob("*/jit_probe_*/lock"))
        time.sleep(0.2)
    assert batons, "the build never started"
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert batons[0].exists(), "torch's lock file should be left behind by the killed build"

    # Before the fix, this waited forever on torch's ownerless lock file.
    after = _result(_start(probe_source, _env(cache)), timeout=180)
    assert after == {"compiled": True, "source": "jit", "answer": 42}


def test_concurrent_first_loads_build_once(tmp_path: Path, probe_source: Path) -> None:
    env = _env(tmp_path / "cache")
    procs = [_start(probe_source, env) for _ in range(3)]
    results = [_result(p) for p in procs]
    assert all(r["answer"] == 42 for r in results)
    assert sum(bool(r["compiled"]) for r in results) == 1


def test_jit_disabled_gives_a_clear_error(tmp_path: Path, probe_source: Path) -> None:
    proc = _start(probe_source, _env(tmp_path / "cache", DS_DISABLE_JIT="1"))
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "JIT builds are disabled (DS_DISABLE_JIT=1)" in err
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.so"))


def test_missing_compiler_is_one_clear_error_and_leaves_nothing(tmp_path: Path, probe_source: Path) -> None:
    cache = tmp_path / "cache"
    proc = _start(probe_source, _env(cache, CXX=str(tmp_path / "no-such-c++")))
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "no C++ compiler found" in err
    assert not list(cache.rglob("*.so")) and not list(cache.rglob("*.o"))
