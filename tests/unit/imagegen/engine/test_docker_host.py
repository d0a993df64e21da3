"""A malformed DOCKER_HOST is exit 3 naming the variable, for every command that reaches the engine.

The SDK parses DOCKER_HOST with urllib, which raises ValueError (a bad port, an unclosed IPv6
bracket), not the DockerException the client factory used to catch: a traceback. No daemon is
needed here: the address is refused before any connection is tried.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner, Result

from imagegen.cli import app
from imagegen.engine.client import check_docker_host
from imagegen.errors import EngineUnavailableError
from tests.unit.contract import assert_json_error, assert_reported

runner = CliRunner()
MALFORMED = ["http://[::1", "tcp://host:99999", "tcp://host:abc", "foo://host"]


def _invoke(args: list[str], host: str) -> Result:
    return runner.invoke(app, args, env={"DOCKER_HOST": host, "IMAGEGEN_DEBUG": "", "COLUMNS": "200"})


# Input that passes every check before the engine (the checkout's own sources are built).
BUILD = ["build", "--cpu", "--ops", "cpu_adam", "--tag", "imagegen-test/docker-host:1"]


@pytest.mark.parametrize("host", MALFORMED)
def test_the_address_is_refused_naming_the_variable(host: str) -> None:
    with pytest.raises(EngineUnavailableError) as caught:
        check_docker_host({"DOCKER_HOST": host})
    assert caught.value.exit_code == 3
    assert caught.value.message.startswith(f"DOCKER_HOST={host!r} is not a Docker daemon address")
    assert caught.value.hint and "unix:///var/run/docker.sock" in caught.value.hint


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DOCKER_HOST": ""},
        {"DOCKER_HOST": "unix:///var/run/docker.sock"},
        {"DOCKER_HOST": "tcp://h:2375"},
    ],
)
def test_good_or_absent_addresses_pass(env: dict[str, str]) -> None:
    check_docker_host(env)


@pytest.mark.parametrize("host", MALFORMED)
@pytest.mark.parametrize("command", ["verify", "build"])
def test_verify_and_build_exit_3_with_one_message(host: str, command: str) -> None:
    args = ["verify", "imagegen-test/any:1"] if command == "verify" else BUILD
    assert_reported(_invoke(args, host), code=3, fragment="DOCKER_HOST=")
    assert_json_error(_invoke([*args, "--json"], host), code=3, fragment="DOCKER_HOST=")


@pytest.mark.parametrize("host", MALFORMED)
def test_doctor_reports_it_as_its_engine_finding_and_exits_3(host: str) -> None:
    result = _invoke(["doctor", "--json"], host)
    assert result.exit_code == 3, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    engine = json.loads(result.stdout)["checks"][0]
    assert engine["name"] == "engine" and not engine["ok"]
    assert engine["detail"].startswith(f"DOCKER_HOST={host!r}") and engine["fix"]
    text = _invoke(["doctor"], host)
    assert text.exit_code == 3 and "Traceback" not in text.output
    assert "DOCKER_HOST=" in text.stdout
