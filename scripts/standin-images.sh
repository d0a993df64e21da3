#!/usr/bin/env bash
# Build the local stand-in base images that replace registry images (python:3.11-slim,
# nvidia/cuda:*) where no container registry can be reached.
#
#   scripts/standin-images.sh            # build what is missing (a no-op when all exist)
#   scripts/standin-images.sh --force    # rebuild all of them
#   scripts/standin-images.sh --cuda     # also the CUDA stand-ins (copy the host toolkit)
#   scripts/standin-images.sh --mirrors  # print the Debian mirrors a base build would use, and exit
#
# Images (cached by tag and recipe revision):
#   imagegen-standin/debian:bookworm        debootstrap --variant=minbase, slimmed like
#                                           debian:bookworm-slim, + docker import
#   imagegen-standin/python:3.11-devel      + python3 python3-venv python3-pip g++ make ninja-build ca-certificates
#   imagegen-standin/python:3.11-runtime    + python3 python3-venv ca-certificates (no compiler)
#   imagegen-standin/cuda:13.0-devel        devel + the host's CUDA toolkit at /usr/local/cuda (--cuda)
#   imagegen-standin/cuda:13.0-base         runtime + the toolkit's cudart, like nvidia/cuda:*-base (--cuda)
#
# The derived images are made with `docker run` + `docker commit` rather than a Dockerfile so
# the host CA bundle can be bind-mounted for apt (HTTPS mirrors behind an intercepting proxy)
# without ending up in any layer: tests check that a proxy CA never reaches a runtime image.
#
# Environment:
#   STANDIN_MIRROR   Debian mirror (default: the host's own, from its apt sources)
#   STANDIN_SECURITY_MIRROR
#                    Debian security mirror (default: the host's own, from its apt sources)
#   STANDIN_CA       CA bundle apt uses for an HTTPS mirror (default /etc/ssl/certs/ca-certificates.crt)
#   CUDA_HOME        toolkit copied by --cuda (default /usr/local/cuda)
#   STANDIN_PREFIX   repository prefix of the tags (default imagegen-standin), e.g. to time a
#                    cold run without replacing the images other builds are cached on
set -euo pipefail

SUITE=bookworm
# Resolved only when the base is built (resolve_mirrors), so cached images need no mirror.
MIRROR="${STANDIN_MIRROR:-}"
SECURITY_MIRROR="${STANDIN_SECURITY_MIRROR:-}"
CA_BUNDLE="${STANDIN_CA:-/etc/ssl/certs/ca-certificates.crt}"
CUDA_DIR="${CUDA_HOME:-/usr/local/cuda}"

PREFIX="${STANDIN_PREFIX:-imagegen-standin}"
BASE_TAG=$PREFIX/debian:bookworm
DEVEL_TAG=$PREFIX/python:3.11-devel
RUNTIME_TAG=$PREFIX/python:3.11-runtime
CUDA_TAG=$PREFIX/cuda:13.0-devel
CUDA_BASE_TAG=$PREFIX/cuda:13.0-base
LABEL_KEY=io.imagegen.standin
# Bump when a recipe below changes: images with another revision are rebuilt.
REVISION=2
REVISION_KEY=io.imagegen.standin.revision

force=0
want_cuda=0
print_mirrors=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --cuda) want_cuda=1 ;;
        --mirrors) print_mirrors=1 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "standin-images: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

say() { echo "standin-images: $*" >&2; }

# The host's Debian mirrors, from its apt sources as apt itself reads them (sources.list,
# sources.list.d/*.list and deb822 *.sources; `Enabled: no` and deb-src entries skipped), so a
# machine behind a corporate mirror builds the bases from that mirror without edits. apt's own
# APT_CONFIG points it at other sources. A Debian archive is told from other repositories (a
# vendor's, Ubuntu's on an Ubuntu host) by its suite: the one built here, the host's codename
# on a Debian host, or a Debian alias such as stable.
apt_targets() {
    command -v apt-get >/dev/null || return 0
    # --no-release-info: every configured source, whether or not `apt-get update` ever ran.
    # shellcheck disable=SC2016  # $(...) here is apt's --format syntax, not the shell's
    apt-get indextargets --no-release-info --format '$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)' \
        2>/dev/null | sort -u || true
}

# debian_mirror main|security SUITES < targets: the first http(s) `deb` entry carrying the main
# component whose suite is one of SUITES (main) or such a suite's -security or /updates (security).
debian_mirror() {
    awk -v kind="$1" -v suites="$2" '
        BEGIN { n = split(suites, list, " "); for (i = 1; i <= n; i++) debian[list[i]] = 1 }
        $1 != "deb" || $2 !~ /^https?:\/\// || $4 != "main" { next }
        {
            suite = $3
            if (kind == "security") { if (!sub(/(-security|\/updates)$/, "", suite)) next }
            else if (suite ~ /[-\/]/) next  # -updates, -backports: the archive has a plain entry too
            if (suite in debian) { uri = $2; sub(/\/+$/, "", uri); print uri; exit }
        }'
}

