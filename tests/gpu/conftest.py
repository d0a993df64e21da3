"""GPU tier: every test here needs a CUDA (or ROCm) device and the compiled ops.

Without a visible GPU the whole directory is skipped, with the reason shown in the
summary (``pytest -ra``). With one, the tests call the ops with ``use_kernel=True``,
so an op that cannot load fails its tests instead of quietly using the fallback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

_HERE = Path(__file__).resolve().parent


def _skip_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    build = torch.version.cuda or torch.version.hip
    if build is None:
        return f"no GPU: torch {torch.__version__} is a CPU build"
    platform = "CUDA" if torch.version.cuda else "ROCm"
    return f"no GPU visible to torch {torch.__version__} (built for {platform} {build})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    for item in items:
        if _HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())
