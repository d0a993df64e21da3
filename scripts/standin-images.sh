#!/usr/bin/env bash
# Build the local stand-in base images that replace registry images (python:3.11-slim,
# nvidia/cuda:*) where no container registry can be reached.
#
#   scripts/standin-images.sh            # build what is missing (a no-op when all exist)
#   scripts/standin-images.sh --force    # rebuild all of them
#   scripts/standin-images.sh --cuda     # also the CUDA 13.0 stand-ins (copy the host toolkit)
#   scripts/standin-images.sh --cuda 13.2
#                                        # also CUDA 13.2 stand-ins, a CUDA home of exactly that
#                                        # release laid out from NVIDIA's wheels (repeatable; 13.x only)
#   scripts/standin-images.sh --platform linux/arm64   (or --arm64)
#                                        # the arm64 stand-ins (tags end in -arm64), made with
#                                        # debootstrap --foreign and qemu-user-static
#   scripts/standin-images.sh --mirrors  # print the Debian mirrors a base build would use, and exit
#
# Images (cached by tag and recipe revision; arm64 tags add "-arm64", e.g. python:3.11-devel-arm64):
#   imagegen-standin/debian:bookworm        debootstrap --variant=minbase, slimmed like
#                                           debian:bookworm-slim, + docker import
#   imagegen-standin/python:3.11-devel      + python3 python3-venv python3-pip g++ make ninja-build ca-certificates
#   imagegen-standin/python:3.11-runtime    + python3 python3-venv ca-certificates (no compiler)
#   imagegen-standin/cuda:X.Y-devel         devel + a CUDA X.Y home at /usr/local/cuda (--cuda [X.Y])
#   imagegen-standin/cuda:X.Y-base          runtime + its cudart, like nvidia/cuda:*-base (--cuda [X.Y])
#
# NVIDIA's CUDA 13.x wheels hold the whole compiler (nvcc, cudafe++, fatbinary, nvlink, ptxas,
# cicc in nvidia-nvvm, the headers in nvidia-cuda-crt/-runtime/-cccl), so `--cuda X.Y` needs no
# registry. The 12.x wheels hold only ptxas: no CUDA 12 stand-in can be made here.
#
# The derived images are made with `docker run` + `docker commit` rather than a Dockerfile so
# the host CA bundle can be bind-mounted for apt (HTTPS mirrors behind an intercepting proxy)
# without ending up in any layer: tests check that a proxy CA never reaches a runtime image.
#
# Environment:
#   STANDIN_MIRROR   Debian mirror (default: the host's own, from its apt sources); for arm64
#                    it must carry arm64 packages (Debian's mirrors do)
#   STANDIN_SECURITY_MIRROR
#                    Debian security mirror (default: the host's own, from its apt sources)
#   STANDIN_CA       CA bundle apt uses for an HTTPS mirror (default /etc/ssl/certs/ca-certificates.crt)
#   CUDA_HOME        toolkit copied by a bare --cuda (default /usr/local/cuda)
#   STANDIN_PYTHON   Python whose pip fetches the CUDA wheels for --cuda X.Y (default: the
#                    checkout's .venv, else python3); it uses pip's configured index
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
LABEL_KEY=io.imagegen.standin
# Bump when a recipe below changes: images with another revision are rebuilt.
REVISION=3
REVISION_KEY=io.imagegen.standin.revision
HOST_CUDA_VERSION=13.0  # what a bare --cuda copies (this machine's toolkit)

say() { echo "standin-images: $*" >&2; }
usage_error() { say "$*"; exit 2; }

force=0
want_host_cuda=0
cuda_versions=()
print_mirrors=0
platform=linux/amd64
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=1 ;;
        --cuda=*) cuda_versions+=("${1#--cuda=}") ;;
        --cuda)
            # An optional version: `--cuda 13.2` lays out the wheels, a bare `--cuda` copies the host's.
            if [[ "${2:-}" =~ ^[0-9]+\.[0-9]+$ ]]; then cuda_versions+=("$2"); shift; else want_host_cuda=1; fi ;;
        --platform=*) platform="${1#--platform=}" ;;
        --platform) [ $# -ge 2 ] || usage_error "--platform needs a value (linux/amd64 or linux/arm64)"; platform="$2"; shift ;;
        --arm64) platform=linux/arm64 ;;
        --mirrors) print_mirrors=1 ;;
        -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
    shift
