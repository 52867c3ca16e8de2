#!/usr/bin/env bash
# Schemathesis over the OpenAPI document (issue #15): starts a fake-driver server on free
# loopback ports in a temporary directory, fuzzes every operation of /api/v1/openapi.json with
# all checks, and fails on any failure. The document must be exact: every request it allows is
# accepted, every request it forbids is refused, every status is documented.
#
# Left out of the fuzzing, because with the fake driver a sandbox runs commands on this machine
# as the server's user: `POST …/exec`, `POST …/processes` (start), `GET …/terminal` and `POST …/code`
# (Python in a kernel). Their bad input is covered by tests/it/exec.rs, tests/it/processes.rs,
# tests/it/terminal_sessions.rs and tests/it/code.rs. Every
# file operation is confined to the fake sandbox's home, under the temporary directory
# (sandboxd refuses any path outside it, `..`, and symbolic links that lead out).
#
# Environment:
#   AGENTHOLD_BIN     the server binary (default target/debug/agenthold, built when missing)
#   ST_MAX_EXAMPLES   examples per operation and phase (default 25)
#   ST_SEED           the seed (default 1; `random` for a new one each run, as scripts/test asks:
#                     this script prints it first, and ST_SEED=that-number repeats the run)
#   ST_VENV           where schemathesis is installed (default ~/.cache/agenthold/schemathesis-VERSION)
#   ST_KEEP           1: keep the temporary directory (server log, HAR of every request)
set -euo pipefail

ST_VERSION=4.32.5
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${AGENTHOLD_BIN:-$ROOT/target/debug/agenthold}
MAX_EXAMPLES=${ST_MAX_EXAMPLES:-25}
SEED=${ST_SEED:-1}
[[ $SEED == random ]] && SEED=$(( $(od -An -N4 -tu4 /dev/urandom) ))
VENV=${ST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/agenthold/schemathesis-$ST_VERSION}
TOKEN=st-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

say() { printf 'schemathesis.sh: %s\n' "$*" >&2; }
say "seed $SEED (ST_SEED=$SEED repeats this run)"

command -v python3 >/dev/null || { say "python3 is needed"; exit 1; }

if [[ ! -x $BIN ]]; then
    say "building $BIN"
    (cd "$ROOT" && AGENTHOLD_SKIP_WEB_BUILD=${AGENTHOLD_SKIP_WEB_BUILD:-1} cargo build --bin agenthold) </dev/null
fi

# Schemathesis, pinned, in a virtual environment of its own.
if [[ $("$VENV/bin/st" --version 2>/dev/null || true) != *"$ST_VERSION"* ]]; then
    say "installing schemathesis $ST_VERSION into $VENV"
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
            py=$(python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$py-venv" </dev/null ||
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv </dev/null
        else
            say "python3's venv module is missing: install python3-venv"
            exit 1
        fi
    fi
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION" </dev/null
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agenthold-schemathesis.XXXXXX")
SERVER_PID=
cleanup() {
    local code=$?
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ ${ST_KEEP:-0} == 1 || $code != 0 ]]; then
        say "kept $WORK (server.log, requests.har)"
    else
        rm -rf "$WORK"
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Free loopback ports: bound to port 0, then let go (the server takes them a moment later).
read -r API_PORT TUNNEL_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')
BASE=http://127.0.0.1:$API_PORT

# The fake driver; a home of exactly 64 MiB, so that no `diskMb` a request may carry (64 to 64)
# can shrink one: that refusal depends on the agent, which no schema can say.
cat >"$WORK/config.yaml" <<EOF
server:
  listen: 127.0.0.1:$API_PORT
  data_dir: $WORK/data
  admin_token: $TOKEN
  previews: {listen: 127.0.0.1:0}
sandbox:
  driver: fake
  tunnel_listen: 127.0.0.1:$TUNNEL_PORT
  default_disk_mb: 64
  max_disk_mb: 64
  egress: {port: 0, dns_port: 0}
EOF

