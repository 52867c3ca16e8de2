#!/usr/bin/env bash
# Builds the agenthold server image (Dockerfile) from local builds only, as the machines here
# have no registry: the static server, the static sandboxd (scripts/build-sandboxd.sh) and
# scripts/container-config.yaml, on `FROM scratch`. Idempotent: cargo rebuilds only what changed
# and an unchanged image keeps its id. Reads no stdin; any failure stops it with the reason.
#
# The server is a release build (what you deploy), linked statically against glibc like
# sandboxd: the image has no libc. It has its own cargo call with an explicit --target:
# crt-static without --target breaks proc-macros.
#
# Usage: scripts/build-server-image.sh [TAG]
#   TAG defaults to $AGENTHOLD_SERVER_IMAGE, else agenthold:dev (what tests/it/docker/in_container.rs
#   runs). Needs a Docker engine (scripts/docker-setup.sh starts one).
set -euo pipefail

cd "$(dirname "$0")/.."
tag="${1:-${AGENTHOLD_SERVER_IMAGE:-agenthold:dev}}"
target=x86_64-unknown-linux-gnu
target_dir="${CARGO_TARGET_DIR:-target}"

log() { printf '[build-server-image] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null || die "docker is not installed; run scripts/docker-setup.sh"
command -v readelf >/dev/null || die "readelf is missing (apt-get install binutils)"
docker info >/dev/null 2>&1 || die "no Docker engine answers; run scripts/docker-setup.sh"

started=$SECONDS
bash scripts/build-sandboxd.sh

log "building the static server (release, $target)"
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --target "$target" --bin agenthold
server="$target_dir/$target/release/agenthold"
# A dynamic binary cannot start in an image without a libc: refuse it here, not at `docker run`.
if readelf -l "$server" | grep -q 'Requesting program interpreter'; then
    die "$server is dynamically linked"
fi
built=$SECONDS

# The build context holds exactly what the Dockerfile copies, at the paths it names, wherever
# CARGO_TARGET_DIR put the binaries (and the engine is not sent the gigabytes of target/).
ctx="$(mktemp -d "${TMPDIR:-/tmp}/agenthold-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/target/$target/release" "$ctx/target/sandboxd" "$ctx/scripts"
cp Dockerfile "$ctx/Dockerfile"
cp "$server" "$ctx/target/$target/release/agenthold"
cp "$target_dir/sandboxd/sandboxd" "$ctx/target/sandboxd/sandboxd"
cp scripts/container-config.yaml "$ctx/scripts/container-config.yaml"

old="$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
log "docker build -t $tag"
docker build --quiet --tag "$tag" "$ctx" >/dev/null
new="$(docker image inspect --format '{{.Id}}' "$tag")"
# The image this tag named before is now nameless: remove it, unless something still uses it
# (docker refuses then, and keeps it).
if [ -n "$old" ] && [ "$old" != "$new" ]; then
    docker image rm "$old" >/dev/null 2>&1 || log "kept the previous image ${old#sha256:} (still in use)"
fi
log "$tag: $(docker image inspect --format '{{.Size}}' "$tag" | awk '{ printf "%.1f MB", $1 / 1e6 }'), ${new#sha256:}"
log "took $((SECONDS - started))s (cargo $((built - started))s, docker $((SECONDS - built))s)"
