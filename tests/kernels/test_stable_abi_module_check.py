"""The stable-ABI symbol check on the real cpu_lion, built both ways from the same sources.

A stable build of cpu_lion (as the project builds it for torch >= 2.10) passes
``stable_abi.check_module``; the same sources built as a module for this torch alone (the
builder's ``stable_abi = None``: pybind11 and ATen) fail it, naming a C++ symbol of c10 or ATen.
That the check can tell them apart is what lets ``verify`` and the build trust it; that a passing
module really loads on another torch is ``test_stable_abi_proof.py`` (slow tier).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import pytest

from kernels.optim.builders import CPULionBuilder
from op_builder import get_builder, stable_abi

TARGET = "2.10"
# A mangled name inside c10:: or at:: (a function, a const method, a vtable or type info).
C10_OR_ATEN = re.compile(r"^_Z(?:T[VIS])?N?[rVKRO]*(?:3c10|2at)[0-9A-Z]")


class PerTorchLion(CPULionBuilder):
    """cpu_lion built for this torch alone, under a name of its own (the loader keeps one module
    per op name in a process, so the stable one loaded first would be returned again)."""

    name: ClassVar[str] = "cpu_lion_per_torch"
    # Defined outside kernels/optim, the builder would look for its sources beside this test.
    source_root: ClassVar[Path | None] = Path(CPULionBuilder().source_dir())
    stable_abi: ClassVar[str | None] = None


def test_a_stable_cpu_lion_keeps_to_its_target() -> None:
    module = get_builder("cpu_lion").load()  # installed ahead of time if it fits, else JIT
    assert isinstance(getattr(module, "op_namespace", None), str), "cpu_lion was not built stable"
    assert module.__file__ is not None
    report = stable_abi.check_module(module.__file__, TARGET)
    assert report.ok, report.describe()


def test_the_same_op_built_for_this_torch_alone_fails_the_check() -> None:
    module = PerTorchLion().load()
    assert not hasattr(module, "op_namespace")  # a pybind11 module: its functions are its own
    assert module.__file__ is not None
    report = stable_abi.check_module(module.__file__, TARGET)
    assert not report.ok
    named = [symbol for symbol in report.torch_cxx if C10_OR_ATEN.match(symbol)]
    assert named, f"no c10 / ATen symbol among {report.torch_cxx[:10]}"
    assert "torch C++ symbols " + report.torch_cxx[0] in report.describe()


@pytest.mark.parametrize("builder", [CPULionBuilder(), PerTorchLion()], ids=["stable", "per-torch"])
def test_both_builds_compute_the_same_lion_step(builder: CPULionBuilder) -> None:
    """The per-torch build is the same op, so the check's verdict is about the ABI, not the code."""
    import torch

    module = builder.load()
    gen = torch.Generator().manual_seed(0)
    p, g = torch.randn(1003, generator=gen), torch.randn(1003, generator=gen)
    m = torch.zeros(1003)
    expected_m = 0.99 * m + 0.01 * g
    update = torch.sign(0.9 * m + 0.1 * g)
    expected_p = p * (1 - 1e-2 * 0.1) - 1e-2 * update
    module.lion_step(p, g, m, None, 1e-2, 0.9, 0.99, 0.1)
    torch.testing.assert_close(p, expected_p)
    torch.testing.assert_close(m, expected_m)