AGENTHOLD_LOG=${AGENTHOLD_LOG:-warn} "$BIN" serve --config "$WORK/config.yaml" \
    >"$WORK/server.log" 2>&1 </dev/null &
SERVER_PID=$!

# Waits for health, makes three running agents and prints their ids.
IDS=$(python3 - "$BASE" "$TOKEN" "$SERVER_PID" <<'EOF'
import json, os, sys, time, urllib.request
base, token, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])

def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)

deadline = time.monotonic() + 60
while True:
    try:
        if call("GET", "/api/v1/health")["status"] == "ok":
            break
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("the server exited before it answered")
    if time.monotonic() > deadline:
        sys.exit("the server did not answer /api/v1/health within 60 s")
    time.sleep(0.2)
ids = [call("POST", "/api/v1/agents", {"name": f"fuzz-{i}"})["id"] for i in range(3)]
while any(call("GET", f"/api/v1/agents/{i}")["state"] != "running" for i in ids):
    if time.monotonic() > deadline:
        sys.exit("the agents did not start within 60 s")
    time.sleep(0.2)
print(json.dumps(ids))
EOF
) || { say "the server did not come up:"; tail -n 50 "$WORK/server.log" >&2; exit 1; }

# The operations take these agents' ids more often than not, so the fuzzing reaches past `404`;
# the links of `201` from POST /api/v1/agents lead the stateful phase to its own agents.
cat >"$WORK/schemathesis.toml" <<EOF
[dictionaries.agents]
values = $IDS

[parameters]
"path.id" = { dictionary = "agents", probability = 0.6 }

# A file route's path can name what its operation cannot take now (a directory where a file is
# wanted, a directory that is not empty): that is 409, a conflict with the current state, which
# positive_data_acceptance accepts as it is.
[[operations]]
include-path-regex = "/fs/"
checks.use_after_free.enabled = false

# DELETE /api/v1/agents/{id} answers 202: the agent is destroyed in the background, and until it
# is gone it and what is under it (its previews, processes, sessions, files) still answer, as
# "destroying". A read then is not a deleted resource served again. (The file routes above say
# the same: the first block that matches an operation is the one that applies.)
[[operations]]
include-path-regex = "^/api/v1/agents/[{]id[}]"
checks.use_after_free.enabled = false
EOF

cd "$WORK"
status=0
# ensure_resource_availability (ST302) is off: its stateful phase links a new agent to the file
# routes, whose 404 is about the path named (a file that is not there), not the agent; the
# per-operation setting does not reach that phase. GET /api/v1/agents/{id} after a create is
# tested in tests/it.
"$VENV/bin/st" --config-file "$WORK/schemathesis.toml" run "$BASE/api/v1/openapi.json" \
    --header "Authorization: Bearer $TOKEN" \
    --checks all \
    --exclude-checks ensure_resource_availability \
    --max-examples "$MAX_EXAMPLES" \
    --exclude-path-regex '/exec$|/terminal$|/code$' \
    --exclude-name 'POST /api/v1/agents/{id}/processes' \
    --seed "$SEED" \
    --report har --report-har-path "$WORK/requests.har" \
    --no-color </dev/null || status=$?

# Belt and braces: nothing may have asked a sandbox to run a command.
python3 - "$WORK/requests.har" <<'EOF' || status=1
import json, re, sys
from urllib.parse import urlparse
ran = [e["request"]["method"] + " " + urlparse(e["request"]["url"]).path
       for e in json.load(open(sys.argv[1]))["log"]["entries"]
       if re.search(r"/(exec|terminal|code)$", urlparse(e["request"]["url"]).path)
       or (e["request"]["method"] == "POST" and urlparse(e["request"]["url"]).path.endswith("/processes"))]
if ran:
    sys.exit("schemathesis.sh: requests that run commands were sent: " + ", ".join(sorted(set(ran))))
EOF

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    say "the server died during the run:"
    tail -n 50 "$WORK/server.log" >&2
    status=1
fi
[[ $status == 0 ]] || say "failed with seed $SEED: ST_SEED=$SEED bash scripts/schemathesis.sh repeats it"
exit "$status"
