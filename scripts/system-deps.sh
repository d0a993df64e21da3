#!/usr/bin/env bash
# Install the Debian packages the tests and image builds need, when missing:
#   g++ / make / ninja-build  compile the ops
#   libaio-dev                async_io (build and run)
#   docker.io                 a Docker engine (dockerd) and Debian's client with BuildKit
#   debootstrap               stand-in base images, since no registry is reachable
#   docker-registry           a registry on localhost for the push test
#   redis-server              a shared compile cache for the bake tests (started by the tests)
#   hipcc, libamdhip64-dev,   Debian's ROCm 5.2 HIP compiler: the HIP compile tests and
#   rocm-device-libs          `make hip-check` (gfx device code, no GPU needed)
#   qemu-user                 qemu-x86_64: the ops' self-tests on an emulated older CPU (portability);
#                             qemu-aarch64: the CPU kernels' check on emulated arm64 CPUs (SVE, NEON)
#   g++-aarch64-linux-gnu     cross-compiles that check and the CPU ops for aarch64
#   qemu-user-static          a static qemu-aarch64 that binfmt-support registers with the F flag,
#   binfmt-support            so arm64 programs run inside chroots and containers: the arm64
#                             stand-ins and `make images PLATFORM=linux/arm64`
#   docker-buildx             (scripts/buildx-plugin.sh) the buildx CLI plugin `imagegen bake` runs
#   cosign                    (scripts/cosign.sh) Debian's cosign 3 (sid) and 2 (trixie), fetched with
#                             a private apt configuration, at /usr/local/lib/imagegen/cosign-{3,2}/:
#                             the real verifier of pushed images (tests/integration/test_cosign.py)
# Idempotent and quiet when everything is present. Needs root (or sudo) for apt.
set -euo pipefail

# Everything a test uses: after this, a test skips only for hardware or the slow tier.
packages=(g++ make ninja-build libaio-dev docker.io debootstrap docker-registry qemu-user g++-aarch64-linux-gnu
          qemu-user-static binfmt-support redis-server hipcc libamdhip64-dev rocm-device-libs)
# `--rocm` (the HIP compiler) is taken for older callers: it is in the list above anyway.
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# Debian's docker buildx plugin (from trixie: bookworm has none), for `imagegen bake`, and Debian's
# cosign binaries (sid, trixie); each quiet when present.
from_other_suites() {
  if command -v apt-get >/dev/null; then
    bash "$(dirname "$0")/buildx-plugin.sh"
    bash "$(dirname "$0")/cosign.sh"
  fi
}
[ ${#missing[@]} -eq 0 ] && { from_other_suites; exit 0; }

if ! command -v apt-get >/dev/null; then
  echo "system-deps: missing ${missing[*]}; install them with your package manager" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "system-deps: need root to install ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "system-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
# docker-registry's postinst starts a service where systemd runs; tests start their own.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
from_other_suites
