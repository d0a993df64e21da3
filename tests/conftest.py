"""What every tier shares: the ``slow`` marker's rule (registered in pyproject.toml), and the rule
that, after set-up, a test may skip only for hardware or the slow tier.

``make test`` installs every package the tests use (scripts/system-deps.sh: Docker, Redis, the HIP
compiler, ...) and sets ``IMAGEGEN_STRICT_SKIPS=1``; under it a skip whose reason says a package
or service is missing (it names an install command, or an engine that set-up starts) is a failure:
set-up was meant to provide it, so the skip would hide a tier that never ran. Run by hand without
the variable, such tests skip as usual, with the reason.

``make test`` runs the suite on several workers (pytest-xdist, ``--dist loadfile``): each test
file is one unit of work (``work_unit``), so a file's fixtures are made once, and the integration
tests, which share one Docker engine, run in two groups (``engine_group``), each a unit on a worker
of its own, started first as they take longest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

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


TESTS = Path(__file__).resolve().parent
# The integration files that build, run and remove only images and containers of their own, and
# never count the engine's containers: they run beside the others. Every other integration file
# (a new one too) is in the group that reads the session's shared builds (tests/integration/
# conftest.py), and holds the tests that count containers or run classic builds, which must not
# see another file's at work.
ENGINE_OWN_FILES = frozenset({
    "test_bake.py", "test_context_cache.py", "test_cross_image.py", "test_exact_image.py",
    "test_hostile_image_documents.py", "test_index_credentials.py", "test_layer_readers.py",
    "test_multiarch.py", "test_publish_refused.py", "test_sigterm.py", "test_standins.py",
    "test_torch_check_timeout.py", "test_verify_bad_images.py",
})  # fmt: skip


def engine_group(path: Path) -> str | None:
    """The worker group of an integration test file; None for a file of another tier."""
    relative = path.resolve()
    if not relative.is_relative_to(TESTS / "integration"):
        return None
    return "engine-own" if relative.name in ENGINE_OWN_FILES else "engine-shared"


def work_unit(nodeid: str, rootdir: Path) -> str:
    """What runs on one worker, in one go: the test's file, or its file's engine group."""
    path = nodeid.split("::", 1)[0]
    return engine_group(rootdir / path) or path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``: a file is a unit, but the integration files are two units,
    their engine groups (xdist's own ``loadgroup`` cannot be used: with pytest 9 its group marks
    never reach the scheduler)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class EngineGroups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, config.rootpath)

    return EngineGroups(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the engine groups first, file order kept
        items.sort(key=lambda item: engine_group(item.path) is None)
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
