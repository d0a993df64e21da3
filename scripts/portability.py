"""The runs of ``scripts/portability.sh``: the CPU ops' self-tests natively and on emulated CPUs.

    python scripts/portability.py OUT MODEL=ISA [MODEL=ISA ...]

The shell script parses its arguments, finds (or installs) qemu-x86_64 and names the JIT cache;
this compiles the CPU ops natively into that cache, runs their self-tests natively and under
``qemu-x86_64 -cpu MODEL`` for each model, checks that every run passes on the code path that
CPU has (ISA: avx512, avx2 or scalar) without compiling anything, prints a table and writes
the report to OUT (JSON). It reads ``TORCH_EXTENSIONS_DIR`` (the cache) and
``PORTABILITY_QEMU`` (the emulator) from the environment, as the shell script exports them.

Exit status: 0 when every run passed; 1 when one failed or the native self-test gave no report;
2 on bad arguments.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io")
SIMD_OPS = OPS[:3]  # async_io has no SIMD path, and reports isa null
ISAS = ("avx512", "avx2", "scalar")
SELFTEST = [sys.executable, "-m", "op_builder", "selftest", *OPS, "--device", "cpu", "--json"]
# qemu-user's answer to io_setup, as async_io reports it (see the header of portability.sh).
AIO_ENOSYS = ("io_setup(", "Function not implemented")


class OpResult(TypedDict):
    name: str
    ok: bool
    isa: str | None
    seconds: float | None
    error: str | None
    note: str | None


class RunResult(TypedDict):
    cpu: str
    numpy: str | None
    command: str
    expected_isa: str
    isa: list[str]
    ok: bool
    wall_seconds: float
    failures: list[str]
    ops: list[OpResult]


@dataclass(frozen=True)
class Run:
    """One self-test run: on this CPU (no prefix) or under the emulator as ``label``."""

    label: str
    prefix: tuple[str, ...]
    expected: str


def cpuinfo_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def native_isa() -> str:
    """The path cpu_simd.h's detect_level should pick here, read independently of it."""
    flags = cpuinfo_flags()
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if {"avx2", "fma", "f16c"} <= flags else "scalar"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cache_state(cache: Path) -> dict[str, float]:
    """Every built module in the JIT cache and its mtime: a compile changes this."""
    return {str(p.relative_to(cache)): p.stat().st_mtime for p in cache.rglob("*.so")}


def qemu_version(qemu: str) -> str:
    text = subprocess.run([qemu, "--version"], capture_output=True, text=True).stdout
    return text.splitlines()[0] if text else "unknown"


def numpy_dies_on(prefix: Sequence[str]) -> str | None:
    """Why this venv's NumPy cannot be imported on the emulated CPU, or None when it can.

    NumPy 2.4's x86-64 wheels die with SIGILL at import on qemu's Nehalem and Westmere
    (SandyBridge runs them). torch imports NumPy when it is installed, but runs without it
    (warning once), and the CPU ops' self-tests do not use it: so a run on such a CPU hides
    NumPy instead of failing before any op is reached.
    """
    probe = subprocess.run([*prefix, sys.executable, "-c", "import numpy"], capture_output=True, text=True)
    if probe.returncode >= 0:
        return None  # imports, or is not installed (torch then runs without it anyway)
    import numpy  # (the version for the note; it imports natively)

    signal = -probe.returncode
    return f"NumPy {numpy.__version__} dies at import on this CPU (signal {signal}): hidden for this run"


def hidden_numpy_env(folder: Path) -> dict[str, str]:
    """An environment in which ``import numpy`` fails as for a NumPy not installed, saying why.

    ModuleNotFoundError, not ImportError: that is what torch takes to mean "no NumPy".
    """
    package = folder / "numpy"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        "raise ModuleNotFoundError("
        '"NumPy is hidden: its build cannot run on this emulated CPU", name="numpy")\n'
    )
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
    }


