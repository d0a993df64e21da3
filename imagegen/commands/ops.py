"""``imagegen ops``: the ops an image can contain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import console, emit_json
from op_builder.op_sources import check_package_dir
from op_builder.registry import Registry, registry_for


def ops_table(registry: Registry) -> list[dict[str, Any]]:
    """Every op: name, target, origin, description, build variable, runtime Debian packages."""
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


@table_options("ops")
def ops(op_sources: tuple[str, ...] = (), json: JsonOption = False) -> None:
    """List the ops, their target (cpu: any image; gpu: --cuda/--rocm), origin and runtime packages."""
    # The registry only: listing ops reads no package's files (staging and digests are a build's).
    registry = registry_for([check_package_dir(Path(d)) for d in op_sources])
    rows = ops_table(registry)
    if json:
        emit_json({"ops": rows})
        return
    table = Table("op", "target", "from", "runtime packages", "description")
    for row in rows:
        where = registry.origins[row["name"]].describe()
        table.add_row(
            row["name"], row["target"], where, " ".join(row["runtime_packages"]) or "-", row["description"]
        )
    console().print(table)
