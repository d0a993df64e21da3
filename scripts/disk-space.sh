#!/usr/bin/env bash
# Say how much disk the Docker engine has left, and make room when it is short.
#
#   scripts/disk-space.sh                 # report; prune the engine's build cache when short
#   scripts/disk-space.sh --report        # report only
#
# The integration tier builds real images; BuildKit keeps every layer and context it makes
# until pruned (Debian's dockerd 20.10 runs no cache GC unless configured), so a machine
# that runs the tests often fills up and a build then fails mid-step with "No space left on
# device". Run before the tests: when less than DISK_MIN_FREE_GB is free where Docker keeps
# its data, the build cache and dangling images are pruned (tagged images, the stand-ins
# among them, stay); if that does not free enough, it exits 1 saying so.
#
# Environment:
#   DISK_MIN_FREE_GB   free space the tests need (default 20: one CI run from a clean engine
#                      adds about 7.5 GB of images, build cache and venv)
set -euo pipefail

min_gb="${DISK_MIN_FREE_GB:-20}"
report_only=0
[ "${1:-}" = "--report" ] && report_only=1

say() { echo "disk-space: $*" >&2; }

root="$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || true)"
[ -n "$root" ] && [ -d "$root" ] || root=/

free_gb() { df -P -BG "$root" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }

report() {
    say "$(free_gb) GB free under $root"
    docker system df 2>/dev/null | sed 's/^/  /' >&2 || true
}

report
[ "$report_only" -eq 1 ] && exit 0

if [ "$(free_gb)" -lt "$min_gb" ]; then
    say "less than ${min_gb} GB free: pruning the engine's build cache and dangling images"
    docker builder prune --all --force >/dev/null
    docker image prune --force >/dev/null
    report
    if [ "$(free_gb)" -lt "$min_gb" ]; then
        say "still less than ${min_gb} GB free under $root; the tests' image builds need about that."
        say "free space there (docker image ls: remove unused images), or set DISK_MIN_FREE_GB lower"
        exit 1
    fi
fi
