"""What this machine has for building images, what is missing, and how to fix it.

``diagnose()`` runs every check; ``imagegen doctor`` prints the result and exits with the
code ``Diagnosis.problem()`` gives: 3 when no engine answers, 1 when anything else required is
missing. The CUDA and arm64 stand-ins are listed as optional: only builds for those targets
with ``--standins`` need them, so their absence is reported and does not fail the diagnosis.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagegen.building.bases import STANDIN_SCRIPT, STANDIN_TAGS, standin_command
from imagegen.engine import detect_engine, local_images
from imagegen.errors import EngineUnavailableError, ImagegenError
from imagegen.imagespec import catalog

_CPU_DEFAULT_BASE = catalog.CPU_TARGET.base_devel(catalog.CPU_TARGET.distros[0], catalog.CPU_DEFAULT_PYTHON)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    required: bool = True

    @property
    def failed(self) -> bool:
        return self.required and not self.ok

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "detail": self.detail,
            "fix": self.fix,
            "required": self.required,
        }


@dataclass(frozen=True)
class Diagnosis:
    checks: tuple[Check, ...]
    engine_ok: bool

    @property
    def ok(self) -> bool:
        return not any(c.failed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.to_json() for c in self.checks]}

    def problem(self) -> ImagegenError | None:
        """The error whose exit code says what was found; None when every check passed.

        Marked reported: the printed checks are the answer, the error only sets the exit code.
        """
        if not self.engine_ok:
            engine = self.checks[0]
            return EngineUnavailableError(engine.detail, hint=engine.fix, reported=True)
        missing = [c.name for c in self.checks if c.failed]
        if missing:
            return ImagegenError(f"missing here: {', '.join(missing)}", reported=True)
        return None


def diagnose(env: Mapping[str, str] = os.environ) -> Diagnosis:
    """Check the container engine, BuildKit and the base images."""
    try:
        checks, engine_ok = _engine_checks(env)
    except ImagegenError as exc:  # any other engine problem is still a finding, not a crash
        checks, engine_ok = [Check("engine", False, exc.message, exc.hint)], False
    if engine_ok:
        checks += _image_checks(env)
    return Diagnosis(tuple(checks), engine_ok)


def _engine_checks(env: Mapping[str, str]) -> tuple[list[Check], bool]:
    try:
        engine = detect_engine(env)
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


def _optional_standins() -> list[tuple[str, str]]:
    """(tag, the command that makes it) of every stand-in beyond the amd64 CPU pair."""
    return [
        (tag, standin_command(target, platform))
        for (target, platform), pair in catalog.STANDINS.items()
        if (target, platform) != ("cpu", catalog.DEFAULT_PLATFORM)
        for tag in pair
    ]


def _image_checks(env: Mapping[str, str]) -> list[Check]:
    optional = _optional_standins()
    refs = [_CPU_DEFAULT_BASE, *STANDIN_TAGS, *(tag for tag, _ in optional)]
    present = local_images(refs, env)
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
    for ref, command in optional:
        checks.append(
            Check(
                f"stand-in {ref}",
                present[ref],
                "present" if present[ref] else "not made (needed only to build this target with --standins)",
                None if present[ref] else command,
                required=False,
            )
        )
    return checks