# Fills MIRROR and SECURITY_MIRROR where the environment did not; exits 1 naming the
# variable to set when the host's sources have no such entry.
resolve_mirrors() {
    [ -n "$MIRROR" ] && [ -n "$SECURITY_MIRROR" ] && return 0
    local suites="$SUITE stable oldstable testing unstable sid" targets
    if [ -r /etc/os-release ]; then
        # shellcheck disable=SC1091  # the host's file, read in a subshell
        suites="$suites $(. /etc/os-release; [ "${ID:-}" != debian ] || echo "${VERSION_CODENAME:-}")"
    fi
    targets="$(apt_targets)"
    [ -n "$MIRROR" ] || MIRROR="$(debian_mirror main "$suites" <<<"$targets")"
    [ -n "$SECURITY_MIRROR" ] || SECURITY_MIRROR="$(debian_mirror security "$suites" <<<"$targets")"
    local sources="this host's apt sources (/etc/apt/sources.list, sources.list.d/*.list, *.sources)"
    if [ -z "$MIRROR" ]; then
        say "no Debian mirror for $SUITE in $sources; set STANDIN_MIRROR to one (the URL a 'deb URL $SUITE main' line would name)"
        exit 1
    fi
    if [ -z "$SECURITY_MIRROR" ]; then
        say "no Debian security mirror for $SUITE-security in $sources; set STANDIN_SECURITY_MIRROR to one (the URL a 'deb URL $SUITE-security main' line would name)"
        exit 1
    fi
}

if [ "$print_mirrors" -eq 1 ]; then
    resolve_mirrors
    echo "STANDIN_MIRROR=$MIRROR"
    echo "STANDIN_SECURITY_MIRROR=$SECURITY_MIRROR"
    exit 0
fi

# Debian's client matches Debian's dockerd; any client works for these plain commands.
if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER="$(command -v docker)"; fi
if ! "$DOCKER" info >/dev/null 2>&1; then
    echo "standin-images: no Docker daemon answers; run scripts/ensure-docker.sh first" >&2
    exit 3
fi

