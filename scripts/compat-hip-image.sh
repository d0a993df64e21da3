#!/usr/bin/env bash
# The image `make compat` compiles HIP device code with Debian trixie's hipcc 5.7 (clang 17) in:
# imagegen-compat/hip:5.7, made from the CUDA 12.4 stand-in (a trixie system: `imagegen standins
# --cuda 12.4`) with apt inside a container, so this machine's apt sources stay as they are.
# The host CA bundle is bind-mounted for apt behind an intercepting proxy, never committed.
#
#   scripts/compat-hip-image.sh           # make it when absent
#   scripts/compat-hip-image.sh --force   # remake it
set -euo pipefail

IMAGE=imagegen-compat/hip:5.7
BASE=imagegen-standin/cuda:12.4-devel
CA_BUNDLE="${STANDIN_CA:-/etc/ssl/certs/ca-certificates.crt}"
DOCKER=$(command -v /usr/bin/docker || command -v docker)
CONTAINER="imagegen-compat-hip-$$"

say() { echo "compat-hip-image: $*" >&2; }
if [ "${1:-}" != "--force" ] && "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    say "$IMAGE is there"; exit 0
fi
"$DOCKER" image inspect "$BASE" >/dev/null 2>&1 || { say "no $BASE: run imagegen standins --cuda 12.4 first"; exit 2; }
trap '"$DOCKER" rm -f "$CONTAINER" >/dev/null 2>&1 || true' EXIT
mounts=()
[ -f "$CA_BUNDLE" ] && mounts=(-v "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
# HIP_PLATFORM=amd: the base has nvcc too, and hipcc would pick the NVIDIA platform.
"$DOCKER" run --name "$CONTAINER" "${mounts[@]}" -e DEBIAN_FRONTEND=noninteractive "$BASE" bash -c '
    apt-get update -q \
    && apt-get install -y -q --no-install-recommends hipcc libamdhip64-dev rocm-device-libs-17 \
    && rm -rf /var/lib/apt/lists/* \
    && HIP_PLATFORM=amd hipcc --version'
"$DOCKER" commit "$CONTAINER" "$IMAGE" >/dev/null
say "$IMAGE made"
