"""Forcing the CPU kernels' instruction set for a self-test run (``selftest --isa``), without torch
at import.

An op takes part when its compiled module reports and sets a SIMD level (``supported_simd_level()``
and ``set_simd_level(name)``: our CPU optimizers; an op package's CPU op may do the same). Which
ops those are is read from the modules themselves, never from a list of ours: op_builder knows
nothing of the ops' code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import ModuleType

from op_builder.registry import get_builder

# Each architecture's code paths, weakest first; scalar runs everywhere.
ISA_FAMILIES = (("scalar", "avx2", "avx512"), ("scalar", "neon", "sve"))
ISA_LEVELS = ("scalar", "avx2", "avx512", "neon", "sve")


def isa_problem(requested: str, supported: str) -> str | None:
    """Why ``requested`` cannot run on a CPU whose best level is ``supported``; None if it can.

    A level of another architecture (neon on x86) cannot run either.
    """
    if requested == "auto" or any(
        requested in family and supported in family and family.index(requested) <= family.index(supported)
        for family in ISA_FAMILIES
    ):
        return None
    return f"this CPU cannot run the {requested} code path (its best is {supported})"


class UnsupportedIsa(ValueError):
    """A forced instruction set this CPU cannot run; ``supported`` is its best one."""

    def __init__(self, message: str, supported: str) -> None:
        super().__init__(message)
        self.supported = supported


def simd_modules(ops: Iterable[str], env: Mapping[str, str]) -> list[ModuleType]:
    """The compiled modules of ``ops`` that have SIMD levels, loaded (CPU ops only: a GPU op is
    never loaded for this). An op that does not load is left out: its self-test reports why."""
    found = []
    for op in ops:
        builder = get_builder(op)
        if builder.target != "cpu":
            continue
        try:
            module = builder.load(env)
        except KeyboardInterrupt:
            raise
        except Exception:  # its self-test loads it again, and reports why it does not load
            continue
        if all(callable(getattr(module, fn, None)) for fn in ("supported_simd_level", "set_simd_level")):
            found.append(module)
    return found


def force_isa(level: str, ops: Iterable[str], env: Mapping[str, str]) -> None:
    """Make every op of ``ops`` with SIMD levels run ``level``'s code path.

    Raises UnsupportedIsa when this CPU cannot run it: the CPU's best level is what the first of
    those modules probes. When none loads there is nothing to force.
    """
    modules = simd_modules(ops, env)
    if not modules:
        return
    supported = str(modules[0].supported_simd_level())
    problem = isa_problem(level, supported)
    if problem is not None:
        raise UnsupportedIsa(problem, supported)
    for module in modules:
        module.set_simd_level(level)
