#!/usr/bin/env bash
# Builds acp-test-agent (acp-test-agent/: the model-free ACP agent the tests drive in place of
# a coding agent) as a static binary and copies it to target/acp-test-agent/acp-test-agent, from
# where tests copy it into sandboxes.
#
# Like sandboxd it runs inside sandboxes of any image, so it must not depend on the image's libc:
# glibc is linked statically (the toolchain here has no musl target), in a cargo call of its own
# with an explicit --target (crt-static without --target breaks proc-macros). A static glibc binary
# must make no NSS calls (getpwnam, getaddrinfo, ...); the agent needs no network and reads $HOME
# from the environment only, and this script checks that no such symbol made it into the binary.
#
# Usage: scripts/build-acp-test-agent.sh [--debug]   (default: the `test-agent` profile of
# Cargo.toml: release, debug info stripped, symbols kept for the check)
set -euo pipefail

cd "$(dirname "$0")/.."
profile=test-agent
[ "${1:-}" = "--debug" ] && profile=debug
target=x86_64-unknown-linux-gnu

args=(build -p acp-test-agent --bin acp-test-agent --target "$target")
[ "$profile" = test-agent ] && args+=(--profile test-agent)
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" cargo "${args[@]}"

target_dir="${CARGO_TARGET_DIR:-target}"
src="$target_dir/$target/$profile/acp-test-agent"
# A dynamic binary here would start only in images with a matching glibc: refuse it.
if readelf -l "$src" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    echo "build-acp-test-agent: $src is dynamically linked" >&2
    exit 1
fi
# Symbols that survived the linker's garbage collection are reachable: none may be an NSS call,
# which in a static binary may load the image's shared NSS modules.
if command -v nm >/dev/null 2>&1; then
    symbols="$(nm "$src" 2>/dev/null | awk '{print $NF}')"
    for sym in getpwnam getpwnam_r getpwuid getpwuid_r getpwent getgrnam getgrnam_r getgrgid \
        getgrgid_r getgrouplist initgroups getaddrinfo getnameinfo gethostbyname \
        gethostbyname_r gethostbyname2_r getservbyname getservbyname_r; do
        if printf '%s\n' "$symbols" | grep -qx "$sym"; then
            echo "build-acp-test-agent: $src links $sym (an NSS call is reachable)" >&2
            exit 1
        fi
    done
else
    echo "build-acp-test-agent: no nm (binutils); the NSS check is skipped" >&2
fi
mkdir -p "$target_dir/acp-test-agent"
# Copy to a temporary name and rename, so nothing ever copies a half-written file into a sandbox.
cp "$src" "$target_dir/acp-test-agent/.acp-test-agent.tmp"
mv -f "$target_dir/acp-test-agent/.acp-test-agent.tmp" "$target_dir/acp-test-agent/acp-test-agent"
echo "build-acp-test-agent: $target_dir/acp-test-agent/acp-test-agent ($profile, static)"
