"""The import graph of a package as its files say it: every ``import`` and ``from ... import``,
at module level or inside a function, resolved to the package's own modules (ast only: nothing is
imported). Used by tests/unit/test_import_graph.py to hold "no cycle" for op_builder."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the package folder ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The package module ``name`` is, or lies in (``pkg.mod.attr`` -> ``pkg.mod``); None: outside."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its file."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package
                    base = name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # `from pkg import mod` imports the module pkg.mod when there is one, and
                # `from pkg import name` the module pkg (its __init__ for a package).
                targets = [
                    f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix
                    for alias in node.names
                ]
            for target in targets:
                found = _resolve(target, modules)
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def room(module: str, depth: int = 2) -> str:
    """The room a module is in: its package's top-level folder or module (``pkg.room``)."""
    return ".".join(module.split(".")[:depth])


def floor_violations(graph: Mapping[str, set[str]], floors: Mapping[str, int]) -> list[str]:
    """Each import of a room on a higher floor than the importer's, as ``a -> b (floor x -> y)``,
    and each room missing from ``floors`` (a new room must be given a floor)."""
    found = []
    for module in sorted(graph):
        source = room(module)
        if source not in floors:
            found.append(f"{module}: room {source} has no floor")
            continue
        for target in sorted(graph[module]):
            up = room(target)
            if up in floors and floors[up] > floors[source]:
                found.append(f"{module} -> {target} (floor {floors[source]} -> {floors[up]})")
    return found
