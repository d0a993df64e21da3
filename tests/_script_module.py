"""Importing a script of this repository (``scripts/``, ``bench/``) by its path, as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` as module ``name``, registered in ``sys.modules`` (dataclasses look
    their module up there). Its own folder is on ``sys.path`` while it loads, as when it runs
    (``bench/`` scripts import ``_common`` so)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        if added:
            sys.path.remove(folder)
    return module
