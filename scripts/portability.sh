#!/usr/bin/env bash
# Do the CPU ops run on x86-64 CPUs other than the build machine's? They are compiled without
# -march=native and pick their code path (avx512 / avx2 / scalar) at run time
# (kernels/csrc/includes/cpu_simd.h). This compiles them here with the normal flags, then runs
# their self-tests natively and under `qemu-x86_64 -cpu MODEL`, an emulated older CPU, and checks
# that each run passes on the code path that CPU really has.
#
#   scripts/portability.sh [--out FILE] [MODEL=ISA ...]
#
# Default models: Nehalem=scalar (SSE4.2, no AVX) and Haswell=avx2 (AVX2 + FMA + F16C, no
# AVX-512); natively the expected path is read from /proc/cpuinfo. Results go to
# bench/results/portability.json (or FILE); the exit status is non-zero on any failure.
#
# Why Nehalem and not older: under `-cpu Conroe` (Core 2, no SSE4.1/4.2) `import torch._C` and
# `import numpy` die with SIGILL (`import torch` first hits pinsrq, an SSE4.1 instruction).
#
# async_io under qemu-user: the emulator does not implement Linux native AIO (io_setup returns
# ENOSYS), so the op's module loads on the emulated CPU but cannot run there. That one failure,
# with that one message, is recorded as an emulator limit; any other async_io failure fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
OUT=$ROOT/bench/results/portability.json
MODELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *=*) MODELS+=("$1"); shift ;;
    *) echo "portability: unknown argument $1 (expected --out FILE or MODEL=ISA)" >&2; exit 2 ;;
  esac
