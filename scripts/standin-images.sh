#!/usr/bin/env bash
# Kept for scripts that call it: the stand-ins are made by `imagegen standins` (imagegen/building/standins/,
# driven by the catalog; docs/containers.md). This passes the old spellings on: a bare `--cuda`
# (this machine's 13.0 toolkit) is `--cuda 13.0`, `--arm64` is `--platform linux/arm64`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cuda)
            if [[ "${2:-}" =~ ^[0-9]+\.[0-9]+$ ]]; then args+=(--cuda "$2"); shift; else args+=(--cuda 13.0); fi ;;
        --arm64) args+=(--platform linux/arm64) ;;
        *) args+=("$1") ;;
    esac
    shift
done
cd "$root" && exec "$python" -m imagegen standins "${args[@]}"
