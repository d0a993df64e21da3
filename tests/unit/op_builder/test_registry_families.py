"""Our op families as the registry finds them: every folder of kernels/ with a builders module,
ordered by what each family declares (its FAMILY_RANK, the order its module defines its builders),
with no list of ops or families kept anywhere else."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from op_builder.op_sources import OpSourceError
from op_builder.registry import (
    KERNELS_PACKAGE,
    OUR_OP_PACKAGES,
    RANK_ATTRIBUTE,
    builtin_ops,
    families_in,
    in_listing_order,
    our_families,
    our_op_packages,
)
from tests.op_package_files import unique

REPO = Path(__file__).resolve().parents[3]

# The order every listing has shown our ops in; the families' ranks must keep it.
OUR_ORDER = [
    "cpu_adam",
    "cpu_adagrad",
    "cpu_lion",
    "async_io",
    "fused_adam",
    "fused_lamb",
    "fused_lion",
    "transformer",
    "quantizer",
    "fp_quantizer",
]


def test_our_ops_keep_their_order() -> None:
    assert list(builtin_ops()) == OUR_ORDER
    assert (
        our_op_packages()
        == OUR_OP_PACKAGES
        == (
            "kernels.optim",
            "kernels.aio",
            "kernels.transformer",
            "kernels.quantization",
        )
    )


def test_every_family_of_ours_declares_its_rank() -> None:
    """A family without one would come last, after a folder-name tie-break: declared, the order
    does not hang on what a folder is called."""
    families = our_families()
    assert {Path(*f.package.split(".")) for f in families} == {
        p.parent.relative_to(REPO) for p in (REPO / KERNELS_PACKAGE).glob("*/builders.py")
    }
    assert all(isinstance(f.rank, int) for f in families)
    assert len({f.rank for f in families}) == len(families)


def _family(root: Path, name: str, builders: str, rank: object = None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    header = "from op_builder import CPUOpBuilder, CUDAOpBuilder\n\n"
    if rank is not None:
        header += f"{RANK_ATTRIBUTE} = {rank!r}\n\n"
    (folder / "builders.py").write_text(header + textwrap.dedent(builders))


def _op(class_name: str, op: str, base: str = "CPUOpBuilder") -> str:
    return f'class {class_name}({base}):\n    name = "{op}"\n    sources = ("csrc/{op}.cpp",)\n\n'


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """An empty package of families on sys.path, named afresh (a process imports a name once)."""
    name = unique("families_pkg")
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    return root, name


def test_families_come_by_rank_and_ops_cpu_first_then_in_module_order(package: tuple[Path, str]) -> None:
    root, name = package
    p = unique("op")  # op names are this process's: keep them apart from other tests'
    # Classes defined in an order that is not their names' (which inspect lists them by).
    _family(
        root, "zeta", _op("ZGpu", f"{p}_zeta_gpu", "CUDAOpBuilder") + _op("ACpu", f"{p}_zeta_cpu"), rank=5
    )
    _family(root, "alpha", _op("Second", f"{p}_alpha_b") + _op("First", f"{p}_alpha_a"), rank=20)
    _family(root, "beta", _op("Gpu", f"{p}_beta_gpu", "CUDAOpBuilder"))  # no rank: after the ranked
    _family(root, "aardvark", _op("Gpu", f"{p}_aardvark_gpu", "CUDAOpBuilder"))  # no rank, by name
    (root / "notes").mkdir()  # a folder without builders.py is no family
    (root / "notes" / "__init__.py").write_text("")
    (root / "loose").mkdir()  # nor is one without __init__.py
    (root / "loose" / "builders.py").write_text("raise SystemExit('never imported')\n")

    families = families_in(name)
    assert [(f.package, f.rank) for f in families] == [
        (f"{name}.zeta", 5),
        (f"{name}.alpha", 20),
        (f"{name}.aardvark", None),
        (f"{name}.beta", None),
    ]
    assert [b.name for b in in_listing_order(families)] == [
        f"{p}_zeta_cpu",
        f"{p}_alpha_b",  # Second is defined first
        f"{p}_alpha_a",
        f"{p}_zeta_gpu",
        f"{p}_aardvark_gpu",
        f"{p}_beta_gpu",
    ]


@pytest.mark.parametrize("rank", ["10", 1.5, True])
def test_a_rank_that_is_not_an_integer_is_named(package: tuple[Path, str], rank: object) -> None:
    root, name = package
    _family(root, "fam", _op("Only", unique("ranked")), rank=rank)
    with pytest.raises(OpSourceError, match=f"builders.py: {RANK_ATTRIBUTE} .* is not an integer"):
        families_in(name)


def test_a_family_that_does_not_import_is_named(package: tuple[Path, str]) -> None:
    root, name = package
    _family(root, "broken", "import no_such_module_anywhere\n")
    with pytest.raises(
        OpSourceError, match=rf"{name}\.broken\.builders does not import: ModuleNotFoundError"
    ):
        families_in(name)