done
[ ${#MODELS[@]} -gt 0 ] || MODELS=(Nehalem=scalar Haswell=avx2)

if [ "$(uname -m)" != "x86_64" ]; then
  echo "portability: needs an x86-64 host (this is $(uname -m))" >&2
  exit 1
fi

# qemu-user from apt, only when missing (as scripts/system-deps.sh installs its packages);
# qemu-user-static's binary, which the arm64 stand-ins install, serves as well.
QEMU=$(command -v qemu-x86_64 || command -v qemu-x86_64-static || true)
if [ -z "$QEMU" ]; then
  command -v apt-get >/dev/null || { echo "portability: install qemu-user (qemu-x86_64)" >&2; exit 1; }
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "portability: need root to install qemu-user" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "portability: installing qemu-user"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends qemu-user >/dev/null
  QEMU=$(command -v qemu-x86_64)
fi
export PORTABILITY_QEMU=$QEMU

# One JIT cache for every run, named explicitly: the native run compiles into it, the emulated
# runs must find the same build keys there and compile nothing (compiling under qemu would take
# many minutes). Default: the cache the loader uses anyway, so a warm one from `make test` serves.
cd "$ROOT"
if [ -z "${TORCH_EXTENSIONS_DIR:-}" ]; then
  TORCH_EXTENSIONS_DIR=$("$PY" -c 'import os; from op_builder.loader import extensions_root; print(extensions_root(os.environ).parent)')
fi
export TORCH_EXTENSIONS_DIR
# The project's normal flags: never -march=native, whatever the caller's environment says.
unset DS_CPU_NATIVE

exec "$PY" - "$OUT" "${MODELS[@]}" <<'PYTHON'
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io")
SIMD_OPS = OPS[:3]  # async_io has no SIMD path, and reports isa null
SELFTEST = [sys.executable, "-m", "op_builder", "selftest", *OPS, "--device", "cpu", "--json"]
# qemu-user's answer to io_setup, as async_io reports it (see the header).
AIO_ENOSYS = ("io_setup(", "Function not implemented")

out = Path(sys.argv[1])
models = [arg.split("=", 1) for arg in sys.argv[2:]]
cache = Path(os.environ["TORCH_EXTENSIONS_DIR"])
QEMU = os.environ["PORTABILITY_QEMU"]


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


def cache_state() -> dict[str, float]:
    """Every built module in the JIT cache and its mtime: a compile changes this."""
    return {str(p.relative_to(cache)): p.stat().st_mtime for p in cache.rglob("*.so")}


def qemu_version() -> str:
    text = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout
    return text.splitlines()[0] if text else "unknown"


def numpy_dies_on(prefix: list[str]) -> str | None:
    """Why this venv's NumPy cannot be imported on the emulated CPU, or None when it can.

    NumPy 2.4's x86-64 wheels die with SIGILL at import on qemu's Nehalem and Westmere
    (SandyBridge runs them). torch imports NumPy when it is installed, but runs without it
    (warning once), and the CPU ops' self-tests do not use it: so a run on such a CPU hides
    NumPy instead of failing before any op is reached.
    """
    probe = subprocess.run([*prefix, sys.executable, "-c", "import numpy"], capture_output=True, text=True)
    if probe.returncode >= 0:
        return None  # imports, or is not installed (torch then runs without it anyway)
    import numpy  # noqa: PLC0415  (the version for the note; it imports natively)

    return f"NumPy {numpy.__version__} dies at import on this CPU (signal {-probe.returncode}): hidden for this run"


def hidden_numpy_env(folder: Path) -> dict[str, str]:
    """An environment in which ``import numpy`` fails as for a NumPy not installed, saying why.

    ModuleNotFoundError, not ImportError: that is what torch takes to mean "no NumPy".
    """
    package = folder / "numpy"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        'raise ModuleNotFoundError("NumPy is hidden: its build cannot run on this emulated CPU", name="numpy")\n'
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


def run(label: str, prefix: list[str], expected: str) -> dict[str, object]:
    emulated = bool(prefix)
    numpy_note = numpy_dies_on(prefix) if emulated else None
    env = hidden_numpy_env(out.parent / ".portability-no-numpy") if numpy_note else None
    before = cache_state()
    start = time.perf_counter()
    proc = subprocess.run([*prefix, *SELFTEST], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    failures: list[str] = []
    if cache_state() != before or "compiling" in proc.stderr:
        failures.append("the JIT cache changed: this run compiled an op instead of loading the native build")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        failures.append(f"exit {proc.returncode}, no JSON report: {tail}")
        report = {"ok": False, "ops": []}
    ops = []
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
        if name in SIMD_OPS and r["isa"] != expected:
            failures.append(f"{name}: ran the {r['isa']} path, expected {expected}")
        ops.append({"name": name, "ok": ok, "isa": r["isa"], "seconds": r["seconds"], "error": r.get("error"), "note": note})
    # The command's own status may be 1 only for the tolerated async_io limit.
    tolerated = any(o["note"] for o in ops)
    if proc.returncode not in ((0, 1) if tolerated else (0,)):
        failures.append(f"selftest exited {proc.returncode}")
    return {
        "cpu": label,
        "numpy": numpy_note,
        "command": " ".join([*prefix, "python", *SELFTEST[1:]]),
        "expected_isa": expected,
        "isa": sorted({str(o["isa"]) for o in ops if o["name"] in SIMD_OPS}),
        "ok": not failures,
        "wall_seconds": round(wall, 1),
        "failures": failures,
        "ops": ops,
    }


# Compile natively (JIT into the shared cache) before anything is timed or emulated.
print(f"portability: compiling the CPU ops natively into {cache} (no-op when warm)", flush=True)
start = time.perf_counter()
warm = subprocess.run(SELFTEST, capture_output=True, text=True)
print(f"portability: native build ready in {time.perf_counter() - start:.1f}s", flush=True)
if not warm.stdout.strip():
    sys.exit(f"portability: the native self-test produced no report:\n{warm.stderr[-2000:]}")

runs = [("native", [], native_isa())]
runs += [(model, [QEMU, "-cpu", model], isa) for model, isa in models]
results = []
for label, prefix, expected in runs:
    print(f"portability: {label}: self-tests (expecting the {expected} path) ...", flush=True)
    results.append(run(label, prefix, expected))
    for failure in results[-1]["failures"]:
        print(f"portability: {label}: FAIL {failure}", file=sys.stderr, flush=True)

rows = [["cpu", "expected isa", "isa", "result", "wall s"]]
for r in results:
    notes = [f"{o['name']}: {o['note']}" for o in r["ops"] if o["note"]] + ([r["numpy"]] if r["numpy"] else [])
    result = ("pass" if r["ok"] else "FAIL") + (" (" + "; ".join(notes) + ")" if notes else "")
    rows.append([r["cpu"], r["expected_isa"], ",".join(r["isa"]), result, f"{r['wall_seconds']:.1f}"])
widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
for i, row in enumerate(rows):
    print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if i == 0:
        print("  ".join("-" * w for w in widths))

import torch  # noqa: E402  (only for the version in the report)

ok = all(r["ok"] for r in results)
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(
    json.dumps(
        {
            "ok": ok,
            "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "native_isa": native_isa()},
            "torch": torch.__version__,
            "qemu": qemu_version(),
            "jit_cache": str(cache),
            "runs": results,
        },
        indent=2,
    )
    + "\n"
)
print(f"portability: {'all passed' if ok else 'FAILED'}; results in {out}")
sys.exit(0 if ok else 1)
PYTHON
