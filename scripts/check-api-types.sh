#!/usr/bin/env bash
# The web UI's TypeScript API types (web/src/api.gen.ts) are generated from the OpenAPI document
# with openapi-typescript (pinned in web/package.json). This regenerates them from
# `agenthold openapi` (the document of a server on the default config) into a temporary file and
# fails when they differ from the checked-in ones. With --write, it updates web/src/api.gen.ts
# instead (`npm run gen:api` in web/ does that).
#
# Environment: AGENTHOLD_BIN, the binary (default target/debug/agenthold, built when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${AGENTHOLD_BIN:-$ROOT/target/debug/agenthold}
GENERATED=$ROOT/web/src/api.gen.ts
WRITE=0
case "${1:-}" in
    --write) WRITE=1 ;;
    "") ;;
    *) echo "usage: $0 [--write]" >&2; exit 2 ;;
esac

if [[ ! -x $BIN ]]; then
    echo "check-api-types.sh: building $BIN" >&2
    (cd "$ROOT" && AGENTHOLD_SKIP_WEB_BUILD=${AGENTHOLD_SKIP_WEB_BUILD:-1} cargo build --bin agenthold) </dev/null
fi
if [[ ! -x $ROOT/web/node_modules/.bin/openapi-typescript ]]; then
    (cd "$ROOT/web" && npm ci --no-audit --no-fund) </dev/null
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agenthold-api-types.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# No config file: the defaults, so the output does not depend on this machine.
(cd "$WORK" && env -u AGENTHOLD_ADMIN_TOKEN "$BIN" openapi) >"$WORK/openapi.json" </dev/null
(cd "$ROOT/web" && node_modules/.bin/openapi-typescript "$WORK/openapi.json" -o "$WORK/api.gen.ts" --silent) </dev/null
# The document's version would make every release look like drift.
sed -i.bak -e '/^ \* @version /d' "$WORK/api.gen.ts" && rm -f "$WORK/api.gen.ts.bak"
{
    printf '// Generated from the OpenAPI document by scripts/check-api-types.sh (`npm run gen:api`).\n'
    printf '// Do not edit: change the server, then regenerate.\n'
    cat "$WORK/api.gen.ts"
} >"$WORK/api.gen.with-header.ts"

if [[ $WRITE == 1 ]]; then
    cp "$WORK/api.gen.with-header.ts" "$GENERATED"
    echo "check-api-types.sh: wrote ${GENERATED#"$ROOT"/}" >&2
    exit 0
fi
if ! diff -u "$GENERATED" "$WORK/api.gen.with-header.ts"; then
    echo "check-api-types.sh: web/src/api.gen.ts is stale: run scripts/check-api-types.sh --write (or npm run gen:api in web/)" >&2
    exit 1
fi
echo "check-api-types.sh: web/src/api.gen.ts matches the OpenAPI document" >&2
