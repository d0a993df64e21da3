"""``imagegen standins``: make the local stand-in base images the catalog names (no registry needed).

Exit codes: 0 made or current; 1 a recipe failed (apt, debootstrap, pip, the engine's build);
2 bad input (a platform or CUDA version without stand-ins, --cpu with --cuda); 3 no engine.
"""

from __future__ import annotations

import os

from rich.table import Table

from imagegen.building.standins import mirrors as mirrors_lib
from imagegen.building.standins import plan as plan_lib
from imagegen.building.standins.make import make
from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import console, emit_json
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog


@table_options("standins")  # every option but --json: the table's rows for stand-ins
def standins(
    standin_cudas: tuple[str, ...] = (),
    cpu_only: bool = False,
    standin_platform: str = "linux/amd64",
    standin_force: bool = False,
    standin_mirrors: bool = False,
    json: JsonOption = False,
) -> None:
    """Make the stand-in bases (debootstrap + apt; cached by tag and recipe revision): the CPU pair,
    and with --cuda each version's devel and runtime pair. Environment: STANDIN_MIRROR,
    STANDIN_SECURITY_MIRROR, STANDIN_CA, STANDIN_PYTHON, STANDIN_PREFIX, CUDA_HOME."""
    if cpu_only and standin_cudas:
        raise BadInputError("--cpu and --cuda exclude each other", hint="--cpu makes only the CPU stand-ins")
    req = plan_lib.request(standin_cudas, standin_platform, os.environ)
    if standin_mirrors:
        found = mirrors_lib.resolve(catalog.STANDIN_DISTRO, os.environ)
        if json:
            emit_json({"mirror": found.main, "security_mirror": found.security})
        else:
            print(f"STANDIN_MIRROR={found.main}\nSTANDIN_SECURITY_MIRROR={found.security}")
        return
    report = make(req, force=standin_force, env=os.environ)
    if json:
        emit_json(report.to_json())
        return
    table = Table("stand-in", "status", "seconds")
    for image in report.images:
        table.add_row(image.tag, image.action, f"{image.seconds:.0f}" if image.action == "built" else "")
    console().print(table)
