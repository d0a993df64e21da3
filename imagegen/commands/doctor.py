"""``imagegen doctor``: what this machine has for building images, what is missing, how to fix it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import typer
from rich.table import Table

from imagegen import catalog
from imagegen.commands._images import STANDIN_SCRIPT, STANDIN_TAGS, local_images
from imagegen.commands._options import JsonOption
from imagegen.commands._output import console, emit_json
from imagegen.errors import EngineUnavailableError, ImagegenError

_CPU_DEFAULT_BASE = catalog.CPU_TARGET.base_devel(catalog.CPU_TARGET.distros[0], catalog.CPU_DEFAULT_PYTHON)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix}


def _engine_checks() -> tuple[list[Check], bool]:
    from imagegen.engine_probe import detect_engine

    try:
        engine = detect_engine(os.environ)
    except EngineUnavailableError as exc:
        return [Check("engine", False, exc.message, exc.hint)], False
    checks = [
        Check("engine", True, f"Docker {engine.server_version} via {engine.client or 'the Docker SDK'}"),
        Check(
            "buildkit",
            engine.kind != "classic",
            engine.kind if engine.kind != "classic" else "classic builder only",
            None
            if engine.kind != "classic"
            else "install a docker CLI with BuildKit (Debian's docker.io at /usr/bin/docker, or buildx); "
            "imagegen builds the classic variant meanwhile",
        ),
    ]
    return checks, True


def _image_checks() -> list[Check]:
    refs = [_CPU_DEFAULT_BASE, *STANDIN_TAGS]
    present = local_images(refs)
    if present is None:
        return []
    checks = [
        Check(
            f"base {_CPU_DEFAULT_BASE}",
            present[_CPU_DEFAULT_BASE],
            "present" if present[_CPU_DEFAULT_BASE] else "not here (a build pulls it from the registry)",
            None if present[_CPU_DEFAULT_BASE] else f"docker pull {_CPU_DEFAULT_BASE}, or use the stand-ins",
        )
    ]
    for ref in STANDIN_TAGS:
        checks.append(
            Check(
                f"stand-in {ref}",
                present[ref],
                "present" if present[ref] else "not made yet",
                None if present[ref] else f"{STANDIN_SCRIPT} (then imagegen build --cpu --standins ...)",
            )
        )
    return checks


def doctor(json: JsonOption = False) -> None:
    """Check the container engine, BuildKit and the base images; exit 3 when no engine answers."""
    try:
        checks, engine_ok = _engine_checks()
    except ImagegenError as exc:  # any other engine problem is still a finding, not a crash
        checks, engine_ok = [Check("engine", False, exc.message, exc.hint)], False
    if engine_ok:
        checks += _image_checks()
    if json:
        emit_json({"ok": all(c.ok for c in checks), "checks": [c.to_json() for c in checks]})
    else:
        table = Table("check", "status", "detail", "fix")
        for column in table.columns:
            column.overflow = "fold"  # image names must stay whole to be copied
        for check in checks:
            table.add_row(check.name, "ok" if check.ok else "missing", check.detail, check.fix or "")
        console().print(table)
    if not engine_ok:
        # The report above is the answer; the exit code says no engine.
        raise typer.Exit(EngineUnavailableError.exit_code)
