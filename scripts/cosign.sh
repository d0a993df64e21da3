#!/usr/bin/env bash
# Install Debian's real cosign, the verifier tests/integration/test_cosign.py runs against pushed
# images: cosign 3 from sid (3.1.1 when this was written) and cosign 2 from trixie (2.5.0). Each
# package is one static binary; neither is in bookworm.
#
# The .debs come from the sid and trixie suites of the same Debian archive the host's apt sources
# name, through a private apt configuration (scripts/lib/debian-suite.sh): the host's sources,
# lists and state are never changed. COSIGN_MIRROR (else STANDIN_MIRROR) names another archive.
#
# Each binary goes to $COSIGN_ROOT/cosign-<major>/cosign (default /usr/local/lib/imagegen), a path
# the tests know and that no `cosign` on PATH shadows, with the Debian package's version beside it
# in cosign-<major>/version: Debian's builds say `GitVersion: devel` to `cosign version`, so that
# command only shows that the binary runs. Idempotent: quiet when both are there, run, and are of
# the expected major version. Uses sudo for the install only when the folder is not writable.
set -euo pipefail

root="${COSIGN_ROOT:-/usr/local/lib/imagegen}"
# major version, and the suite that packages it
wanted=("3 sid" "2 trixie")

present() {  # whether cosign-$1 is installed, runs, and is a $1.x package
  "$root/cosign-$1/cosign" version >/dev/null 2>&1 && grep -q "^$1\." "$root/cosign-$1/version" 2>/dev/null
}

todo=()
for entry in "${wanted[@]}"; do
  read -r major suite <<<"$entry"
  present "$major" || todo+=("$entry")
done
[ ${#todo[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "cosign: no apt-get here; install cosign 3 and 2 as $root/cosign-3/cosign and cosign-2/cosign" >&2
  exit 1
fi
. "$(dirname "$0")/lib/debian-suite.sh"
if ! mirror=$(debian_mirror COSIGN_MIRROR STANDIN_MIRROR); then
  echo "cosign: no Debian mirror in this host's apt sources; set COSIGN_MIRROR to one" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
suites=()
for entry in "${todo[@]}"; do
  read -r _ suite <<<"$entry"
  suites+=("$suite")
done
echo "cosign: fetching cosign from $mirror (${todo[*]})"
debian_private_apt "$work" "$mirror" "${suites[@]}"

SUDO=""
if ! { mkdir -p "$root" 2>/dev/null && [ -w "$root" ]; }; then
  SUDO="sudo"
fi
for entry in "${todo[@]}"; do
  read -r major suite <<<"$entry"
  rm -rf "$work/deb" "$work/root"
  mkdir -p "$work/deb"
  (cd "$work/deb" && apt-get download -qq "cosign/$suite")
  deb=$(ls "$work"/deb/cosign_*.deb)
  version=$(dpkg-deb -f "$deb" Version)
  dpkg-deb -x "$deb" "$work/root"
  binary="$work/root/usr/bin/cosign"
  if [ ! -x "$binary" ] || ! "$binary" version >/dev/null 2>&1; then
    echo "cosign: Debian's cosign $version ($suite) holds no usr/bin/cosign that runs here" >&2
    exit 1
  fi
  if [ "${version%%.*}" != "$major" ]; then
    echo "cosign: $suite's cosign is $version, expected $major.x" >&2
    exit 1
  fi
  echo "$version" >"$work/version"
  $SUDO mkdir -p "$root/cosign-$major"
  $SUDO install -m 0755 "$binary" "$root/cosign-$major/cosign"
  $SUDO install -m 0644 "$work/version" "$root/cosign-$major/version"
  present "$major" || { echo "cosign: $root/cosign-$major/cosign does not run after installing it" >&2; exit 1; }
  echo "cosign: installed $root/cosign-$major/cosign (Debian's $version from $suite)"
done
