#!/usr/bin/env bash
# Do the CPU ops run on x86-64 CPUs other than the build machine's? They are compiled without
# -march=native and pick their code path (avx512 / avx2 / scalar) at run time
# (kernels/optim/includes/cpu_simd.h). This compiles them here with the normal flags, then runs
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

# The runs, the checks and the report: scripts/portability.py.
exec "$PY" "$ROOT/scripts/portability.py" "$OUT" "${MODELS[@]}"
