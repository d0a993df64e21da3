"""scripts/standin-images.sh --mirrors: the Debian mirrors come from the host's apt sources.

apt itself reads the sources (``apt-get indextargets``); APT_CONFIG points it at the made-up
ones written here, so no test depends on this machine's sources or reaches a network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "standin-images.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("apt-get") is None or shutil.which("bash") is None,
    reason="needs bash and apt-get (the script asks apt to read the sources)",
)


def mirrors(
    tmp_path: Path, sources_list: str = "", parts: dict[str, str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sources.list").write_text(sources_list)
    (tmp_path / "sources.list.d").mkdir()
    for name, text in (parts or {}).items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    (tmp_path / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{tmp_path}/sources.list";\n'
        f'Dir::Etc::SourceParts "{tmp_path}/sources.list.d";\n'
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}
    return subprocess.run(
        ["bash", str(SCRIPT), "--mirrors"],
        env={**clean, "APT_CONFIG": str(tmp_path / "apt.conf"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def found(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_one_line_and_deb822_sources(tmp_path: Path) -> None:
    done = mirrors(
        tmp_path,
        sources_list=(
            "# deb http://commented.example.invalid/debian bookworm main\n"
            "deb-src https://src.example.invalid/debian bookworm main\n"
            "deb https://vendor.example.invalid/apt cloud-sdk-bookworm main\n"
            "deb [arch=amd64 signed-by=/k.gpg] https://mirror.example.invalid/debian/ bookworm-updates main\n"
            "deb [ arch=amd64 ] https://mirror.example.invalid/debian/ bookworm main contrib\n"
        ),
        parts={
            "vendor.sources": (
                "Types: deb\nURIs: https://node.example.invalid/node\nSuites: nodistro\nComponents: main\n"
            ),
            "debian.sources": (
                "Types: deb\nURIs: https://off.example.invalid/debian-security\nSuites: bookworm-security\n"
                "Components: main\nEnabled: no\n\n"
                "Types: deb deb-src\nURIs: http://security.example.invalid/debian-security\n"
                "Suites: bookworm-security\nComponents: main\n"
            ),
        },
    )
    assert found(done) == {
        "STANDIN_MIRROR": "https://mirror.example.invalid/debian",
        "STANDIN_SECURITY_MIRROR": "http://security.example.invalid/debian-security",
    }


def test_a_debian_alias_suite_counts(tmp_path: Path) -> None:
    done = mirrors(
        tmp_path,
        "deb http://m.example.invalid/debian stable main\n"
        "deb http://s.example.invalid/debian-security stable-security main\n",
    )
    assert found(done) == {
        "STANDIN_MIRROR": "http://m.example.invalid/debian",
        "STANDIN_SECURITY_MIRROR": "http://s.example.invalid/debian-security",
    }


def test_the_environment_wins_and_needs_no_sources(tmp_path: Path) -> None:
    done = mirrors(
        tmp_path,
        "deb http://m.example.invalid/debian bookworm main\n",
        STANDIN_MIRROR="http://env.example.invalid/debian",
        STANDIN_SECURITY_MIRROR="http://env.example.invalid/debian-security",
    )
    assert found(done) == {
        "STANDIN_MIRROR": "http://env.example.invalid/debian",
        "STANDIN_SECURITY_MIRROR": "http://env.example.invalid/debian-security",
    }


def test_no_debian_archive_names_the_variable(tmp_path: Path) -> None:
    done = mirrors(
        tmp_path,
        "deb http://ubuntu.example.invalid/ubuntu jammy main\n"
        "deb http://ubuntu.example.invalid/ubuntu jammy-security main\n"
        "deb file:/srv/debian bookworm main\n",
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "set STANDIN_MIRROR" in done.stderr


def test_no_security_archive_names_its_variable(tmp_path: Path) -> None:
    done = mirrors(tmp_path, "deb http://m.example.invalid/debian bookworm main\n")
    assert done.returncode == 1
    assert "set STANDIN_SECURITY_MIRROR" in done.stderr and "set STANDIN_MIRROR " not in done.stderr
