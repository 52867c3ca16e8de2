#!/usr/bin/env bash
# Builds the ready agent image images/agent/Dockerfile as agenthold/agent:bookworm (the `dev`
# preset's image), FROM the local debian:bookworm-slim (scripts/docker-setup.sh makes it: there
# is no registry here). Containers on the default bridge reach the Debian mirror during the
# build. Skips the build when the image exists; `--force` builds it again. Reads no stdin.
#
# Usage: scripts/build-agent-image.sh [--force] [TAG]
set -euo pipefail

cd "$(dirname "$0")/.."
log() { printf '[build-agent-image] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

force=0
if [ "${1:-}" = "--force" ]; then
    force=1
    shift
fi
tag="${1:-agenthold/agent:bookworm}"

command -v docker >/dev/null || die "docker is not installed; run scripts/docker-setup.sh"
docker info >/dev/null 2>&1 || die "no Docker engine answers; run scripts/docker-setup.sh"
if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is there"
    exit 0
fi
docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
    || die "debian:bookworm-slim is missing; run scripts/docker-setup.sh"

started=$SECONDS
log "building $tag from images/agent/Dockerfile"
# --pull=false: the base is the local debootstrapped one; there is no registry to ask.
docker build --pull=false -q -t "$tag" images/agent >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$tag")
log "built $tag in $((SECONDS - started))s: $((size / 1000000)) MB"
