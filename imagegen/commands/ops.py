"""``imagegen ops``: the ops an image can contain."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from imagegen.commands._options import JsonOption, OpSourceOption
from imagegen.commands._output import console, emit_json
from imagegen.op_packages import resolve_packages
from imagegen.spec import op_source_dirs


def ops_table(op_sources: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every op: name, target, origin, description, build variable, runtime Debian packages."""
    registry, _ = resolve_packages(op_sources)
    return [
        {
            "name": name,
            "target": builder.target,
            "origin": registry.origins[name].to_json(),
            "description": builder.description,
            "build_variable": builder.build_variable,
            "runtime_packages": list(builder.all_runtime_packages()),
        }
        for name, builder in registry.ops.items()
    ]


def ops(op_source: OpSourceOption = None, json: JsonOption = False) -> None:
    """List the ops, their target (cpu: any image; gpu: --cuda/--rocm), origin and runtime packages."""
    rows = ops_table(op_source_dirs(op_source or (), os.environ))
    if json:
        emit_json({"ops": rows})
        return
    table = Table("op", "target", "from", "runtime packages", "description")
    for row in rows:
        origin = row["origin"]
        where = "op_builder" if origin["kind"] == "builtin" else f"{origin['kind']} {origin['where']}"
        table.add_row(
            row["name"], row["target"], where, " ".join(row["runtime_packages"]) or "-", row["description"]
        )
    console().print(table)
