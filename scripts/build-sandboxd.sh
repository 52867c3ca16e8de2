#!/usr/bin/env bash
# Builds sandboxd as a static binary and copies it to target/sandboxd/sandboxd, where the Docker
# driver looks for it during development (after sandbox.sandboxd_path and the `sandboxd` next to
# the agenthold executable).
#
# sandboxd runs inside every sandbox, whatever image that is, so it must not depend on the
# image's libc. The toolchain here has no musl target, so glibc is linked statically. It has its
# own cargo call with an explicit --target: crt-static without --target breaks proc-macros.
#
# Usage: scripts/build-sandboxd.sh [--debug]   (default: the `sandboxd` profile of Cargo.toml:
# release with LTO, stripped)
set -euo pipefail

cd "$(dirname "$0")/.."
profile=sandboxd
[ "${1:-}" = "--debug" ] && profile=debug
target=x86_64-unknown-linux-gnu

args=(build -p sandboxd --bin sandboxd --target "$target")
[ "$profile" = sandboxd ] && args+=(--profile sandboxd)
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" cargo "${args[@]}"

target_dir="${CARGO_TARGET_DIR:-target}"
src="$target_dir/$target/$profile/sandboxd"
# A dynamic binary here would start only in images with a matching glibc: refuse it.
if readelf -l "$src" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    echo "build-sandboxd: $src is dynamically linked" >&2
    exit 1
fi
mkdir -p "$target_dir/sandboxd"
# Copy to a temporary name and rename, so a running driver never bind-mounts a half-written file.
cp "$src" "$target_dir/sandboxd/.sandboxd.tmp"
mv -f "$target_dir/sandboxd/.sandboxd.tmp" "$target_dir/sandboxd/sandboxd"
echo "build-sandboxd: $target_dir/sandboxd/sandboxd ($profile, static)"
