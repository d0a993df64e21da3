"""DeepSpeed, the reference of the parity tests: imported on a CPU, or the test module skipped."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def import_deepspeed(module: str, compared: str) -> ModuleType:
    """``deepspeed.<module>``, or skip the calling test module, saying how to install DeepSpeed."""
    # Without it DeepSpeed probes for CUDA / other accelerators at import, noisily, on a CPU build.
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        return importlib.import_module(f"deepspeed.{module}")
    except ImportError as exc:
        pytest.skip(
            f'DeepSpeed is not installed ({exc}); install it with `pip install -e ".[parity]"` '
            f"(`make` installs it) to compare {compared} with DeepSpeed's",
            allow_module_level=True,
        )
