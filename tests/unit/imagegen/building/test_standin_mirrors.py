"""The Debian mirrors of the stand-in bases come from the host's apt sources (imagegen/building/standins/
mirrors.py).

The selection is a pure function of apt's indextargets lines (tested on tables); the whole path,
``imagegen standins --mirrors``, asks apt itself, pointed by APT_CONFIG at made-up sources
written here, so no test depends on this machine's sources or reaches a network.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.building.standins.mirrors import debian_mirror, host_suites, resolve
from imagegen.cli import app
from imagegen.errors import BuildFailedError

runner = CliRunner()
BOOKWORM = host_suites("bookworm", 'ID=debian\nVERSION_CODENAME="bookworm"\n')
TARGETS = """\
deb http://deb.example.invalid/debian-security/ bookworm-security main
deb http://deb.example.invalid/debian/ bookworm main
deb http://deb.example.invalid/debian/ bookworm-updates main
"""


def test_host_suites() -> None:
    assert host_suites("trixie", 'ID=debian\nVERSION_CODENAME="bookworm"\n') == (
        "trixie", "stable", "oldstable", "testing", "unstable", "sid", "bookworm",
    )  # fmt: skip
    # An Ubuntu host's codename is not a Debian suite.
    assert "jammy" not in host_suites("bookworm", "ID=ubuntu\nVERSION_CODENAME=jammy\n")


@pytest.mark.parametrize(
    ("targets", "main", "security"),
    [
        (TARGETS, "http://deb.example.invalid/debian", "http://deb.example.invalid/debian-security"),
        # -updates / -backports only, a vendor's repository, a deb-src, a file: URI: none of them.
        (
            "deb http://m.invalid/debian bookworm-updates main\n"
            "deb https://vendor.invalid/apt cloud-sdk-bookworm main\n"
            "deb-src http://src.invalid/debian bookworm main\n"
            "deb file:/srv/debian bookworm main\n",
            None,
            None,
        ),
        # Not the main component; then one that is.
        (
            "deb http://a.invalid/debian bookworm contrib\ndeb http://b.invalid/debian bookworm main\n",
            "http://b.invalid/debian",
            None,
        ),
        # The old security layout (suite/updates).
        (
            "deb http://s.invalid/debian-security bookworm/updates main\n",
            None,
            "http://s.invalid/debian-security",
        ),
        # Another distribution's archive.
        (
            "deb http://u.invalid/ubuntu jammy main\ndeb http://u.invalid/ubuntu jammy-security main\n",
            None,
            None,
        ),
    ],
)
def test_selection_from_indextargets(targets: str, main: str | None, security: str | None) -> None:
    assert debian_mirror("main", BOOKWORM, targets) == main
    assert debian_mirror("security", BOOKWORM, targets) == security


def test_a_bookworm_hosts_archive_serves_trixie() -> None:
    # The CUDA 12.4 stand-in's trixie base comes from the same archive the host uses.
    trixie = host_suites("trixie", "ID=debian\nVERSION_CODENAME=bookworm\n")
    assert debian_mirror("main", trixie, TARGETS) == "http://deb.example.invalid/debian"
    assert debian_mirror("security", trixie, TARGETS) == "http://deb.example.invalid/debian-security"


def test_the_environment_wins() -> None:
    env = {"STANDIN_MIRROR": "http://e.invalid/debian", "STANDIN_SECURITY_MIRROR": "http://e.invalid/sec"}
    found = resolve("bookworm", env, os_release=Path("/nonexistent"))
    assert (found.main, found.security) == ("http://e.invalid/debian", "http://e.invalid/sec")


needs_apt = pytest.mark.skipif(
    shutil.which("apt-get") is None, reason="needs apt-get (apt reads the sources)"
)


def mirrors(tmp_path: Path, sources_list: str = "", parts: dict[str, str] | None = None, **env: str):  # type: ignore[no-untyped-def]
    (tmp_path / "sources.list").write_text(sources_list)
    (tmp_path / "sources.list.d").mkdir()
    for name, text in (parts or {}).items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    (tmp_path / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{tmp_path}/sources.list";\n'
        f'Dir::Etc::SourceParts "{tmp_path}/sources.list.d";\n'
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}
    # CliRunner's env adds to os.environ; unset the STANDIN_* a caller may have.
    unset = {k: None for k in os.environ if k.startswith("STANDIN_")}
    return runner.invoke(
        app,
        ["standins", "--mirrors"],
        env={**unset, **clean, "APT_CONFIG": str(tmp_path / "apt.conf"), **env},
    )


def found(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


@needs_apt
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


@needs_apt
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


@needs_apt
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


@needs_apt
def test_no_debian_archive_names_the_variable(tmp_path: Path) -> None:
    done = mirrors(
        tmp_path,
        "deb http://ubuntu.example.invalid/ubuntu jammy main\n"
        "deb http://ubuntu.example.invalid/ubuntu jammy-security main\n"
        "deb file:/srv/debian bookworm main\n",
    )
    assert done.exit_code == 1 and "STANDIN_MIRROR=" not in done.stdout
    assert "set STANDIN_MIRROR" in done.output


@needs_apt
def test_no_security_archive_names_its_variable(tmp_path: Path) -> None:
    done = mirrors(tmp_path, "deb http://m.example.invalid/debian bookworm main\n")
    assert done.exit_code == 1
    assert "set STANDIN_SECURITY_MIRROR" in done.output and "set STANDIN_MIRROR " not in done.output


def test_resolve_raises_build_failed_without_sources(tmp_path: Path) -> None:
    (tmp_path / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{tmp_path}/none";\nDir::Etc::SourceParts "{tmp_path}";\n'
    )
    with pytest.raises(BuildFailedError, match="no Debian mirror for trixie"):
        resolve("trixie", {"APT_CONFIG": str(tmp_path / "apt.conf"), "PATH": os.environ.get("PATH", "")})
