"""A stable op module as the fronts use every op module: its functions as attributes.

A stable build (``op_builder.stable_abi``) registers its ops in a namespace of ``torch.ops`` and
its Python module is only a handle that names that namespace (``op_namespace``). ``StableOps``
makes ``module.adam_step(...)`` call ``torch.ops.<namespace>.adam_step``, so a front calls a
stable module and a pybind11 one alike.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


class StableOps(ModuleType):
    """The ops of one stable build, as attributes of a module."""

    def __init__(self, handle: ModuleType, namespace: str) -> None:
        super().__init__(handle.__name__, handle.__doc__)
        self.__file__ = handle.__file__
        self.op_namespace = namespace
        self.handle = handle  # kept: the library stays loaded while its ops are in use

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        import torch  # only a loaded op reaches here, and torch is loaded by then

        try:
            op = getattr(getattr(torch.ops, self.op_namespace), name)
        except (AttributeError, RuntimeError):
            raise AttributeError(f"op module {self.__name__} has no op {name!r}") from None
        setattr(self, name, op)  # later calls skip the lookup
        return op


def as_op_module(module: ModuleType) -> ModuleType:
    """``module`` itself for a pybind11 build; its ops through ``StableOps`` for a stable one."""
    namespace = getattr(module, "op_namespace", None)
    if not isinstance(namespace, str):
        return module
    return StableOps(module, namespace)
