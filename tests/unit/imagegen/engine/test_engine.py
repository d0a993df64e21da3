"""Build command lines and inputs checked before any build starts (no Docker needed)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from imagegen.engine.backend import BuildRequest
from imagegen.engine.build import build_image
from imagegen.engine.buildkit import cli_build_argv
from imagegen.engine.classic import context_excludes
from imagegen.engine.types import Engine

NEW_CLI = "/usr/local/bin/docker"  # Docker 28 client without the buildx plugin
DEBIAN_CLI = "/usr/bin/docker"  # Debian's 20.10 client, BuildKit built in

# ---------------------------------------------------------------- build command lines


def request(tmp_path: Path, **changes: object) -> BuildRequest:
    base = BuildRequest(tmp_path, tmp_path / "Dockerfile", tmp_path / "iid", "t:1")
    return replace(base, **changes)


def test_buildx_argv_loads_the_image_and_passes_contexts_and_secrets(tmp_path: Path) -> None:
    engine = Engine("buildx", NEW_CLI, "27.0")
    req = request(
        tmp_path,
        build_args={"B": "2", "A": "1"},
        extra_contexts={"wheels": tmp_path},
        secrets={"ca": tmp_path / "ca.crt"},
    )
    argv = cli_build_argv(engine, req)
    assert argv[:4] == [NEW_CLI, "buildx", "build", "--load"]
    assert "--progress=plain" in argv and "--no-cache" not in argv
    assert argv[argv.index("--target") + 1] == "runtime"
    assert argv[argv.index("-t") + 1] == "t:1"
    assert argv[argv.index("-f") + 1] == str(tmp_path / "Dockerfile")
    # Sorted, so the same inputs give the same command line.
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == ["A=1", "B=2"]
    assert f"wheels={tmp_path}" in argv
    assert f"id=ca,src={tmp_path / 'ca.crt'}" in argv
    assert argv[-1] == str(tmp_path)


def test_builtin_buildkit_argv_is_plain_docker_build(tmp_path: Path) -> None:
    argv = cli_build_argv(
        Engine("buildkit", DEBIAN_CLI, "20.10"), request(tmp_path, target="build", no_cache=True)
    )
    assert argv[:2] == [DEBIAN_CLI, "build"]
    assert "buildx" not in argv and "--load" not in argv
    assert "--no-cache" in argv and argv[argv.index("--target") + 1] == "build"


def test_named_contexts_need_buildx(tmp_path: Path) -> None:
    from imagegen.errors import BadInputError

    with pytest.raises(BadInputError, match="buildx"):
        build_image(Engine("buildkit", DEBIAN_CLI, "20.10"), tmp_path, "FROM scratch\n", "t",
                    extra_contexts={"w": tmp_path})  # fmt: skip
    with pytest.raises(BadInputError, match="BuildKit"):
        build_image(Engine("classic", None, "20.10"), tmp_path, "FROM scratch\n", "t",
                    secrets={"ca": tmp_path / "ca"})  # fmt: skip


def test_context_excludes_follow_dockerignore(tmp_path: Path) -> None:
    assert ".venv" in context_excludes(tmp_path)
    (tmp_path / ".dockerignore").write_text("# comment\n\nbig/\n*.log\n")
    assert context_excludes(tmp_path) == ["big/", "*.log"]
