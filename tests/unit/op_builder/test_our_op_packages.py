"""Our ops as op packages (kernels/<family>/): found without importing torch or the fronts, every
public import path the docs show still importing, the sources shipping in the wheel."""

from __future__ import annotations

import ast
import glob
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from op_builder.registry import OUR_OP_PACKAGES, builtin_ops, origin_of

REPO = Path(__file__).resolve().parents[3]
KERNELS = REPO / "kernels"
FAMILIES = tuple(importlib.import_module(name) for name in OUR_OP_PACKAGES)

# ------------------------------------------------------------------ imports the docs show

_IMPORT_LINE = re.compile(
    r"^\s*(?:>>>\s*)?((?:from\s+(?:kernels|op_builder)\S*\s+import\s)|(?:import\s+(?:kernels|op_builder)))"
)


def import_lines(text: str) -> list[str]:
    """The lines of ``text`` that import from kernels or op_builder (comments stripped)."""
    return [
        line.split("#", 1)[0].strip().removeprefix(">>>").strip()
        for line in text.splitlines()
        if _IMPORT_LINE.match(line)
    ]


def documented_imports() -> list[tuple[str, str]]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [(page.name, line) for page in pages for line in import_lines(page.read_text())]


def test_the_docs_show_imports_of_ours() -> None:
    found = {line for _, line in documented_imports()}
    assert "from op_builder.selftest import SelfTestContext, Tolerance" in found
    assert "from kernels.compat.deepspeed import DeepSpeedCPUAdam" in found


@pytest.mark.parametrize(("page", "line"), documented_imports())
def test_every_documented_import_imports(page: str, line: str) -> None:
    exec(compile(line, f"{page}: {line}", "exec"), {})


@pytest.mark.parametrize(
    "line",
    [
        "from kernels.cpu_optim import CPUAdam",  # a module that moved
        "from kernels.optim import CPUAdamW",  # a name the package does not have
        "import op_builder.ops",  # a package that is gone
    ],
)
def test_a_stale_documented_import_fails(line: str) -> None:
    assert import_lines(f"```python\n{line}  # stale\n```") == [line]
    with pytest.raises(ImportError):
        exec(compile(line, line, "exec"), {})


def test_public_names_of_each_family_import_lazily() -> None:
    assert [f.__name__ for f in FAMILIES] == [
        "kernels.optim",
        "kernels.aio",
        "kernels.transformer",
        "kernels.quantization",
    ]
    for family in FAMILIES:
        assert family.__all__, family.__name__
        for name in family.__all__:
            assert getattr(family, name) is not None, (family.__name__, name)
        with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
            family.nothing_here  # noqa: B018


def test_the_old_selftest_path_reexports_the_harness() -> None:
    import kernels.selftests as old
    from op_builder import selftest

    for name in old.__all__:
        assert getattr(old, name) is getattr(selftest, name), name
    assert {"SelfTestContext", "Tolerance"} <= set(old.__all__)


# ------------------------------------------------------------------ finding ours without torch

_NO_TORCH = """
import json, sys
import op_builder, op_builder.registry as registry, op_builder.selftest, op_builder.selftest.isa
ops = list(registry.ALL_OPS)
builders = [registry.get_builder(name) for name in ops]
import kernels.optim, kernels.aio, kernels.quantization, kernels.transformer
before = "torch" in sys.modules
{after}
print(json.dumps({{"ops": ops, "torch": before, "after": "torch" in sys.modules}}))
"""


def _probe(after: str = "") -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _NO_TORCH.format(after=after)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    data: dict[str, object] = json.loads(done.stdout)
    return data


def test_the_registry_finds_our_ops_without_importing_torch() -> None:
    data = _probe()
    assert data["torch"] is False
    assert data["ops"][:10] == [  # type: ignore[index]
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


def test_the_probe_sees_torch_once_a_front_is_used() -> None:
    """The check above can fail: using a public name imports the front, and torch with it."""
    data = _probe("from kernels.optim import CPUAdam")
    assert data["torch"] is False and data["after"] is True


def static_kernels_imports(source: str) -> list[str]:
    """``import kernels...`` / ``from kernels... import`` statements in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "kernels"]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "kernels"
        ):
            found.append(str(node.module))
    return found


def test_op_builder_imports_no_kernels_module() -> None:
    assert static_kernels_imports("def f():\n    from kernels import selftests\n") == ["kernels"]
    offenders = {
        str(path.relative_to(REPO)): found
        for path in sorted((REPO / "op_builder").rglob("*.py"))
        if (found := static_kernels_imports(path.read_text()))
    }
    assert offenders == {}


def test_every_family_folder_is_registered_and_every_op_is_ours() -> None:
    folders = {path.parent.name for path in KERNELS.glob("*/builders.py")}
    assert folders == {name.split(".")[1] for name in OUR_OP_PACKAGES}
    for name, builder in builtin_ops().items():
        assert origin_of(name).kind == "builtin"
        assert type(builder).__module__.startswith(tuple(OUR_OP_PACKAGES)), name
        assert builder.selftest is not None and builder.selftest.startswith(
            type(builder).__module__.rsplit(".", 1)[0]
        )


MAX_LINES = 450


def test_no_module_of_kernels_op_builder_or_imagegen_is_over_the_limit() -> None:
    sizes = {
        str(path.relative_to(REPO)): len(path.read_text().splitlines())
        for folder in ("kernels", "op_builder", "imagegen")
        for path in (REPO / folder).rglob("*.py")
    }
    assert len(sizes) > 100
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


# ------------------------------------------------------------------ sources in the wheel


def packaged(patterns: list[str]) -> set[Path]:
    """The files of kernels/ the package-data globs take (setuptools reads them from the
    package's folder, ``**`` recursive)."""
    return {
        (KERNELS / p).resolve()
        for pattern in patterns
        for p in glob.glob(pattern, root_dir=KERNELS, recursive=True)
    }


def test_every_source_and_header_of_ours_ships_as_package_data() -> None:
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "kernels"
    ]
    shipped = packaged(patterns)
    needed = set()
    for builder in builtin_ops().values():
        needed |= {Path(s).resolve() for s in builder.source_paths()}
        needed |= {p.resolve() for d in builder.include_paths() for p in Path(d).iterdir() if p.is_file()}
    assert len(needed) > 40
    assert needed - shipped == set()
    # The check can fail: without the headers' globs the headers are missing.
    assert needed - packaged([p for p in patterns if "includes" not in p])
