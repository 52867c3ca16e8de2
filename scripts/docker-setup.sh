#!/usr/bin/env bash
# Prepares this machine for the Docker driver and its tests: a Docker engine that answers, and the
# local images the tests use. Idempotent and quick when everything is already there; reads no stdin.
#
# gVisor's runsc (Debian's package) is installed and registered as the Docker runtime `runsc`.
#
# The machines have no container registry, so every image is made locally:
#   debian:bookworm-slim          debootstrap (minbase) from the apt mirror this machine already uses
#   agenthold-test/agent:latest   debian:bookworm-slim plus a non-root `agent` account (uid 1000)
#   agenthold-test/busybox:latest the static busybox from Debian's busybox-static package
#
# Environment:
#   DOCKERD_LOG        where dockerd logs when this script starts it (default /var/log/dockerd.log)
#   DOCKER_WAIT_SECS   how long to wait for dockerd to answer (default 60)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
DOCKER_WAIT_SECS="${DOCKER_WAIT_SECS:-60}"

log() { printf '[docker-setup] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "run as root (or install sudo)"
    SUDO="sudo -n"
fi

apt_updated=0
apt_install() {
    if [ "$apt_updated" -eq 0 ]; then
        $SUDO apt-get update -q >/dev/null
        apt_updated=1
    fi
    log "installing $*"
    $SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

# The apt mirror this machine is configured with; we never write a mirror host into the repo.
debian_mirror() {
    local m=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        m="$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)"
    fi
    if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
        m="$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' /etc/apt/sources.list)"
    fi
    [ -n "$m" ] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
    printf '%s\n' "$m"
}

# 1. The engine.
if ! command -v dockerd >/dev/null; then
    apt_install docker.io
fi
command -v docker >/dev/null || apt_install docker.io
# The agents' disk images (ext4 images, loop-mounted): e2fsprogs and util-linux's mount tools.
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null || apt_install e2fsprogs
PATH="$PATH:/usr/sbin:/sbin" command -v losetup >/dev/null || apt_install mount
# The tests of the writable-layer limit run engines of their own on loop-mounted btrfs and XFS.
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.xfs >/dev/null || apt_install xfsprogs
PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.btrfs >/dev/null || apt_install btrfs-progs

if ! docker info >/dev/null 2>&1; then
    # A dockerd (or its containerd) killed earlier can leave a pid file naming a process that is
    # gone or a zombie not yet reaped; dockerd then refuses to start ("pid file found").
    for f in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
        p="$($SUDO cat "$f" 2>/dev/null || true)"
        [ -n "$p" ] || continue
        s="$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null || true)"
        if [ -z "$s" ] || [ "$s" = Z ]; then
            log "removing stale pid file $f (process $p is gone)"
            $SUDO rm -f "$f"
        fi
    done
    log "starting dockerd (log: $DOCKERD_LOG)"
    # setsid + nohup: dockerd must outlive this script and whatever shell ran it.
    $SUDO setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    deadline=$(( $(date +%s) + DOCKER_WAIT_SECS ))
    until docker info >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "dockerd did not answer within ${DOCKER_WAIT_SECS}s"
        fi
        sleep 0.5
    done
    log "dockerd is up"
fi

# 1b. gVisor: Debian's runsc, registered as the runtime `runsc`. `--network=host` makes runsc use
#     the network namespace Docker made for the container (its own, not the host's): without it
#     every container fails with "cannot run with network enabled in root network namespace".
#     dockerd rereads daemon.json's runtimes on SIGHUP, so running containers keep running.
command -v runsc >/dev/null || apt_install runsc
command -v jq >/dev/null || apt_install jq
runsc_bin="$(command -v runsc)"
daemon_json=/etc/docker/daemon.json
want="$(jq -n --arg p "$runsc_bin" '{path: $p, runtimeArgs: ["--network=host"]}')"
have="$($SUDO cat "$daemon_json" 2>/dev/null || echo '{}')"
[ -n "$have" ] || have='{}'
if [ "$(jq -c '.runtimes.runsc // null' <<<"$have")" != "$(jq -c . <<<"$want")" ]; then
    log "registering runsc in $daemon_json"
    $SUDO mkdir -p /etc/docker
    new="$(jq --argjson r "$want" '.runtimes.runsc = $r' <<<"$have")" \
        || die "$daemon_json is not valid JSON"
    tmp="$(mktemp)"
    printf '%s\n' "$new" >"$tmp"
    $SUDO install -m 0644 "$tmp" "$daemon_json"
    rm -f "$tmp"
fi
if ! docker info --format '{{json .Runtimes}}' | jq -e 'has("runsc")' >/dev/null; then
    pid="$($SUDO cat /var/run/docker.pid 2>/dev/null || true)"
    [ -n "$pid" ] || die "dockerd has no pid file (/var/run/docker.pid): cannot reload it"
    log "reloading dockerd (SIGHUP to $pid)"
    $SUDO kill -HUP "$pid"
    deadline=$(( $(date +%s) + DOCKER_WAIT_SECS ))
    until docker info --format '{{json .Runtimes}}' | jq -e 'has("runsc")' >/dev/null; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "dockerd did not list the runtime runsc within ${DOCKER_WAIT_SECS}s of SIGHUP"
        fi
        sleep 0.5
    done
    log "dockerd lists runtime runsc"
fi

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# 2. debian:bookworm-slim, from debootstrap.
if ! have_image debian:bookworm-slim; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    mirror="$(debian_mirror)"
    root="$(mktemp -d /tmp/agenthold-bookworm.XXXXXX)"
    trap '$SUDO rm -rf "$root"' EXIT
    log "debootstrap bookworm (minbase) into $root"
    $SUDO debootstrap --variant=minbase bookworm "$root" "$mirror" >/tmp/agenthold-debootstrap.log 2>&1 \
        || { tail -n 30 /tmp/agenthold-debootstrap.log >&2; die "debootstrap failed"; }
    # Keep the image small, like the real -slim one: no package lists or caches.
    $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    $SUDO tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - debian:bookworm-slim >/dev/null
    $SUDO rm -rf "$root"
    trap - EXIT
    log "imported debian:bookworm-slim"
fi

# 3. An image with a non-root agent account.
if ! have_image agenthold-test/agent:latest; then
    ctx="$(mktemp -d)"
    cat >"$ctx/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN useradd -m -u 1000 -s /bin/bash agent
EOF
    docker build -q -t agenthold-test/agent:latest "$ctx" >/dev/null
    rm -rf "$ctx"
    log "built agenthold-test/agent:latest"
fi

# 4. An image whose own USER is not root and that has no agent account: commands run as that user.
if ! have_image agenthold-test/worker:latest; then
    ctx="$(mktemp -d)"
    cat >"$ctx/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN useradd -m -u 1234 -s /bin/bash worker
USER worker
EOF
    docker build -q -t agenthold-test/worker:latest "$ctx" >/dev/null
    rm -rf "$ctx"
    log "built agenthold-test/worker:latest"
fi

# 5. busybox, from Debian's static build, and two with a USER of their own: a uid the image does
#    not list (allowed, as in Docker) and a name it does not have (a clear error).
if ! have_image agenthold-test/busybox:latest; then
    dpkg -s busybox-static >/dev/null 2>&1 || apt_install busybox-static
    ctx="$(mktemp -d)"
    mkdir -p "$ctx/root/bin" "$ctx/root/etc" "$ctx/root/tmp" "$ctx/root/root"
    cp /bin/busybox "$ctx/root/bin/busybox"
    for applet in sh ls cat id echo sleep ps wget nc; do
        ln -s busybox "$ctx/root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ctx/root/etc/passwd"
    printf 'root:x:0:\n' >"$ctx/root/etc/group"
    chmod 1777 "$ctx/root/tmp"
    tar -C "$ctx/root" -c . | docker import -c 'CMD ["sh"]' - agenthold-test/busybox:latest >/dev/null
    rm -rf "$ctx"
    log "imported agenthold-test/busybox:latest"
fi
for user in 4321:4321 ghost; do
    tag="agenthold-test/busybox-user-${user%%:*}:latest"
    if ! have_image "$tag"; then
        printf 'FROM agenthold-test/busybox:latest\nUSER %s\n' "$user" | docker build -q -t "$tag" - >/dev/null
        log "built $tag"
    fi
done

log "ready: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
