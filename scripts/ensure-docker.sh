#!/usr/bin/env bash
# Make sure a Docker daemon answers, starting (or installing) one when we can.
#
#   scripts/ensure-docker.sh            # quiet when a daemon already answers
#
# Order: a daemon that answers -> done; dockerd installed -> start it (root only);
# nothing installed on a Debian-family system as root -> apt-get install docker.io and
# start it; otherwise print how to install Docker and exit 1.
#
# Environment:
#   ENSURE_DOCKER_TIMEOUT   seconds to wait for a started daemon (default 60)
#   ENSURE_DOCKER_LOG       where a daemon started here logs (default /var/log/imagegen-dockerd.log)
set -euo pipefail

timeout_s="${ENSURE_DOCKER_TIMEOUT:-60}"
log_file="${ENSURE_DOCKER_LOG:-/var/log/imagegen-dockerd.log}"

# Any client can answer "is a daemon there"; prefer Debian's, which matches its dockerd.
docker_cli() {
    if [ -x /usr/bin/docker ]; then echo /usr/bin/docker; else command -v docker || true; fi
}

daemon_answers() {
    local cli
    cli="$(docker_cli)"
    [ -n "$cli" ] && "$cli" info >/dev/null 2>&1
}

say() { echo "ensure-docker: $*" >&2; }

how_to_install() {
    cat >&2 <<'MSG'
ensure-docker: no Docker daemon answers and this script cannot start one.
  Debian/Ubuntu (as root):  apt-get update && apt-get install -y docker.io && dockerd &
  Other systems:            https://docs.docker.com/engine/install/
  Rootless / remote:        set DOCKER_HOST to a daemon you can reach (then `docker info` must work).
MSG
}

start_dockerd() {
    if [ "$(id -u)" -ne 0 ]; then
        if pgrep -x dockerd >/dev/null 2>&1; then
            say "dockerd runs but does not answer this user (permission on /var/run/docker.sock?)."
            say "add the user to the docker group (sudo usermod -aG docker \"\$USER\") and log in again"
        else
            say "dockerd is installed but not running, and starting it needs root."
            say "run: sudo $0   (or start the docker service: sudo systemctl start docker)"
        fi
        exit 1
    fi
    # A stale pid file from a daemon that died makes a new dockerd refuse to start.
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
        rm -f /var/run/docker.pid
    fi
    if ! pgrep -x dockerd >/dev/null 2>&1; then
        say "starting dockerd (log: $log_file)"
        mkdir -p "$(dirname "$log_file")"
        # setsid: the daemon must outlive this script and must not get the caller's Ctrl-C.
        setsid dockerd >>"$log_file" 2>&1 </dev/null &
    else
        say "dockerd is running but does not answer yet; waiting"
    fi
    local waited=0
    until daemon_answers; do
        if [ "$waited" -ge "$timeout_s" ]; then
            say "dockerd did not answer within ${timeout_s}s; last lines of $log_file:"
            tail -n 20 "$log_file" >&2 || true
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "dockerd answers (after ${waited}s)"
}

if daemon_answers; then
    exit 0
fi

if command -v dockerd >/dev/null 2>&1; then
    start_dockerd
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing docker.io with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io >/dev/null
    start_dockerd
    exit 0
fi

how_to_install
exit 1
