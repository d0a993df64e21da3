"""The verify container's removal when Ctrl-C lands while the engine is still creating it.

The race cannot be timed reliably against a real engine (tests/integration's Ctrl-C test hits
it now and then), so the engine's answers in that window are played here in order: the
container is listed but its removal is refused until the engine has made it.
"""

from __future__ import annotations

import docker
import pytest

from imagegen.engine import sealed


class _EngineMidCreate:
    """``client.api`` of an engine that lists ``name`` at once and lets it be removed only
    after ``refusals`` attempts, each refused with ``error``."""

    def __init__(self, refusals: int, error: Exception) -> None:
        self.refusals, self.error = refusals, error
        self.exists, self.removals = True, 0

    def remove_container(self, name: str, force: bool) -> None:
        assert force
        self.removals += 1
        if not self.exists:
            raise docker.errors.NotFound("No such container")
        if self.removals <= self.refusals:
            raise self.error
        self.exists = False

    def containers(self, all: bool, quiet: bool, filters: dict[str, str]) -> list[dict[str, str]]:
        assert all and filters["name"].startswith("^/")
        return [{"Id": "c0"}] if self.exists else []


class _Client:
    def __init__(self, api: _EngineMidCreate) -> None:
        self.api = api


def _conflict() -> docker.errors.APIError:
    response = type("Response", (), {"status_code": 409, "reason": "Conflict"})()
    return docker.errors.APIError("container is being created", response=response)  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [docker.errors.NotFound("No such container"), _conflict()])
def test_a_container_still_being_created_is_removed_once_made(error: Exception) -> None:
    api = _EngineMidCreate(refusals=3, error=error)
    sealed.remove_container(_Client(api), "imagegen-verify-0", grace=5.0)
    assert not api.exists and api.removals == 4


def test_a_container_never_made_is_not_waited_for() -> None:
    api = _EngineMidCreate(refusals=0, error=docker.errors.NotFound("x"))
    api.exists = False
    sealed.remove_container(_Client(api), "imagegen-verify-0", grace=5.0)
    assert api.removals == 1


def test_the_wait_is_bounded() -> None:
    api = _EngineMidCreate(refusals=10**6, error=docker.errors.NotFound("x"))
    sealed.remove_container(_Client(api), "imagegen-verify-0", grace=0.3)
    assert api.exists and 2 <= api.removals <= 10


def test_other_engine_errors_still_raise() -> None:
    response = type("Response", (), {"status_code": 500, "reason": "Server Error"})()
    error = docker.errors.APIError("boom", response=response)  # type: ignore[arg-type]
    with pytest.raises(docker.errors.APIError):
        sealed.remove_container(_Client(_EngineMidCreate(refusals=1, error=error)), "imagegen-verify-0")
