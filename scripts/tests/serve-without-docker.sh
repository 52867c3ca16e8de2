#!/usr/bin/env bash
# scripts/serve where no Docker engine answers and none can be started: it must say so in one
# line naming what to run, exit non-zero, and build nothing first (it used to build for minutes
# and then fail on the socket). A copy of scripts/serve runs beside stubs: a `docker` that never
# answers, a scripts/docker-setup.sh that cannot start one, and a `cargo` that records a call.
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/bin"
cp scripts/serve "$tmp/scripts/serve"
printf '#!/usr/bin/env bash\necho "docker-setup: cannot start dockerd here" >&2\nexit 1\n' >"$tmp/scripts/docker-setup.sh"
printf '#!/bin/sh\necho "Cannot connect to the Docker daemon" >&2\nexit 1\n' >"$tmp/bin/docker"
printf '#!/bin/sh\ntouch "%s/cargo-ran"\nexit 1\n' "$tmp" >"$tmp/bin/cargo"
chmod +x "$tmp/bin/docker" "$tmp/bin/cargo"

if out="$(PATH="$tmp/bin:$PATH" bash "$tmp/scripts/serve" </dev/null 2>&1)"; then
    echo "scripts/serve went on without a Docker engine:" >&2
    echo "$out" >&2
    exit 1
fi
errors="$(grep -c '^\[serve\] error: ' <<<"$out" || true)"
if [ "$errors" != 1 ] || ! grep -q 'docker-setup.sh' <<<"$(grep '^\[serve\] error: ' <<<"$out")"; then
    echo "scripts/serve should say in one line what to run; it said:" >&2
    echo "$out" >&2
    exit 1
fi
if [ -e "$tmp/cargo-ran" ]; then
    echo "scripts/serve built before it knew Docker was there" >&2
    exit 1
fi
echo "scripts/serve without Docker: one line, nothing built"
