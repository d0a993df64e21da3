"""What every tier shares: the ``slow`` marker's rule (registered in pyproject.toml), and the rule
that, after set-up, a test may skip only for hardware or the slow tier.

``make test`` installs every package the tests use (scripts/system-deps.sh: Docker, Redis, the HIP
compiler, ...) and sets ``IMAGEGEN_STRICT_SKIPS=1``; under it a skip whose reason says a package
or service is missing (it names an install command, or an engine that set-up starts) is a failure:
set-up was meant to provide it, so the skip would hide a tier that never ran. Run by hand without
the variable, such tests skip as usual, with the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Mapping

import pytest

STRICT_SKIPS = "IMAGEGEN_STRICT_SKIPS"
# What a skip's reason says when what it lacks is something set-up installs or starts.
_SET_UP_PROVIDES = re.compile(
    r"apt-get install|apt install|pip install|system-deps|buildx-plugin|no Docker engine", re.IGNORECASE
)


def slow_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """SLOW=1 runs the tests marked ``slow``; anything else leaves them out, with the reason."""
    return env.get("SLOW", "").strip() == "1"


def strict_skips(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(STRICT_SKIPS, "").strip() == "1"


def skip_set_up_should_prevent(reason: str) -> bool:
    """Whether a skip ``reason`` is for something set-up installs (not hardware, not the slow tier)."""
    return bool(_SET_UP_PROVIDES.search(reason))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_enabled():
        return
    skip = pytest.mark.skip(reason="slow: set SLOW=1 to run it")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and strict_skips()) or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    if skip_set_up_should_prevent(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped for something set-up provides ({STRICT_SKIPS}=1): {reason}\n"
            "scripts/system-deps.sh and scripts/ensure-docker.sh (run by `make test`) should have "
            "installed or started it; a skip is only for hardware or the slow tier"
        )