done

# Debian's name for the architecture, the kernel's (binfmt handlers, wheel tags), the tag suffix.
case "$platform" in
    linux/amd64) ARCH=amd64 MACHINE=x86_64 SUFFIX="" ;;
    linux/arm64|linux/arm64/v8) platform=linux/arm64 ARCH=arm64 MACHINE=aarch64 SUFFIX=-arm64 ;;
    *) usage_error "--platform $platform is not one the stand-ins are made for (linux/amd64, linux/arm64)" ;;
esac
for version in "${cuda_versions[@]}"; do
    [[ "$version" =~ ^([0-9]+)\.[0-9]+$ ]] || usage_error "--cuda $version is not a CUDA version (use MAJOR.MINOR, e.g. 13.2)"
    # The 12.x wheels (nvidia-cuda-nvcc-cu12) hold only ptxas: there is no compiler to lay out.
    [ "${BASH_REMATCH[1]}" -ge 13 ] || usage_error "--cuda $version: NVIDIA's wheels hold a whole compiler from CUDA 13 on only; a CUDA ${BASH_REMATCH[1]} stand-in needs a registry"
done
if [ "$want_host_cuda" -eq 1 ] && [ "$ARCH" != amd64 ]; then
    usage_error "a bare --cuda copies this machine's x86-64 toolkit; for $platform name a version (--cuda 13.2)"
fi

BASE_TAG=$PREFIX/debian:bookworm$SUFFIX
DEVEL_TAG=$PREFIX/python:3.11-devel$SUFFIX
RUNTIME_TAG=$PREFIX/python:3.11-runtime$SUFFIX
cuda_devel_tag() { echo "$PREFIX/cuda:$1-devel$SUFFIX"; }
cuda_base_tag() { echo "$PREFIX/cuda:$1-base$SUFFIX"; }

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

# Programs of another architecture (debootstrap's second stage, apt in the derive containers)
# run through the kernel's binfmt_misc and Debian's qemu-user-static. Its handlers are
# registered with the F flag (the interpreter is opened at registration), which is what lets
# them work inside chroots and containers that do not hold qemu themselves.
check_emulation() {
    [ "$(dpkg --print-architecture 2>/dev/null || uname -m)" = "$ARCH" ] && return 0
    [ "$(uname -m)" = "$MACHINE" ] && return 0
    local handler=/proc/sys/fs/binfmt_misc/qemu-$MACHINE
    if [ ! -e /proc/sys/fs/binfmt_misc/status ] && [ "$(id -u)" -eq 0 ]; then
        # An unmounted binfmt_misc (a container, a minimal boot) holds no handlers: mount it.
        say "mounting binfmt_misc to register the qemu-$MACHINE handler"
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
    fi
    if [ ! -e "$handler" ] && command -v update-binfmts >/dev/null && [ "$(id -u)" -eq 0 ]; then
        update-binfmts --enable "qemu-$MACHINE" >/dev/null 2>&1 || true
    fi
    if [ ! -e "$handler" ] || ! grep -qx enabled "$handler"; then
        say "$platform programs cannot run here: no enabled binfmt handler $handler"
        say "install Debian's qemu-user-static and binfmt-support (scripts/system-deps.sh), then"
        say "  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable qemu-$MACHINE"
        exit 1
    fi
    if ! grep -q '^flags:.*F' "$handler"; then
        say "the binfmt handler $handler lacks the F flag, so it fails inside containers;"
        say "register Debian's qemu-user-static one (update-binfmts --enable qemu-$MACHINE)"
        exit 1
    fi
}

