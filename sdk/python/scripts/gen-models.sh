#!/usr/bin/env bash
# The Python client's wire types (src/agenthold/_wire.py: one TypedDict per schema, in the API's
# own camelCase) are generated from the OpenAPI document with datamodel-code-generator (pinned in
# scripts/gen-models.requirements.txt), as the web UI's are with openapi-typescript. This
# regenerates them from `agenthold openapi` (the document of a server on the default config) and
# writes the file; with --check it writes nothing and fails when the checked-in file differs. The
# client's models (models.py) are held to these types by tests/test_models.py.
#
#   bash sdk/python/scripts/gen-models.sh [--check]
#
# Environment: AGENTHOLD_BIN, the binary (default $CARGO_TARGET_DIR/debug/agenthold, the target
# directory being target/ unless set; built when missing); AGENTHOLD_GEN_VENV, the virtual
# environment the generator is installed in (default sdk/python/.venv-gen, made when missing);
# PYTHON, the interpreter that makes it (python3).
set -euo pipefail
exec </dev/null

SDK="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$SDK/../.." && pwd)"
TARGET=${CARGO_TARGET_DIR:-target}
[[ $TARGET == /* ]] || TARGET=$ROOT/$TARGET
BIN=${AGENTHOLD_BIN:-$TARGET/debug/agenthold}
VENV=${AGENTHOLD_GEN_VENV:-$SDK/.venv-gen}
REQUIREMENTS=$SDK/scripts/gen-models.requirements.txt
GENERATED=$SDK/src/agenthold/_wire.py
CHECK=0
case "${1:-}" in
    --check) CHECK=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [[ ! -x $BIN ]]; then
    echo "gen-models.sh: building $BIN" >&2
    (cd "$ROOT" && AGENTHOLD_SKIP_WEB_BUILD=${AGENTHOLD_SKIP_WEB_BUILD:-1} cargo build --bin agenthold)
fi
# The generator is reinstalled whenever its pins change.
if ! cmp -s "$REQUIREMENTS" "$VENV/installed-requirements.txt"; then
    rm -rf "$VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
    cp "$REQUIREMENTS" "$VENV/installed-requirements.txt"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agenthold-py-models.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# No config file: the defaults, so the output does not depend on this machine.
(cd "$WORK" && env -u AGENTHOLD_ADMIN_TOKEN "$BIN" openapi) >"$WORK/openapi.json"
# TypedDicts need nothing at run time beyond typing_extensions, which only mypy and the tests
# import this module with: the package itself stays without dependencies for its models.
"$VENV/bin/datamodel-codegen" \
    --input "$WORK/openapi.json" --input-file-type openapi \
    --output-model-type typing.TypedDict --target-python-version 3.10 \
    --use-standard-collections --use-union-operator --enum-field-as-literal all \
    --use-schema-description --use-field-description --use-double-quotes \
    --formatters builtin --disable-timestamp \
    --custom-file-header "# Generated from the OpenAPI document by sdk/python/scripts/gen-models.sh.
# Do not edit: change the server, then regenerate." \
    --output "$WORK/_wire.py"

if [[ $CHECK == 0 ]]; then
    cp "$WORK/_wire.py" "$GENERATED"
    echo "gen-models.sh: wrote ${GENERATED#"$ROOT"/}" >&2
    exit 0
fi
if ! diff -u "$GENERATED" "$WORK/_wire.py"; then
    echo "gen-models.sh: sdk/python/src/agenthold/_wire.py is stale: run sdk/python/scripts/gen-models.sh" >&2
    exit 1
fi
echo "gen-models.sh: sdk/python/src/agenthold/_wire.py matches the OpenAPI document" >&2
