#!/usr/bin/env bash
# Builds the test images that need packages from the Debian mirror (scripts/docker-setup.sh makes
# the ones that do not): agenthold-test/clients:bookworm from images/clients/Dockerfile, plain
# debian:bookworm-slim plus the distribution's HTTPS clients. Like scripts/build-agent-image.sh,
# skips an image that exists and was built from the sources its folder holds now (a label records
# their digest); `--force` builds them again. Reads no stdin.
#
# Usage: scripts/build-test-images.sh [--force]
set -euo pipefail

cd "$(dirname "$0")/.."
log() { printf '[build-test-images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

force=0
[ "${1:-}" = "--force" ] && force=1

command -v docker >/dev/null || die "docker is not installed; run scripts/docker-setup.sh"
docker info >/dev/null 2>&1 || die "no Docker engine answers; run scripts/docker-setup.sh"
docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
    || die "debian:bookworm-slim is missing; run scripts/docker-setup.sh"

# build TAG FOLDER: builds FOLDER/Dockerfile as TAG unless TAG was built from FOLDER as it is now.
build() {
    local tag=$1 dir=$2
    local digest built_from
    digest=$(cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum \
        | sha256sum | cut -d' ' -f1)
    if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
        built_from=$(docker image inspect -f '{{index .Config.Labels "agenthold.source"}}' "$tag" 2>/dev/null || true)
        if [ "$built_from" = "$digest" ]; then
            log "$tag is there"
            return
        fi
        log "$tag was built from other sources than $dir now holds; building it again"
    fi
    local started=$SECONDS
    log "building $tag from $dir/Dockerfile"
    # --pull=false: the base is the local debootstrapped one; there is no registry to ask.
    docker build --pull=false -q --label "agenthold.source=$digest" -t "$tag" "$dir" >/dev/null
    log "built $tag in $((SECONDS - started))s: $(( $(docker image inspect -f '{{.Size}}' "$tag") / 1000000 )) MB"
}

build agenthold-test/clients:bookworm images/clients
