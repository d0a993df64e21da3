"""Ops compile concurrently for real: a wheel of two CPU ops built with two jobs, whose compiles
overlap, holds exactly those ops and their manifest, and loads ahead of time; with one job they
compile one after the other."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagegen.building.build_inputs import copy_build_inputs
from imagegen.engine.build_log import compile_seconds

REPO = Path(__file__).resolve().parents[2]
OPS = ("cpu_adam", "cpu_lion")
_EVENT = re.compile(r"op_builder: (?:building op (\w+)|built (\w+) in )")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH", "MAX_JOBS"))}
    # The venv's ninja, as in an image (pip installs it there), even when the venv is not activated.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


Built = tuple[Path, list[str]]  # the wheel, the build's output lines


# A C++ compiler that waits before it compiles: the stable-ABI ops compile in a few seconds, about
# what starting an op's thread can take on a loaded 2-core machine, so without it two ops built at
# once need not overlap in time. One built after the other never overlaps, however long it takes.
_WAITING_CXX = """#!/bin/sh
case " $* " in *" -c "*) sleep 3 ;; esac
exec {real} "$@"
"""


def _build(tmp: Path, max_jobs: str, waiting_compiler: bool = False) -> Built:
    src = copy_build_inputs(REPO, tmp / "src")
    out = tmp / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps"]
    env = _env(DS_BUILD_OPS="0", DS_BUILD_CPU_ADAM="1", DS_BUILD_CPU_LION="1", MAX_JOBS=max_jobs)
    if waiting_compiler:
        real = shutil.which("c++", path=env["PATH"])
        assert real is not None, "no c++ on PATH"
        wrapper = tmp / "bin" / "c++"
        wrapper.parent.mkdir()
        wrapper.write_text(_WAITING_CXX.format(real=real))
        wrapper.chmod(0o755)
        env["PATH"] = f"{wrapper.parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run([*pip_wheel, "-w", str(out), "."], cwd=src, env=env, capture_output=True, text=True)
    log = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join(log[-60:])
    (wheel,) = out.glob("imagegen-*.whl")
    return wheel, log


def _events(log: list[str]) -> list[tuple[str, str]]:
    """("start" | "end", op) in the order the build printed them."""
    found = []
    for line in log:
        m = _EVENT.search(line)
        if m:
            found.append(("start", m.group(1)) if m.group(1) else ("end", m.group(2)))
    return found


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _build(tmp_path_factory.mktemp("two-jobs"), "2", waiting_compiler=True)


def test_two_jobs_compile_both_ops_at_once(two_jobs: Built) -> None:
    _, log = two_jobs
    events = _events(log)
    # Both ops started before either finished: their compile intervals overlap.
    assert sorted(events[:2]) == [("start", op) for op in OPS]
    assert sorted(events[2:]) == [("end", op) for op in OPS]
    # Each op's ninja ran its compiles (the binding and the kernels: two TUs) one at a time,
    # and each compiler line says whose it is.
    assert "2 op(s) at once, cpu_adam -j1, cpu_lion -j1" in "\n".join(log)
    for op in OPS:
        for tu in (op, f"{op}_kernel"):
            assert any(
                re.search(rf"\[{op}\] \[[12]/2\] c\+\+ .*kernels/optim/csrc/{tu}\.cpp", ln) for ln in log
            )
    assert set(compile_seconds(log)) == set(OPS)


def test_the_wheel_holds_exactly_the_requested_ops_and_loads(
    two_jobs: tuple[Path, list[str]], tmp_path: Path
) -> None:
    wheel, _ = two_jobs
    with zipfile.ZipFile(wheel) as archive:
        compiled = sorted(n for n in archive.namelist() if n.endswith(".so"))
        data = json.loads(archive.read("kernels/_ops/manifest.json"))
        archive.extractall(tmp_path / "site")
    assert [Path(n).name.split(".")[0] for n in compiled] == sorted(OPS)
    assert all(n.startswith("kernels/_ops/") for n in compiled)
    assert sorted(data["ops"]) == sorted(OPS)
    # `python -m` puts the current directory first on sys.path: the unpacked wheel, not the checkout.
    done = subprocess.run(
        [sys.executable, "-m", "op_builder", "verify", "--json"],
        cwd=tmp_path / "site",
        env=_env(DS_DISABLE_JIT="1", TORCH_EXTENSIONS_DIR=str(tmp_path / "no-jit-here")),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert sorted((op["name"], op["source"], op["ok"]) for op in report["ops"]) == [
        (op, "aot", True) for op in sorted(OPS)
    ]
    assert not (tmp_path / "no-jit-here").exists()


def test_one_job_compiles_one_op_after_the_other(tmp_path: Path) -> None:
    _, log = _build(tmp_path, "1")
    events = _events(log)
    assert len(events) == 4
    first, second = events[0][1], events[2][1]
    assert events == [("start", first), ("end", first), ("start", second), ("end", second)]
    assert {first, second} == set(OPS)
