"""Writing small real op packages for tests: a builders.py, a C++ source, a self-test.

The op squares a tensor in C++ (``torch::Tensor`` in, ``x * x`` out); its self-test compares
with ``x * x`` computed by torch in Python. Each test names its package uniquely: a package
imported once stays in ``sys.modules`` for the rest of the process.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

SQUARE_CPP = """\
#include <torch/extension.h>

// Elementwise square, the smallest op a package can hold.
torch::Tensor square(torch::Tensor x) { return x * x; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("square", &square, "x * x"); }
"""

_counter = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_counter)}"


def builder_source(
    class_name: str,
    op: str,
    *,
    base: str = "CPUOpBuilder",
    sources: str = '("csrc/square.cpp",)',
    selftest: str | None = None,
    extra: str = "",
) -> str:
    lines = [
        f"class {class_name}({base}):",
        f"    name = {op!r}",
        f'    description = "squares a tensor ({op})"',
        f"    sources = {sources}",
    ]
    if selftest is not None:
        lines.append(f"    selftest = {selftest!r}")
    if extra:
        lines += ["    " + line for line in textwrap.dedent(extra).strip().splitlines()]
    return "\n".join(lines) + "\n"


def write_package(parent: Path, package: str, builders: str, *, selftest_reference: str = "x * x") -> Path:
    """An op package ``parent/package`` whose builders.py holds ``builders`` (after the imports)."""
    root = parent / package
    (root / "csrc").mkdir(parents=True)
    (root / "__init__.py").write_text('"""A test op package."""\n')
    (root / "csrc" / "square.cpp").write_text(SQUARE_CPP)
    (root / "builders.py").write_text(
        "from op_builder import CPUOpBuilder, CUDAOpBuilder\n"
        "from op_builder.archs import ArchLimits\n\n\n" + builders
    )
    (root / "selftest.py").write_text(
        textwrap.dedent(
            f"""\
            import torch

            from op_builder.selftest import SelfTestContext, Tolerance
            from op_builder import get_builder


            def make(op: str):
                def test(ctx: SelfTestContext) -> None:
                    x = torch.linspace(-3, 3, 101)
                    actual = get_builder(op).load().square(x)
                    ctx.compare("square", actual, {selftest_reference}, Tolerance(0, 0))
                return test
            """
        )
    )
    return root


def square_package(parent: Path, package: str, op: str, *, selftest_reference: str = "x * x") -> Path:
    """A one-op package whose self-test is ``<package>.selftest:<op>_test``."""
    root = write_package(
        parent,
        package,
        builder_source("SquareBuilder", op, selftest=f"{package}.selftest:{op}_test"),
        selftest_reference=selftest_reference,
    )
    with (root / "selftest.py").open("a") as handle:
        handle.write(f"\n{op}_test = make({op!r})\n")
    return root
