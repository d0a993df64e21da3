"""The public names of an op family's package, imported from its modules on first use (PEP 562).

op_builder imports each family's ``builders`` module to find our ops, on hosts without torch (the
imagegen CLI's) too: the package itself must import nothing heavy. ``from kernels.optim import
CPUAdam`` still works, and imports the front (and torch) only then.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


class LazyExports:
    """``module -> names`` of one package; ``get(name)`` imports the module defining ``name``."""

    def __init__(self, package: str, modules: Mapping[str, tuple[str, ...]]) -> None:
        self.package = package
        self._where = {name: module for module, names in modules.items() for name in names}

    @property
    def names(self) -> list[str]:
        return sorted(self._where)

    def get(self, name: str) -> Any:
        module = self._where.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{self.package}.{module}"), name)
        vars(sys.modules[self.package])[name] = value  # later reads find it without us
        return value
