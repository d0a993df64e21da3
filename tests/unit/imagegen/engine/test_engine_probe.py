"""Engine choice from hand-written probe results, and probing real (scripted) docker clients."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from imagegen.engine.detect import (
    ClientProbe,
    EngineProbe,
    choose_engine,
    docker_clients,
    probe_buildx,
    probe_builtin_buildkit,
    probe_engine,
)
from imagegen.errors import EngineUnavailableError

NEW_CLI = "/usr/local/bin/docker"  # Docker 28 client without the buildx plugin
DEBIAN_CLI = "/usr/bin/docker"  # Debian's 20.10 client, BuildKit built in

# ---------------------------------------------------------------- choosing an engine


def probe(*clients: ClientProbe, server: str | None = "20.10.24") -> EngineProbe:
    return EngineProbe(server, None if server else "connection refused", clients)


@pytest.mark.parametrize(
    ("clients", "env", "prefer", "expected"),
    [
        # This machine: the first client on PATH lacks buildx, Debian's has BuildKit built in.
        (
            [ClientProbe(NEW_CLI, False, False), ClientProbe(DEBIAN_CLI, False, True)],
            {},
            True,
            ("buildkit", DEBIAN_CLI),
        ),
        # buildx wins over built-in BuildKit, wherever it is on PATH.
        (
            [ClientProbe(DEBIAN_CLI, False, True), ClientProbe(NEW_CLI, True, None)],
            {},
            True,
            ("buildx", NEW_CLI),
        ),
        ([ClientProbe(NEW_CLI, True, None)], {}, True, ("buildx", NEW_CLI)),
        # Nothing BuildKit-capable: the classic builder through the SDK (no client needed).
        ([ClientProbe(NEW_CLI, False, False)], {}, True, ("classic", None)),
        ([], {}, True, ("classic", None)),
        # Asked for classic, by flag or by Docker's own variable.
        ([ClientProbe(NEW_CLI, True, None)], {}, False, ("classic", None)),
        ([ClientProbe(NEW_CLI, True, None)], {"DOCKER_BUILDKIT": "0"}, True, ("classic", None)),
        ([ClientProbe(DEBIAN_CLI, False, True)], {"DOCKER_BUILDKIT": "1"}, True, ("buildkit", DEBIAN_CLI)),
    ],
)
def test_choose_engine(
    clients: list[ClientProbe], env: dict[str, str], prefer: bool, expected: tuple[str, str | None]
) -> None:
    engine, _ = choose_engine(probe(*clients), prefer_buildkit=prefer, env=env)
    assert (engine.kind, engine.client) == expected
    assert engine.server_version == "20.10.24"


def test_fallback_to_classic_says_why_and_names_the_clients_tried() -> None:
    _, reasons = choose_engine(probe(ClientProbe(NEW_CLI, False, False)), env={})
    assert len(reasons) == 1
    assert NEW_CLI in reasons[0] and "classic" in reasons[0]


def test_buildkit_choice_needs_no_explanation() -> None:
    _, reasons = choose_engine(probe(ClientProbe(DEBIAN_CLI, False, True)), env={})
    assert reasons == ()


def test_no_daemon_is_exit_3_with_a_hint() -> None:
    with pytest.raises(EngineUnavailableError) as info:
        choose_engine(probe(ClientProbe(DEBIAN_CLI, False, True), server=None), env={})
    assert info.value.exit_code == 3
    assert "connection refused" in info.value.message
    assert info.value.hint is not None and "scripts/ensure-docker.sh" in info.value.hint


# ---------------------------------------------------------------- probing clients (real executables)


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_docker_clients_in_path_order_one_per_real_file(tmp_path: Path) -> None:
    first = _script(tmp_path / "a" / "docker", "exit 0\n")
    second = _script(tmp_path / "b" / "docker", "exit 0\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "docker").symlink_to(first)  # same file as a/docker
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "docker").write_text("not executable")
    path = os.pathsep.join(str(tmp_path / d) for d in ("d", "a", "c", "b", "missing"))
    assert docker_clients({"PATH": path}) == (str(first), str(second))


def test_builtin_buildkit_probe_sends_a_scratch_build_with_buildkit_on(tmp_path: Path) -> None:
    # Succeeds only for `DOCKER_BUILDKIT=1 docker build ... -` with "FROM scratch" on stdin,
    # as Debian's 20.10 client does.
    builtin = _script(
        tmp_path / "old" / "docker",
        '[ "$DOCKER_BUILDKIT" = 1 ] && [ "$1" = build ] && grep -q "^FROM scratch" && exit 0\nexit 1\n',
    )
    # A client newer than 23.0 without the buildx plugin fails the same request.
    newer = _script(
        tmp_path / "new" / "docker",
        'echo "ERROR: BuildKit is enabled but the buildx component is missing"; exit 1\n',
    )
    assert probe_builtin_buildkit(str(builtin), {"PATH": os.defpath})
    assert not probe_builtin_buildkit(str(newer), {"PATH": os.defpath})
    assert not probe_builtin_buildkit(str(tmp_path / "absent" / "docker"), {"PATH": os.defpath})


def test_buildx_probe(tmp_path: Path) -> None:
    with_plugin = _script(tmp_path / "x" / "docker", '[ "$1 $2" = "buildx version" ] && exit 0\nexit 1\n')
    without = _script(
        tmp_path / "y" / "docker", "echo \"docker: 'buildx' is not a docker command.\"; exit 1\n"
    )
    assert probe_buildx(str(with_plugin), {})
    assert not probe_buildx(str(without), {})


def test_no_daemon_message_says_it_once(tmp_path: Path) -> None:
    # A socket nobody listens on: the SDK fails to connect, the probe records why.
    env = {"DOCKER_HOST": f"unix://{tmp_path / 'nobody.sock'}", "PATH": str(tmp_path)}
    with pytest.raises(EngineUnavailableError) as info:
        choose_engine(probe_engine(env), env=env)
    message = info.value.message
    assert message.startswith("no Docker daemon answers: ")
    assert message.count("no Docker daemon answers") == 1, message
    assert info.value.hint is not None and "scripts/ensure-docker.sh" in info.value.hint
