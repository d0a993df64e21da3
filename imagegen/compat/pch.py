"""A precompiled ``torch/extension.h`` per torch release and flag set, for the binding sources.

Parsing torch's headers is most of a binding's compile (40 to 100 s of a TU on a busy 2-core
machine); with the header precompiled once per release and flag set, each binding takes a few
seconds. It changes the cost, not the answer: GCC uses a precompiled header only when the
flags match, and parses the header itself otherwise, and a binding includes
``torch/extension.h`` first anyway. Sources without it (the CPU ops' torch-free kernels) compile
as they are. The cache key of a result leaves the precompiled header out, so results are the
same with or without it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from imagegen.compat.host import Job
from op_builder.parallel_build import included_names
from op_builder.paths import PACKAGE_ROOT

HEADER = "torch/extension.h"


def includes_torch(source: Path, include_dirs: Sequence[Path]) -> bool:
    """Whether ``source`` includes torch/extension.h itself or through one of its own headers."""
    return HEADER in included_names(source, include_dirs)


def _group(job: Job) -> tuple[str, ...]:
    """The flags a precompiled header must share with the job: all but the TU's own."""
    command = list(job.command)
    keep: list[str] = []
    skip = 0
    for index, arg in enumerate(command):
        if skip:
            skip -= 1
            continue
        if arg in ("-c", "-o"):
            skip = 1
            continue
        if arg.startswith("-DTORCH_EXTENSION_NAME=") or index == 0:
            continue
        keep.append(arg)
    return (command[0], *keep)


def _include_dirs(job: Job) -> list[Path]:
    """The job's own include dirs (torch's and the system's never include torch/extension.h)."""
    dirs = [Path(a[2:]) for a in job.command if a.startswith("-I")]
    return [d for d in dirs if d.resolve().is_relative_to(PACKAGE_ROOT) or str(d) in job.roots]


class Precompiled:
    """The precompiled headers of one run, in a temporary folder removed on ``close``."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="compat-pch-"))
        self.made: dict[tuple[str, ...], Path | None] = {}

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def header_for(self, group: tuple[str, ...]) -> Path | None:
        """The header to ``-include`` for jobs of ``group`` (its .gch beside it), or None when it
        did not precompile (the jobs then parse torch's headers themselves and say why)."""
        if group not in self.made:
            name = hashlib.sha256(json.dumps(group).encode()).hexdigest()[:16]
            header = self.folder / name / "compat_torch.h"
            header.parent.mkdir(parents=True)
            header.write_text(f"#pragma once\n#include <{HEADER}>\n")
            command = [group[0], *group[1:], "-x", "c++-header", str(header), "-o", f"{header}.gch"]
            done = subprocess.run(command, capture_output=True, check=False, cwd=PACKAGE_ROOT)
            self.made[group] = header if done.returncode == 0 else None
        return self.made[group]

    def apply(self, jobs: Sequence[Job], use: Sequence[bool], workers: int = 1) -> list[Job]:
        """``jobs`` with the precompiled header where ``use`` says (same keys: same results)."""
        groups = list(dict.fromkeys(_group(j) for j, wanted in zip(jobs, use) if wanted))
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            list(pool.map(self.header_for, groups))
        out: list[Job] = []
        for job, wanted in zip(jobs, use):
            header = self.header_for(_group(job)) if wanted else None
            if header is None:
                out.append(job)
                continue
            command = list(job.command)
            at = command.index("-c")
            out.append(replace(job, command=(*command[:at], "-include", str(header), *command[at:])))
        return out


def wants_pch(jobs: Sequence[Job]) -> list[bool]:
    return [includes_torch(PACKAGE_ROOT / j.source, _include_dirs(j)) for j in jobs]
