"""``imagegen doctor``: what this machine has for building images, what is missing, how to fix it."""

from __future__ import annotations

import os

from rich.table import Table

from imagegen.commands._options import JsonOption
from imagegen.commands._output import console, emit_json
from imagegen.doctor import diagnosis as doctor_lib


def doctor(json: JsonOption = False) -> None:
    """Check the container engine, BuildKit, the base images and the stand-ins; exit 3 when no
    engine answers, 1 when something else required is missing (the CUDA and arm64 stand-ins
    are optional)."""
    found = doctor_lib.diagnose(os.environ)
    if json:
        emit_json(found.to_json())
    else:
        table = Table("check", "status", "detail", "fix")
        for column in table.columns:
            column.overflow = "fold"  # image names must stay whole to be copied
        for check in found.checks:
            status = "ok" if check.ok else "missing" if check.required else "optional"
            table.add_row(check.name, status, check.detail, check.fix or "")
        console().print(table)
    problem = found.problem()
    if problem is not None:
        raise problem