current() {
    [ "$("$DOCKER" image inspect --format "{{ index .Config.Labels \"$REVISION_KEY\" }}" "$1" 2>/dev/null)" = "$REVISION" ]
}
need() { [ "$force" -eq 1 ] || ! current "$1"; }

workdir="$(mktemp -d /tmp/imagegen-standin.XXXXXX)"
cleanup() {
    # The derive containers are named after this script's pid, so only ours are removed.
    for kind in devel runtime; do
        "$DOCKER" rm -f "imagegen-standin-$kind-$$" >/dev/null 2>&1 || true
    done
    rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_base() {
    command -v debootstrap >/dev/null || { say "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    [ "$(id -u)" -eq 0 ] || { say "debootstrap needs root"; exit 1; }
    resolve_mirrors
    local root="$workdir/rootfs" start=$SECONDS
    say "debootstrap $SUITE (minbase) from $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$workdir/debootstrap.log" 2>&1 || {
        tail -n 30 "$workdir/debootstrap.log" >&2
        exit 1
    }
    # Same sources and apt habits as the official debian images: updates + security, no
    # package caches left in layers.
    cat >"$root/etc/apt/sources.list" <<SRC
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
SRC
    cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
CONF
    slimify "$root"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
    say "docker import -> $BASE_TAG"
    tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$root" -c . \
        | "$DOCKER" import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "LABEL $LABEL_KEY=base" \
            --change "LABEL $REVISION_KEY=$REVISION" \
            --change 'CMD ["bash"]' \
            - "$BASE_TAG" >/dev/null
    rm -rf "$root"
    say "$BASE_TAG ready ($((SECONDS - start))s)"
}

# What debian:*-slim leaves out (its debuerreotype recipe): documentation, manuals and
# translations, for the packages installed now and, through dpkg's path-exclude, later.
# The python:*-slim images the stand-ins replace are built on it.
slimify() {
    local root="$1"
    cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
CFG
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/groff/* "$root"/usr/share/info/* "$root"/usr/share/linda/* \
        "$root"/usr/share/lintian/overrides/* "$root"/usr/share/locale/* "$root"/usr/share/man/*
}

# derive TAG KIND PACKAGES...: run apt in a container of the base, then commit it.
derive() {
    local tag="$1" kind="$2" start=$SECONDS
    shift 2
    say "apt-get install $* -> $tag"
    local container="imagegen-standin-$kind-$$"
    # The CA is mounted, never copied, so no layer holds it.
    # shellcheck disable=SC2016  # the quoted script expands in the container's sh
    "$DOCKER" run --name "$container" \
        -v "$CA_BUNDLE:/run/host-ca.crt:ro" \
        -e DEBIAN_FRONTEND=noninteractive \
        "$BASE_TAG" sh -euc '
            apt_opts="-o Acquire::https::CAInfo=/run/host-ca.crt -o Acquire::Retries=3"
            apt-get $apt_opts update -qq
            apt-get $apt_opts install -y -qq --no-install-recommends "$@" >/dev/null
            apt-get clean
            rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /tmp/* /root/.cache
        ' standin "$@" >"$workdir/$kind.log" 2>&1 || {
        tail -n 30 "$workdir/$kind.log" >&2
        exit 1
    }
    "$DOCKER" commit \
        --change 'CMD ["bash"]' \
        --change "LABEL $LABEL_KEY=$kind" \
        --change "LABEL $REVISION_KEY=$REVISION" \
        "$container" "$tag" >/dev/null
    "$DOCKER" rm -f "$container" >/dev/null
    say "$tag ready ($((SECONDS - start))s)"
}

build_cuda() {
    local start=$SECONDS
    [ -x "$CUDA_DIR/bin/nvcc" ] || { say "no CUDA toolkit at $CUDA_DIR (set CUDA_HOME)"; exit 1; }
    say "copying $CUDA_DIR into $CUDA_TAG and its cudart into $CUDA_BASE_TAG"
    local ctx="$workdir/cuda-ctx"
    mkdir -p "$ctx/cudart"
    # -L: /usr/local/cuda is usually a symlink to the versioned directory.
    cp -aL "$CUDA_DIR" "$ctx/cuda"
    cp -a "$CUDA_DIR"/lib64/libcudart.so.* "$ctx/cudart/"
    # The nvidia/cuda images set these; templates rely on CUDA_HOME and nvcc on PATH.
    cat >"$ctx/Dockerfile.devel" <<DF
FROM $DEVEL_TAG
COPY cuda /usr/local/cuda
ENV CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 CUDA_VERSION=13.0
LABEL $LABEL_KEY=cuda-devel $REVISION_KEY=$REVISION
DF
    # nvidia/cuda:*-base: cudart and the variables the NVIDIA container toolkit reads; no
    # other CUDA library (torch's wheels bring those).
    cat >"$ctx/Dockerfile.base" <<DF
FROM $RUNTIME_TAG
COPY cudart/ /usr/local/cuda/lib64/
ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 CUDA_VERSION=13.0 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
RUN echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/cuda.conf && ldconfig
LABEL $LABEL_KEY=cuda-base $REVISION_KEY=$REVISION
DF
    "$DOCKER" build -q -f "$ctx/Dockerfile.devel" -t "$CUDA_TAG" "$ctx" >/dev/null
    "$DOCKER" build -q -f "$ctx/Dockerfile.base" -t "$CUDA_BASE_TAG" "$ctx" >/dev/null
    say "$CUDA_TAG and $CUDA_BASE_TAG ready ($((SECONDS - start))s)"
}

total_start=$SECONDS
rebuilt_base=0
if need "$BASE_TAG"; then build_base; rebuilt_base=1; fi
# A new base invalidates everything built from it. devel and runtime only read the base,
# so they are made in parallel (mostly network and dpkg time).
pids=()
rebuilt_devel=0
rebuilt_runtime=0
if [ "$rebuilt_base" -eq 1 ] || need "$DEVEL_TAG"; then
    derive "$DEVEL_TAG" devel python3 python3-venv python3-pip g++ make ninja-build ca-certificates &
    pids+=("$!")
    rebuilt_devel=1
fi
if [ "$rebuilt_base" -eq 1 ] || need "$RUNTIME_TAG"; then
    derive "$RUNTIME_TAG" runtime python3 python3-venv ca-certificates &
    pids+=("$!")
    rebuilt_runtime=1
fi
for pid in "${pids[@]}"; do
    wait "$pid" || exit 1
done
if [ "$want_cuda" -eq 1 ] && { [ "$rebuilt_devel" -eq 1 ] || [ "$rebuilt_runtime" -eq 1 ] || need "$CUDA_TAG" || need "$CUDA_BASE_TAG"; }; then
    build_cuda
fi
if [ $((SECONDS - total_start)) -gt 1 ]; then
    say "done in $((SECONDS - total_start))s"
fi
