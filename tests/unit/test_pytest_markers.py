"""The project's pytest configuration: ``slow`` tests run only with SLOW=1; markers are strict.

Each case runs pytest on a small test file under the repository's own pyproject.toml and
tests/conftest.py, so what is checked is the configuration every tier runs under.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SAMPLE = """
import pytest

@pytest.mark.slow
def test_long() -> None:
    pass

def test_short() -> None:
    pass
"""


def _pytest(
    tmp_path: Path, source: str, args: tuple[str, ...] = ("-rs",), **env: str
) -> subprocess.CompletedProcess[str]:
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(source)
    # Neither the slow tier nor make test's strict skips leak in from the run around this one.
    clean = {k: v for k, v in os.environ.items() if k not in ("SLOW", "IMAGEGEN_STRICT_SKIPS")}
    config = ["-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *config, *args, str(tmp_path)],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_slow_tests_are_skipped_with_the_reason_unless_slow_is_1(tmp_path: Path) -> None:
    done = _pytest(tmp_path, SAMPLE)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 skipped" in done.stdout
    assert "slow: set SLOW=1 to run it" in done.stdout


def test_slow_1_runs_them(tmp_path: Path) -> None:
    done = _pytest(tmp_path, SAMPLE, SLOW="1")
    assert done.returncode == 0, done.stdout
    assert "2 passed" in done.stdout


def test_a_marker_that_is_not_registered_is_an_error(tmp_path: Path) -> None:
    done = _pytest(tmp_path, SAMPLE.replace("mark.slow", "mark.slwo"))
    assert done.returncode != 0
    assert "'slwo' not found in `markers` configuration option" in done.stdout + done.stderr


PACKAGE_SKIP = """
import pytest

def test_needs_a_server() -> None:
    pytest.skip("no redis-server here (apt-get install redis-server)")

def test_needs_a_gpu() -> None:
    pytest.skip("no CUDA GPU visible")
"""


def test_after_set_up_a_skip_for_a_package_fails_and_one_for_hardware_does_not(tmp_path: Path) -> None:
    strict = _pytest(tmp_path, PACKAGE_SKIP, IMAGEGEN_STRICT_SKIPS="1")
    assert strict.returncode == 1, strict.stdout
    assert "1 failed, 1 skipped" in strict.stdout
    assert "skipped for something set-up provides" in strict.stdout and "redis-server" in strict.stdout
    # Run by hand, without set-up's promise, both skip with their reasons.
    loose = _pytest(tmp_path, PACKAGE_SKIP)
    assert loose.returncode == 0 and "2 skipped" in loose.stdout, loose.stdout


def test_every_package_skip_in_the_suite_names_what_set_up_installs() -> None:
    # The skips for a missing tool name their install command, so the rule above catches them.
    from tests.conftest import skip_set_up_should_prevent

    for reason in (
        "no redis-server here (apt-get install redis-server)",
        "no hipcc: `scripts/system-deps.sh` installs Debian's ROCm 5.2",
        "no docker client with buildx here (scripts/buildx-plugin.sh installs Debian's)",
        "no Docker engine: dockerd did not start",
    ):
        assert skip_set_up_should_prevent(reason), reason
    for reason in ("this CPU supports up to avx2, not avx512", "slow: set SLOW=1 to run it", "no CUDA GPU"):
        assert not skip_set_up_should_prevent(reason), reason


def test_the_integration_files_run_as_two_units_first_and_every_other_file_as_one(tmp_path: Path) -> None:
    (tmp_path / "integration").mkdir()
    (tmp_path / "integration" / "conftest.py").write_text("")
    one, two = "def test_one() -> None:\n    pass\n", "def test_two() -> None:\n    pass\n"
    for name in ("test_cpu_image.py", "test_proof.py", "test_bake.py", "test_sigterm.py"):
        (tmp_path / "integration" / name).write_text(one)
    for name in ("test_alpha.py", "test_beta.py"):
        (tmp_path / name).write_text(one + "\n" + two)
    done = _pytest(tmp_path, one, args=("-v", "-n", "3", "--dist", "loadfile"))
    assert done.returncode == 0, done.stdout[-3000:]
    ran = [line.split() for line in done.stdout.splitlines() if " PASSED " in line and line.startswith("[gw")]
    worker = {}
    for words in ran:
        worker.setdefault(words[-1].split("::")[0], set()).add(words[0])
    shared = worker["integration/test_cpu_image.py"] | worker["integration/test_proof.py"]
    own = worker["integration/test_bake.py"] | worker["integration/test_sigterm.py"]
    assert len(shared) == 1 and len(own) == 1 and shared != own, worker  # one worker per group
    assert all(len(found) == 1 for found in worker.values()), worker  # a file's tests on one worker