def judge(
    run: Run, returncode: int, stdout: str, stderr: str, compiled: bool
) -> tuple[list[str], list[OpResult]]:
    """The failures of one self-test run and its ops, from what the command printed.

    ``compiled``: the JIT cache changed during the run. Pure, so tests can feed it reports.
    """
    emulated = bool(run.prefix)
    failures: list[str] = []
    if compiled or "compiling" in stderr:
        failures.append("the JIT cache changed: this run compiled an op instead of loading the native build")
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        tail = "\n".join(stderr.strip().splitlines()[-5:])
        failures.append(f"exit {returncode}, no JSON report: {tail}")
        report = {"ok": False, "ops": []}
    ops: list[OpResult] = []
    by_name = {r["name"]: r for r in report["ops"]}
    for name in OPS:
        r = by_name.get(name)
        if r is None:
            failures.append(f"{name}: missing from the report")
            continue
        note = None
        ok = bool(r["ok"])
        error = r.get("error") or ""
        if name == "async_io" and emulated and not ok and all(s in error for s in AIO_ENOSYS):
            ok, note = True, "loaded; qemu-user does not implement io_setup (ENOSYS), so not run"
        if not ok:
            failures.append(f"{name}: {error or r.get('skipped') or 'failed'}")
        if name in SIMD_OPS and r["isa"] != run.expected:
            failures.append(f"{name}: ran the {r['isa']} path, expected {run.expected}")
        ops.append(
            {
                "name": name,
                "ok": ok,
                "isa": r["isa"],
                "seconds": r["seconds"],
                "error": r.get("error"),
                "note": note,
            }
        )
    # The command's own status may be 1 only for the tolerated async_io limit.
    tolerated = any(o["note"] for o in ops)
    if returncode not in ((0, 1) if tolerated else (0,)):
        failures.append(f"selftest exited {returncode}")
    return failures, ops


def run_selftests(run: Run, cache: Path, scratch: Path) -> RunResult:
    numpy_note = numpy_dies_on(run.prefix) if run.prefix else None
    env = hidden_numpy_env(scratch / ".portability-no-numpy") if numpy_note else None
    before = cache_state(cache)
    start = time.perf_counter()
    proc = subprocess.run([*run.prefix, *SELFTEST], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    failures, ops = judge(run, proc.returncode, proc.stdout, proc.stderr, cache_state(cache) != before)
    return {
        "cpu": run.label,
        "numpy": numpy_note,
        "command": " ".join([*run.prefix, "python", *SELFTEST[1:]]),
        "expected_isa": run.expected,
        "isa": sorted({str(o["isa"]) for o in ops if o["name"] in SIMD_OPS}),
        "ok": not failures,
        "wall_seconds": round(wall, 1),
        "failures": failures,
        "ops": ops,
    }


def table(results: Sequence[RunResult]) -> str:
    rows = [["cpu", "expected isa", "isa", "result", "wall s"]]
    for r in results:
        notes = [f"{o['name']}: {o['note']}" for o in r["ops"] if o["note"]] + (
            [r["numpy"]] if r["numpy"] else []
        )
        result = ("pass" if r["ok"] else "FAIL") + (" (" + "; ".join(notes) + ")" if notes else "")
        rows.append([r["cpu"], r["expected_isa"], ",".join(r["isa"]), result, f"{r['wall_seconds']:.1f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_models(args: Sequence[str]) -> list[tuple[str, str]]:
    """``MODEL=ISA`` arguments as pairs; ValueError naming the first that is not one."""
    models = []
    for arg in args:
        model, sep, isa = arg.partition("=")
        if not (sep and model and isa in ISAS):
            raise ValueError(f"{arg!r} is not MODEL=ISA (ISA one of {', '.join(ISAS)})")
        models.append((model, isa))
    return models


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if not args:
            raise ValueError("usage: portability.py OUT MODEL=ISA [MODEL=ISA ...]")
        out, models = Path(args[0]), parse_models(args[1:])
        cache, qemu = Path(environ["TORCH_EXTENSIONS_DIR"]), environ["PORTABILITY_QEMU"]
    except KeyError as exc:
        print(f"portability: {exc.args[0]} is not set (scripts/portability.sh sets it)", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"portability: {exc}", file=sys.stderr)
        return 2

    # Compile natively (JIT into the shared cache) before anything is timed or emulated.
    print(f"portability: compiling the CPU ops natively into {cache} (no-op when warm)", flush=True)
    start = time.perf_counter()
    warm = subprocess.run(SELFTEST, capture_output=True, text=True)
    print(f"portability: native build ready in {time.perf_counter() - start:.1f}s", flush=True)
    if not warm.stdout.strip():
        print(
            f"portability: the native self-test produced no report:\n{warm.stderr[-2000:]}", file=sys.stderr
        )
        return 1

    runs = [Run("native", (), native_isa())]
    runs += [Run(model, (qemu, "-cpu", model), isa) for model, isa in models]
    results: list[RunResult] = []
    for run in runs:
        print(f"portability: {run.label}: self-tests (expecting the {run.expected} path) ...", flush=True)
        results.append(run_selftests(run, cache, out.parent))
        for failure in results[-1]["failures"]:
            print(f"portability: {run.label}: FAIL {failure}", file=sys.stderr, flush=True)
    print(table(results))

    import torch  # only for the version in the report

    ok = all(r["ok"] for r in results)
    report = {
        "ok": ok,
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "native_isa": native_isa()},
        "torch": torch.__version__,
        "qemu": qemu_version(qemu),
        "jit_cache": str(cache),
        "runs": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"portability: {'all passed' if ok else 'FAILED'}; results in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
