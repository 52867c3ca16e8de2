#!/usr/bin/env bash
# Builds the ready agent image images/agent/Dockerfile as agenthold/agent:bookworm (the `dev`
# preset's image), FROM the local debian:bookworm-slim (scripts/docker-setup.sh makes it: there
# is no registry here). Containers on the default bridge reach the Debian mirror during the
# build. Skips the build when the image exists and was built from the sources images/agent holds
# now (a label records their digest); `--force` builds it again. Reads no stdin.
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
# The image is labelled with a digest of images/agent, so an image built from older sources
# (say, before the venv and sudo) is built again rather than taken as current.
source_digest=$(cd images/agent && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum \
    | sha256sum | cut -d' ' -f1)
if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    built_from=$(docker image inspect -f '{{index .Config.Labels "agenthold.source"}}' "$tag" 2>/dev/null || true)
    if [ "$built_from" = "$source_digest" ]; then
        log "$tag is there"
        exit 0
    fi
    log "$tag was built from other sources than images/agent now holds; building it again"
fi
docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
    || die "debian:bookworm-slim is missing; run scripts/docker-setup.sh"

started=$SECONDS
log "building $tag from images/agent/Dockerfile"
# --pull=false: the base is the local debootstrapped one; there is no registry to ask.
docker build --pull=false -q --label "agenthold.source=$source_digest" -t "$tag" images/agent >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$tag")
log "built $tag in $((SECONDS - started))s: $((size / 1000000)) MB"
