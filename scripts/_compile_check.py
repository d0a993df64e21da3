"""What cuda_check.py and hip_check.py share: the build context, parallel compiles and the report.

Both compile each GPU op's sources with the op builder's own flags, a few at a time,
print one line per source (or one JSON object with ``--json``), and exit 0 when all
compiled, 1 when any failed, 2 on bad arguments.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from op_builder.context import BuildContext, resolve_context  # noqa: E402
from op_builder.errors import UserFacingError  # noqa: E402
from op_builder.stable_abi import check_module  # noqa: E402
from op_builder.toolchain import probe  # noqa: E402


@dataclass(frozen=True)
class Job:
    op: str
    source: str  # the original source: relative to the repository, absolute outside it (op packages)
    command: tuple[str, ...]
    # Which build of the source, where one source is built two ways ("stable ABI 2.10").
    variant: str = ""
    # A stable build's module, which the command links: held to the stable ABI of this target
    # (op_builder.stable_abi.check_module), as the op's real build holds it.
    module: str | None = None
    stable_abi: str | None = None

    @classmethod
    def of(
        cls,
        op: str,
        source: str,
        command: tuple[str, ...],
        variant: str = "",
        module: str | None = None,
        stable_abi: str | None = None,
    ) -> Job:
        relative = os.path.relpath(source, ROOT)
        source = source if relative.startswith(os.pardir) else relative
        return cls(op, source, command, variant, module, stable_abi)


@dataclass(frozen=True)
class Result:
    op: str
    source: str
    ok: bool
    seconds: float
    command: list[str]
    output: str
    variant: str = ""


def resolve(env: Mapping[str, str], overrides: Mapping[str, str]) -> BuildContext | None:
    """The build context of ``env`` with ``overrides``; None, after printing why, when they are invalid."""
    full = {**env, **overrides}
    try:
        return resolve_context(full, probe(full))
    except UserFacingError as exc:
        print(f"error: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return None


def skip(reason: str, as_json: bool) -> int:
    """Say why the check cannot run here; that is a success (exit 0), not a failure."""
    print(json.dumps({"ok": True, "skipped": reason}) if as_json else f"SKIP {reason}")
    return 0


def run_job(job: Job, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Result:
    start = time.perf_counter()
    done = subprocess.run(job.command, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    ok, output = done.returncode == 0, done.stdout + done.stderr
    if ok and job.module is not None and job.stable_abi is not None:
        report = check_module(job.module, job.stable_abi)
        if not report.ok:
            ok = False
            output += f"{job.source} breaks the stable ABI of torch {job.stable_abi}: "
            output += f"it takes {report.describe()}\n"
    return Result(
        op=job.op,
        source=job.source,
        ok=ok,
        seconds=round(time.perf_counter() - start, 2),
        command=list(job.command),
        output=output[-4000:],
        variant=job.variant,
    )


def run_all(
    jobs: Sequence[Job],
    workers: int,
    quiet: bool,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Result]:
    """Run ``jobs`` ``workers`` at a time, printing each result in job order unless ``quiet``."""
    results: list[Result] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for result in pool.map(functools.partial(run_job, cwd=cwd, env=env), jobs):
            results.append(result)
            if not quiet:
                status = "OK  " if result.ok else "FAIL"
                source = f"{result.source} ({result.variant})" if result.variant else result.source
                print(f"{status} {result.op:<14} {source:<50} {result.seconds:6.1f}s", flush=True)
                if not result.ok:
                    print("     " + " ".join(result.command))
                    print("     " + result.output.strip().replace("\n", "\n     "))
    return results


def finish(results: Sequence[Result], elapsed: float, as_json: bool, fields: Mapping[str, object]) -> int:
    """Print the JSON report (``ok``, ``fields``, ``results``) or the summary line; the exit status."""
    ok = all(r.ok for r in results)
    if as_json:
        print(json.dumps({"ok": ok, **fields, "results": [asdict(r) for r in results]}, indent=2))
    else:
        failed = sum(not r.ok for r in results)
        summary = f"{len(results) - failed}/{len(results)} compiled in {elapsed:.1f}s"
        print(summary + ("" if ok else f"; {failed} FAILED"))
    return 0 if ok else 1
