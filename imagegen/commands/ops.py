"""``imagegen ops``: the ops an image can contain."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from imagegen.commands._options import JsonOption
from imagegen.commands._output import console, emit_json
from op_builder import ALL_OPS


def ops_table() -> list[dict[str, Any]]:
    """Every op: name, target, description, build variable, runtime Debian packages."""
    return [
        {
            "name": name,
            "target": builder.target,
            "description": builder.description,
            "build_variable": builder.build_variable,
            "runtime_packages": list(builder.all_runtime_packages()),
        }
        for name, builder in ALL_OPS.items()
    ]


def ops(json: JsonOption = False) -> None:
    """List the ops, their target (cpu: any image; gpu: --cuda/--rocm) and runtime packages."""
    rows = ops_table()
    if json:
        emit_json({"ops": rows})
        return
    table = Table("op", "target", "runtime packages", "description")
    for row in rows:
        table.add_row(
            row["name"], row["target"], " ".join(row["runtime_packages"]) or "-", row["description"]
        )
    console().print(table)
