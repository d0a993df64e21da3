"""Loading a compiled op once per process, and the one warning a front gives when it falls back.

Every front holds one ``LazyOp`` per op (the GPU fronts through ``kernels._gpu_load.GpuOp``).
The first ``load()`` imports or JIT-builds the module through ``op_builder``; later calls
return it, or raise the same error again without retrying. Nothing is loaded at import.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType

import torch

from op_builder.errors import OpLoadError

# Frames a fallback warning should not point at: the fronts' own helpers and torch's
# wrappers (optimizer step hooks) that sit between the user's call and the warning.
_INTERNAL_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)


class LazyOp:
    """One op's load state for this process: the module, or why it is unavailable.

    on_load: called once with the op's name and module when it first loads (for a front's
    settings that must reach every loaded module, such as the CPU ops' SIMD level).
    """

    def __init__(self, name: str, on_load: Callable[[str, ModuleType], None] | None = None) -> None:
        self.name = name
        self._on_load = on_load
        self._module: ModuleType | None = None
        self._failure: Exception | None = None
        self._warned: set[str] = set()
        self._lock = threading.Lock()  # two threads' first calls must not build the op twice

    @property
    def loaded(self) -> ModuleType | None:
        """The module if a load has succeeded, else None; never loads."""
        return self._module

    def load(self) -> ModuleType:
        """The compiled module; raises OpLoadError (or ImportError) when it cannot load."""
        with self._lock:
            if self._module is not None:
                return self._module
            if self._failure is not None:
                raise self._failure
            try:
                module = self._import()
            except (OpLoadError, ImportError) as exc:
                self._failure = exc
                raise
            if self._on_load is not None:
                self._on_load(self.name, module)
            self._module = module
            return module

    def _import(self) -> ModuleType:
        # Imported here: a front's import must not pull in the build system.
        from op_builder import get_builder

        return get_builder(self.name).load()

    def warn_once(self, key: str, message: str, *, stacklevel: int | None = None) -> None:
        """Warn ``message`` (a RuntimeWarning) the first time this op meets ``key`` in this process.

        stacklevel: as ``warnings.warn`` counts it from our caller; None points at the first
        frame outside this package and torch (the user's call, however deep the front's helpers).
        """
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        level = _outside_stacklevel() if stacklevel is None else stacklevel + 1
        warnings.warn(message, RuntimeWarning, stacklevel=level)


# What a stable module's STD_TORCH_CHECK puts before its message: "function, /path/file.h:114, ".
_CHECK_PREFIX = re.compile(r"^[\w:~<>]+, [^,\n]+:\d+, ")


def check_message(exc: BaseException) -> str:
    """An op's check message without the C++ location a stable module puts before it."""
    return _CHECK_PREFIX.sub("", str(exc).strip(), count=1)


def _outside_stacklevel() -> int:
    """The warnings stacklevel, seen from our caller, of the first frame outside _INTERNAL_DIRS."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame = frame.f_back
        level += 1
    return level
