#!/usr/bin/env bash
# Tests the Python client against a real agenthold server (the fake driver), from a fresh
# checkout: makes a virtual environment (sdk/python/.venv, or $AGENTHOLD_SDK_VENV), installs
# the package with its test extras, builds the server if cargo is there, lints and type-checks
# the package and runs pytest. Exits non-zero on any failure; reads no standard input.
#
#   bash sdk/python/scripts/test.sh [pytest arguments…]
#
# Needs python3 (3.10 or newer) with a working `python3 -m venv`; on Debian that is the
# python3-venv package, which this installs when it is missing and we run as root. The server
# binary is $AGENTHOLD_BIN, else $CARGO_TARGET_DIR/debug/agenthold (target/ by default; built
# here when cargo is installed). The session tests' harness, the model-free ACP test agent, is
# $ACP_TEST_AGENT_BIN, else $CARGO_TARGET_DIR/acp-test-agent/acp-test-agent (built here by
# scripts/build-acp-test-agent.sh when cargo is installed).
set -euo pipefail
exec </dev/null

SDK="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$SDK/../.." && pwd)"
TARGET="$(cd "$ROOT" && mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${AGENTHOLD_SDK_VENV:-$SDK/.venv}"

step() { printf '\n==> %s\n' "$*"; }
die() { echo "sdk/python/scripts/test.sh: $*" >&2; exit 1; }

step "Python"
command -v "$PYTHON" >/dev/null || die "$PYTHON is not installed"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "Python 3.10 or newer is needed ($("$PYTHON" --version 2>&1))"
"$PYTHON" --version

venv_works() {
    local d rc
    d="$(mktemp -d)"
    "$PYTHON" -m venv "$d/v" >/dev/null 2>&1 && rc=0 || rc=$?
    rm -rf "$d"
    return "$rc"
}
if ! venv_works; then
    # Debian and Ubuntu ship venv's ensurepip apart, in python3-venv.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        step "installing python3-venv (python3 -m venv does not work)"
        ver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq python3-venv >/dev/null ||
            apt-get install -y -qq "python${ver}-venv" >/dev/null
        venv_works || die "python3 -m venv still fails after installing python3-venv"
    else
        die "python3 -m venv does not work: install python3-venv (apt-get install python3-venv)"
    fi
fi

step "virtual environment $VENV"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install -q -e "$SDK[test]"

step "server binary"
if [ -n "${AGENTHOLD_BIN:-}" ]; then
    [ -x "$AGENTHOLD_BIN" ] || die "AGENTHOLD_BIN=$AGENTHOLD_BIN is not an executable"
    echo "using $AGENTHOLD_BIN"
elif command -v cargo >/dev/null; then
    (cd "$ROOT" && AGENTHOLD_SKIP_WEB_BUILD=1 cargo build --bin agenthold)
    export AGENTHOLD_BIN="$TARGET/debug/agenthold"
elif [ -x "$TARGET/debug/agenthold" ]; then
    echo "cargo is not installed: using the existing $TARGET/debug/agenthold"
    export AGENTHOLD_BIN="$TARGET/debug/agenthold"
else
    die "no server binary: install Rust (cargo) or set AGENTHOLD_BIN"
fi

step "ACP test agent (the session tests' harness)"
if [ -n "${ACP_TEST_AGENT_BIN:-}" ]; then
    [ -x "$ACP_TEST_AGENT_BIN" ] || die "ACP_TEST_AGENT_BIN=$ACP_TEST_AGENT_BIN is not an executable"
    echo "using $ACP_TEST_AGENT_BIN"
elif command -v cargo >/dev/null; then
    (cd "$ROOT" && bash scripts/build-acp-test-agent.sh)
    export ACP_TEST_AGENT_BIN="$TARGET/acp-test-agent/acp-test-agent"
elif [ -x "$TARGET/acp-test-agent/acp-test-agent" ]; then
    export ACP_TEST_AGENT_BIN="$TARGET/acp-test-agent/acp-test-agent"
    echo "cargo is not installed: using the existing $ACP_TEST_AGENT_BIN"
else
    die "no ACP test agent: install Rust (cargo) or set ACP_TEST_AGENT_BIN"
fi

cd "$SDK"
step "lint and type check (ruff, mypy --strict)"
"$VENV/bin/python" -m ruff check src tests
"$VENV/bin/python" -m ruff format --check src tests
"$VENV/bin/python" -m mypy

step "pytest"
"$VENV/bin/python" -m pytest tests "$@"
