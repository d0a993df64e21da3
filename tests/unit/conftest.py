"""Fixtures shared by the unit tests that run the CLI against the file system."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory, so relative output paths land in the test's own folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def umask() -> Iterator[None]:
    """The test may set the umask; it is put back afterwards."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)