build_base() {
    command -v debootstrap >/dev/null || { say "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    [ "$(id -u)" -eq 0 ] || { say "debootstrap needs root"; exit 1; }
    resolve_mirrors
    local root="$workdir/rootfs" start=$SECONDS
    say "debootstrap $SUITE (minbase, $ARCH) from $MIRROR"
    # --foreign unpacks only; the second stage configures the packages by running them, under
    # qemu for another architecture (check_emulation). One code path for both: native too.
    { debootstrap --arch="$ARCH" --foreign --variant=minbase "$SUITE" "$root" "$MIRROR" \
        && chroot "$root" /debootstrap/debootstrap --second-stage; } >"$workdir/debootstrap.log" 2>&1 || {
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
    if [ "$ARCH" = amd64 ]; then
        say "docker import -> $BASE_TAG"
        tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$root" -c . \
            | "$DOCKER" import \
                --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                --change 'ENV LANG=C.UTF-8' \
                --change "LABEL $LABEL_KEY=base" \
                --change "LABEL $REVISION_KEY=$REVISION" \
                --change 'CMD ["bash"]' \
                - "$BASE_TAG" >/dev/null
    else
        # `docker import --platform` is ignored by dockerd 20.10 (the image would say amd64), so
        # another architecture's root goes in through BuildKit, which records the platform.
        say "docker build --platform $platform (FROM scratch, ADD the root) -> $BASE_TAG"
        local ctx="$workdir/base-ctx"
        mkdir -p "$ctx"
        tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$root" \
            -cf "$ctx/rootfs.tar" .
        cat >"$ctx/Dockerfile" <<DF
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
LABEL $LABEL_KEY=base $REVISION_KEY=$REVISION
CMD ["bash"]
DF
        DOCKER_BUILDKIT=1 "$DOCKER" build -q --platform "$platform" -t "$BASE_TAG" "$ctx" >/dev/null
        rm -rf "$ctx"
    fi
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
        "$BASE_TAG" sh -euc '
            # Set here, not with `docker run -e`: `docker commit` keeps the environment of
            # the container, and the images built on the stand-ins would inherit it.
            export DEBIAN_FRONTEND=noninteractive
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

# cuda_images VERSION FULL_VERSION CTX: the devel and base stand-ins from CTX/cuda (a CUDA
# home) and CTX/cudart (its libcudart).
cuda_images() {
    local version="$1" full="$2" ctx="$3"
    local devel_tag base_tag
    devel_tag="$(cuda_devel_tag "$version")" base_tag="$(cuda_base_tag "$version")"
    # The nvidia/cuda images set these; templates rely on CUDA_HOME and nvcc on PATH.
    cat >"$ctx/Dockerfile.devel" <<DF
FROM $DEVEL_TAG
COPY cuda /usr/local/cuda
ENV CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 CUDA_VERSION=$full
LABEL $LABEL_KEY=cuda-devel $REVISION_KEY=$REVISION
DF
    # nvidia/cuda:*-base: cudart and the variables the NVIDIA container toolkit reads; no
    # other CUDA library (torch's wheels bring those).
    cat >"$ctx/Dockerfile.base" <<DF
FROM $RUNTIME_TAG
COPY cudart/ /usr/local/cuda/lib64/
ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 CUDA_VERSION=$full \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
RUN echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/cuda.conf && ldconfig
LABEL $LABEL_KEY=cuda-base $REVISION_KEY=$REVISION
DF
    # BuildKit for another platform (its RUN goes through qemu); the classic builder as before.
    local builder=("$DOCKER" build -q)
    [ "$ARCH" = amd64 ] || builder=(env DOCKER_BUILDKIT=1 "$DOCKER" build -q --platform "$platform")
    "${builder[@]}" -f "$ctx/Dockerfile.devel" -t "$devel_tag" "$ctx" >/dev/null
    "${builder[@]}" -f "$ctx/Dockerfile.base" -t "$base_tag" "$ctx" >/dev/null
    say "$devel_tag and $base_tag ready"
}

build_host_cuda() {
    local start=$SECONDS
    [ -x "$CUDA_DIR/bin/nvcc" ] || { say "no CUDA toolkit at $CUDA_DIR (set CUDA_HOME)"; exit 1; }
    say "copying $CUDA_DIR into the CUDA $HOST_CUDA_VERSION stand-ins"
    local ctx="$workdir/cuda-ctx"
    mkdir -p "$ctx/cudart"
    # -L: /usr/local/cuda is usually a symlink to the versioned directory.
    cp -aL "$CUDA_DIR" "$ctx/cuda"
    cp -a "$CUDA_DIR"/lib64/libcudart.so.* "$ctx/cudart/"
    cuda_images "$HOST_CUDA_VERSION" "$HOST_CUDA_VERSION" "$ctx"
    rm -rf "$ctx"
    say "CUDA $HOST_CUDA_VERSION stand-ins ready ($((SECONDS - start))s)"
}

standin_python() {
    if [ -n "${STANDIN_PYTHON:-}" ]; then echo "$STANDIN_PYTHON"; return; fi
    local venv
    venv="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
    if [ -x "$venv" ]; then echo "$venv"; else echo python3; fi
}

# build_wheel_cuda X.Y: NVIDIA's wheels of the newest X.Y release (the cuda-toolkit meta
# package pins one component set per release) installed into a folder, whose nvidia/cu13
# tree is already a CUDA home: bin/ (nvcc, cudafe++, fatbinary, nvlink, ptxas), include/,
# lib/, nvvm/. Only the symlinks an installed toolkit has are added.
build_wheel_cuda() {
    local version="$1" start=$SECONDS
    local major="${version%%.*}" ctx="$workdir/cuda-$version" py
    py="$(standin_python)"
    say "pip install cuda-toolkit[nvcc,cccl,cudart]==$version.* ($MACHINE wheels) for the CUDA $version stand-ins"
    mkdir -p "$ctx/cudart"
    # Every manylinux tag NVIDIA has used for these wheels; pip matches exact tags with --platform.
    "$py" -m pip install --quiet --no-compile --no-deps --target "$ctx/wheels" --only-binary=:all: \
        --platform "manylinux_2_28_$MACHINE" --platform "manylinux_2_27_$MACHINE" \
        --platform "manylinux_2_17_$MACHINE" --platform "manylinux2014_$MACHINE" \
        "cuda-toolkit==$version.*" >"$workdir/pip-$version.log" 2>&1 || {
        tail -n 20 "$workdir/pip-$version.log" >&2
        say "no cuda-toolkit $version.* on pip's index (pip config list); is CUDA $version released?"
        exit 1
    }
    local meta full
    meta="$(ls -d "$ctx"/wheels/cuda_toolkit-*.dist-info)"
    full="$(basename "$meta" .dist-info)"
    full="${full#cuda_toolkit-}"
    # The components pinned by that exact release (the meta package's extras).
    "$py" -m pip install --quiet --no-compile --target "$ctx/wheels" --only-binary=:all: --upgrade \
        --platform "manylinux_2_28_$MACHINE" --platform "manylinux_2_27_$MACHINE" \
        --platform "manylinux_2_17_$MACHINE" --platform "manylinux2014_$MACHINE" \
        "cuda-toolkit[nvcc,cccl,cudart]==$full" >>"$workdir/pip-$version.log" 2>&1 || {
        tail -n 20 "$workdir/pip-$version.log" >&2
        exit 1
    }
    local home="$ctx/wheels/nvidia/cu$major"
    [ -x "$home/bin/nvcc" ] || { say "the CUDA $full wheels hold no bin/nvcc (under nvidia/cu$major)"; exit 1; }
    mv "$home" "$ctx/cuda"
    (
        cd "$ctx/cuda/lib"
        for lib in libcudart.so libnvvm.so; do
            for real in "$lib".*; do
                if [ -e "$real" ] && [ ! -e "$lib" ]; then ln -s "$real" "$lib"; fi
            done
        done
    )
    ln -s lib "$ctx/cuda/lib64"
    cp -a "$ctx"/cuda/lib/libcudart.so.* "$ctx/cudart/"
    rm -rf "$ctx/wheels"
    cuda_images "$version" "$full" "$ctx"
    rm -rf "$ctx"
    say "CUDA $full stand-ins ready ($((SECONDS - start))s)"
}

total_start=$SECONDS
check_emulation
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
rebuilt_parents=$((rebuilt_devel + rebuilt_runtime))
if [ "$want_host_cuda" -eq 1 ] && { [ "$rebuilt_parents" -gt 0 ] || need "$(cuda_devel_tag "$HOST_CUDA_VERSION")" || need "$(cuda_base_tag "$HOST_CUDA_VERSION")"; }; then
    build_host_cuda
fi
for version in "${cuda_versions[@]}"; do
    if [ "$rebuilt_parents" -gt 0 ] || need "$(cuda_devel_tag "$version")" || need "$(cuda_base_tag "$version")"; then
        build_wheel_cuda "$version"
    fi
done
if [ $((SECONDS - total_start)) -gt 1 ]; then
    say "done in $((SECONDS - total_start))s"
fi
