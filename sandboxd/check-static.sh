#!/bin/sh
# Proves sandboxd makes no glibc NSS calls (getpwnam, getgrgid, initgroups, getaddrinfo, ...),
# which in a static binary may load the image's shared NSS modules: undefined behaviour.
#
# It links sandboxd statically with GNU ld, which (unlike rust-lld) warns
# "Using 'X' in statically linked applications requires at runtime the shared libraries".
# Two facts shape the check:
#   - cargo hides linker output unless the `linker_messages` lint is raised (-W linker-messages);
#   - GNU ld warns for every such function in any object file it pulls in, even when nothing
#     live calls it (nix compiles User::from_name next to setsid; std's socket module holds
#     getaddrinfo). --gc-sections then drops the dead code.
# So every warned symbol is looked up in the final binary: one that survived the garbage
# collection is really reachable, and the check fails.
set -eu
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-target}/check-static"
bin="$target_dir/x86_64-unknown-linux-gnu/release/sandboxd"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# A separate target dir keeps these flags from invalidating the normal builds. The binary is
# removed first so the link (and its warnings) really happens.
rm -f "$bin"
if ! RUSTFLAGS='-C target-feature=+crt-static -C linker-features=-lld -W linker-messages' \
    cargo build -p sandboxd --release --target x86_64-unknown-linux-gnu \
    --target-dir "$target_dir" --bin sandboxd >"$log" 2>&1; then
    cat "$log" >&2
    echo "check-static: the build failed" >&2
    exit 1
fi

if ! file "$bin" | grep -Eq "static-pie linked|statically linked"; then
    file "$bin" >&2
    echo "check-static: $bin is not a static binary" >&2
    exit 1
fi
if ! command -v nm >/dev/null 2>&1; then
    echo "check-static: nm (binutils) is needed" >&2
    exit 1
fi
symbols="$(nm "$bin" | awk '{print $NF}')"
if ! printf '%s\n' "$symbols" | grep -qx main; then
    echo "check-static: $bin has no symbol table (stripped?); cannot check it" >&2
    exit 1
fi

warned="$(grep -o "Using '[A-Za-z0-9_]*' in statically linked" "$log" | cut -d"'" -f2 | sort -u)"
# Checked even without a warning, in case a future linker stops printing them.
always="getpwnam getpwnam_r getpwuid getpwuid_r getpwent getgrnam getgrnam_r getgrgid getgrgid_r
getgrouplist initgroups getaddrinfo getnameinfo gethostbyname gethostbyname_r gethostbyname2_r
getservbyname getservbyname_r"
failed=0
for sym in $(printf '%s\n%s\n' "$warned" "$always" | tr ' ' '\n' | sort -u); do
    if printf '%s\n' "$symbols" | grep -qx "$sym"; then
        echo "check-static: sandboxd links $sym (an NSS call is reachable)" >&2
        grep "Using '$sym'" "$log" >&2 || true
        failed=1
    elif printf '%s\n' "$warned" | grep -qx "$sym"; then
        echo "check-static: note: $sym is referenced only by dead code (removed at link time)"
    fi
done
if [ "$failed" -ne 0 ]; then
    exit 1
fi
echo "check-static: ok, no NSS call in $bin"
