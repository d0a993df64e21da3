"""What every tier shares: the ``slow`` marker's rule (registered in pyproject.toml)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest


def slow_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """SLOW=1 runs the tests marked ``slow``; anything else leaves them out, with the reason."""
    return env.get("SLOW", "").strip() == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_enabled():
        return
    skip = pytest.mark.skip(reason="slow: set SLOW=1 to run it")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
