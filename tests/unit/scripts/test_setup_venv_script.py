"""scripts/setup_venv.py: what `make setup` runs, for a venv that exists and one that does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "setup_venv.py"


def _dry_run(*argv: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_new_venv_is_made_then_filled(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make, tools, torch, checkout = _dry_run("--venv", str(venv), "--torch", "")
    assert make == f"{sys.executable} -m venv {venv}"
    pip = f"{venv}/bin/python -m pip install -q"
    assert tools == f"{pip} --upgrade pip setuptools wheel"
    assert torch == f"{pip} torch==2.13.0"  # the release the tests are written against
    assert checkout == f"{pip} --no-build-isolation -e '.[cli,dev,parity]'"
    assert not venv.exists()  # a dry run makes nothing


def test_an_existing_venv_is_reused_and_torch_spec_passes(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    lines = _dry_run("--venv", str(tmp_path), "--torch", "torch==2.12.*")
    assert len(lines) == 3 and " -m venv " not in "\n".join(lines)
    assert lines[1].endswith("install -q 'torch==2.12.*'")
