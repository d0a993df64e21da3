#!/usr/bin/env bash
# Install Debian's docker-buildx plugin (trixie, 0.13.1: one static binary) where no docker
# client on PATH has buildx. `imagegen bake` needs it; `imagegen build` uses it when present.
#
# Bookworm has no docker-buildx package, so the .deb comes from the trixie suite of the same
# Debian archive the host's apt sources name, through a private apt configuration
# (scripts/lib/debian-suite.sh): the host's sources, lists and state are never changed.
# STANDIN_MIRROR names another archive.
# The binary goes to /usr/local/lib/docker/cli-plugins (BUILDX_PLUGIN_DIR), a folder every
# docker client searches. Idempotent; quiet when a docker client on PATH has buildx already.
# Uses sudo for the install only when the plugin folder is not writable.
set -euo pipefail

plugin_dir="${BUILDX_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}"
suite=trixie

for client in $(type -ap docker || true); do
  if "$client" buildx version >/dev/null 2>&1; then
    exit 0
  fi
done

. "$(dirname "$0")/lib/debian-suite.sh"
if ! mirror=$(debian_mirror STANDIN_MIRROR); then
  echo "buildx-plugin: no Debian mirror in this host's apt sources; set STANDIN_MIRROR to one" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "buildx-plugin: fetching docker-buildx from $mirror $suite"
debian_private_apt "$work" "$mirror" "$suite"
(cd "$work" && apt-get download -qq docker-buildx)
dpkg-deb -x "$work"/docker-buildx_*.deb "$work/root"
binary=$(find "$work/root" -type f -path "*/cli-plugins/docker-buildx" | head -n1)
if [ -z "$binary" ]; then
  echo "buildx-plugin: the docker-buildx package holds no docker-buildx binary" >&2
  exit 1
fi
SUDO=""
if ! { mkdir -p "$plugin_dir" 2>/dev/null && [ -w "$plugin_dir" ]; }; then
  SUDO="sudo"
fi
$SUDO mkdir -p "$plugin_dir"
$SUDO install -m 0755 "$binary" "$plugin_dir/docker-buildx"
echo "buildx-plugin: installed $plugin_dir/docker-buildx ($("$plugin_dir/docker-buildx" version 2>/dev/null || echo '?'))"
