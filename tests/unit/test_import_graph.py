"""op_builder's files import one another without a circle, counting every import (module level
and inside functions), as tests/_import_graph.py reads them from the source; the reader is shown
finding a circle closed by a deferred import in a small package made here."""

from __future__ import annotations

from pathlib import Path

from tests._import_graph import cycles, imports

REPO = Path(__file__).resolve().parents[2]


def test_op_builder_has_no_import_circle() -> None:
    assert cycles(imports(REPO / "op_builder")) == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_circle_closed_inside_a_function_is_found(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "def f():\n    from pkg.sub import high  # deferred: still an edge\n",
            "sub/__init__.py": "",
            "sub/high.py": "from pkg import low\n",
            "leaf.py": "import json\nfrom . import low\n",
        },
    )
    graph = imports(package)
    assert graph["pkg.low"] == {"pkg.sub.high"} and graph["pkg.sub.high"] == {"pkg.low"}
    assert graph["pkg.leaf"] == {"pkg.low"}  # relative, and nothing outside the package
    assert cycles(graph) == [["pkg.low", "pkg.sub.high"]]
    # Without the deferred import, no circle.
    (package / "low.py").write_text("def f():\n    return 1\n")
    assert cycles(imports(package)) == []
