#!/usr/bin/env bash
# End-to-end CUDA build of every GPU op, ahead of time, against the registry's CUDA torch.
#
#   bash scripts/e2e_cuda.sh            (make e2e-cuda; not part of CI: downloads several GB)
#   TORCH_SPEC='torch==2.15.*' TORCH_CUDA_ARCH_LIST='9.0' E2E_DIR=/tmp/e2e bash scripts/e2e_cuda.sh
#
# 1. a separate venv (E2E_DIR, default build/e2e-cuda) with `pip install torch`: the
#    registry's CUDA build (CUDA 13.0 for torch 2.13), unlike the CPU wheel of the dev venv;
# 2. `pip wheel --no-build-isolation .` with DS_ACCELERATOR=cuda, TORCH_CUDA_ARCH_LIST
#    (default "8.0;9.0") and DS_BUILD_<OP>=1 for each GPU op (`python -m op_builder list
#    --gpu`): nvcc compiles the device code
#    and g++ the bindings against torch's real CUDA headers, which the dev venv lacks;
# 3. install the wheel and run `python -m op_builder verify --json` with JIT disabled,
#    outside the checkout: every op must load from its ahead-of-time module ("aot").
# No GPU is needed: importing the modules checks that they link and load.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${E2E_DIR:-$ROOT/build/e2e-cuda}"
VENV="$WORK/venv"
ARCHS="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}"
PYTHON="${PYTHON:-python3}"

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

# torch's extension builder derives CUDA_HOME from the nvcc on PATH when CUDA_HOME is
# unset; an nvcc wrapper script outside the toolkit (e.g. /usr/local/bin/nvcc) then gives
# a CUDA_HOME without headers. Name the toolkit that has them.
if [ -z "${CUDA_HOME:-}" ]; then
  for candidate in "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /nonexistent)")")")" \
    /usr/local/cuda; do
    if [ -f "$candidate/include/cuda_runtime.h" ] && [ -x "$candidate/bin/nvcc" ]; then
      export CUDA_HOME="$candidate"
      break
    fi
  done
fi
if [ -z "${CUDA_HOME:-}" ]; then
  echo "SKIP: no CUDA toolkit (nvcc with cuda_runtime.h) found; set CUDA_HOME" >&2
  exit 0
fi
export PATH="$CUDA_HOME/bin:$PATH"
echo "CUDA_HOME=$CUDA_HOME"

step "venv with the registry's CUDA torch in $VENV"
mkdir -p "$WORK"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip setuptools wheel
# TORCH_SPEC pins the torch to build against (default: the registry's newest CUDA build).
"$VENV/bin/pip" install -q "${TORCH_SPEC:-torch}" packaging ninja
"$VENV/bin/python" "$ROOT/scripts/e2e_cuda.py" torch-is-cuda

# The GPU ops, as the registry lists them: this checkout's op_builder (run from $ROOT) under the
# venv's python, which has what op_builder needs (packaging) where $PYTHON may not.
listed="$(cd "$ROOT" && "$VENV/bin/python" -m op_builder list --gpu)"
[ -n "$listed" ] || { echo "python -m op_builder list --gpu listed no op" >&2; exit 1; }
mapfile -t OPS <<<"$listed"

step "AOT wheel for ${OPS[*]} (TORCH_CUDA_ARCH_LIST=$ARCHS)"
build_env=(DS_ACCELERATOR=cuda "TORCH_CUDA_ARCH_LIST=$ARCHS" DS_BUILD_OPS=0 "MAX_JOBS=${MAX_JOBS:-2}")
for op in "${OPS[@]}"; do
  build_env+=("DS_BUILD_${op^^}=1")
done
# Build from a copy, so the checkout's build/ and *.egg-info stay untouched.
SRC="$WORK/src"
rm -rf "$WORK/dist" "$SRC"
mkdir -p "$SRC"
tar -C "$ROOT" --exclude=./.venv --exclude=./build --exclude=./.git --exclude='*.egg-info' \
  --exclude='*.so' --exclude=./kernels/_ops/manifest.json -cf - . | tar -C "$SRC" -xf -
(cd "$SRC" && env "${build_env[@]}" "$VENV/bin/pip" wheel --no-build-isolation --no-deps -w "$WORK/dist" .)
ls -l "$WORK/dist"

step "install the wheel"
"$VENV/bin/pip" install -q --force-reinstall --no-deps "$WORK"/dist/imagegen-*.whl

step "verify: every op from its ahead-of-time module"
cd "$WORK"  # not the checkout: import the installed packages
DS_DISABLE_JIT=1 "$VENV/bin/python" -m op_builder verify --json "${OPS[@]}" | tee "$WORK/verify.json"
"$VENV/bin/python" "$ROOT/scripts/e2e_cuda.py" aot "$WORK/verify.json" "${OPS[@]}"
step "done"
