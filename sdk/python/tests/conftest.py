"""Fixtures: a real agenthold server with the fake driver, started once for the session.

The server binary is ``$AGENTHOLD_BIN`` or ``target/debug/agenthold`` of the repository
(build it with ``AGENTHOLD_SKIP_WEB_BUILD=1 cargo build --bin agenthold``). Each test names
its agents uniquely, so tests share the server without seeing each other's agents.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agenthold import Agent, AsyncAgent, AsyncClient, Client, Session

SDK_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = SDK_DIR.parents[1]
#: How long the server may take to answer its first health check.
START_DEADLINE = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique(prefix: str = "t") -> str:
    """An agent name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def target_dir() -> Path:
    """Cargo's target directory: ``$CARGO_TARGET_DIR`` (relative to the repository), else
    the repository's ``target``."""
    return REPO_ROOT / os.environ.get("CARGO_TARGET_DIR", "target")


def server_binary() -> Path:
    path = Path(os.environ.get("AGENTHOLD_BIN") or target_dir() / "debug" / "agenthold")
    if not path.is_file():
        pytest.exit(
            f"the agenthold server binary is missing at {path}: build it with "
            "`AGENTHOLD_SKIP_WEB_BUILD=1 cargo build --bin agenthold` from the repository root, "
            "or set AGENTHOLD_BIN",
            returncode=2,
        )
    return path


def acp_test_agent_path() -> Path:
    """Where the model-free ACP agent (acp-test-agent/) that session tests use as their
    harness is: ``$ACP_TEST_AGENT_BIN``, else the static build of
    ``scripts/build-acp-test-agent.sh``."""
    given = os.environ.get("ACP_TEST_AGENT_BIN")
    return Path(given) if given else target_dir() / "acp-test-agent" / "acp-test-agent"


def build_acp_test_agent() -> str | None:
    """Builds the ACP test agent when it is missing; why that failed, else ``None``."""
    path = acp_test_agent_path()
    if path.is_file():
        return None
    if os.environ.get("ACP_TEST_AGENT_BIN"):
        return f"ACP_TEST_AGENT_BIN={path} is not a file"
    script = REPO_ROOT / "scripts" / "build-acp-test-agent.sh"
    print(f"\nbuilding the ACP test agent ({script})", file=sys.stderr)
    try:
        built = subprocess.run(
            ["bash", str(script)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not run {script}: {e}"
    if built.returncode != 0 or not path.is_file():
        return (
            f"{script} failed (it needs cargo), so the session tests have no harness:\n"
            f"{built.stdout[-2000:]}{built.stderr[-4000:]}"
        )
    return None


#: Why the ACP test agent could not be had, once a session test asked for it.
_ACP_BUILD_ERROR: list[str] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    """Builds the ACP test agent before the tests run (a build takes minutes, longer than one
    test may), when a collected test needs it and it is missing."""
    if any("harness_server" in getattr(i, "fixturenames", ()) for i in session.items):
        error = build_acp_test_agent()
        if error:
            _ACP_BUILD_ERROR.append(error)


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel kills the server if pytest dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Server:
    url: str
    token: str
    process: subprocess.Popen[bytes]
    log: Path
    data_dir: Path

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


#: Presets for tests/test_presets.py; no default one, so other tests get plain agents.
COLD_PRESETS = (
    "presets:\n"
    "  py:\n"
    "    description: for the client's tests\n"
    "    cpus: 1\n"
    "    env: {FROM_PRESET: p}\n"
    '    setup: echo "set up $FROM_PRESET" >> setup-ran\n'
    "  plain: {}\n"
)
#: The fake-driver servers' presets: those, and ``warm``, whose pool keeps one sandbox started
#: ahead of need (tests/test_pool.py).
WARM_PRESET = "warm"
PRESETS = COLD_PRESETS + f"  {WARM_PRESET}: {{warm: 1}}\n"
#: The ``sandbox:`` lines of the fake-driver server. A small output buffer, so that a test
#: can make a process's output leave it (a gap).
FAKE_SANDBOX = "  driver: fake\n  process_output_kb: 64\n"


def _start(
    binary: Path,
    root: Path,
    sandbox: str = FAKE_SANDBOX,
    tunnel_ip: str = "127.0.0.1",
    extra: str = "",
    presets: str = PRESETS,
) -> Server:
    """Starts a server on free ports with ``sandbox`` (lines under ``sandbox:``, indented by
    two spaces), ``presets`` (the ``presets:`` section) and ``extra`` (top-level sections) in
    its config."""
    api, tunnel, previews = free_port(), free_port(), free_port()
    token = secrets.token_hex(16)
    data = root / "data"
    config = root / "config.yaml"
    config.write_text(
        f"server: {{listen: '127.0.0.1:{api}', data_dir: '{data}', admin_token: '{token}',"
        f" previews: {{listen: '127.0.0.1:{previews}'}}}}\n"
        f"sandbox:\n"
        f"  tunnel_listen: '{tunnel_ip}:{tunnel}'\n"
        f"  egress: {{port: 0, dns_port: 0}}\n"
        f"{sandbox}"
        f"{presets}"
        f"{extra}"
    )
    log = root / "server.log"
    env = {**os.environ, "AGENTHOLD_LOG": os.environ.get("AGENTHOLD_TEST_LOG", "warn")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    server = Server(f"http://127.0.0.1:{api}", token, proc, log, data)
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return server  # the caller reads why
        try:
            if httpx.get(f"{server.url}/api/v1/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the server did not answer within {START_DEADLINE} s:\n{server.log_tail()}")


def serve(
    tmp_path_factory: pytest.TempPathFactory,
    sandbox: str = FAKE_SANDBOX,
    tunnel_ip: str = "127.0.0.1",
    extra: str = "",
    presets: str = PRESETS,
) -> Iterator[Server]:
    """A running server for the length of a fixture; stopped (SIGTERM, then SIGKILL) after."""
    binary = server_binary()
    # Another process may take a port between our probe and the server's bind: try again.
    for attempt in range(5):
        root = tmp_path_factory.mktemp(f"server{attempt}")
        srv = _start(binary, root, sandbox, tunnel_ip, extra, presets)
        if srv.process.poll() is None:
            break
        if "already in use" not in srv.log_tail():
            raise RuntimeError(f"the server exited at start:\n{srv.log_tail()}")
    else:
        raise RuntimeError("no free ports for the server after 5 tries")
    yield srv
    srv.process.terminate()
    try:
        srv.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        srv.process.kill()
        srv.process.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory)


def harness_config(agent_bin: Path) -> str:
    """The ``harnesses`` of the session tests' server: the ACP test agent (the default harness,
    by ``sandbox.default_harness``), and once more with no way to reopen a conversation."""
    return (
        "harnesses:\n"
        f"  test: {{command: ['{agent_bin}'], description: the model-free ACP test agent}}\n"
        f"  test-forgetful: {{command: ['{agent_bin}', '--restore', 'none']}}\n"
    )


@pytest.fixture(scope="session")
def harness_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A fake-driver server of its own for the session tests, whose harness is the ACP test
    agent (built before the tests when missing)."""
    if _ACP_BUILD_ERROR:
        pytest.fail(_ACP_BUILD_ERROR[0])
    agent_bin = acp_test_agent_path()
    if not agent_bin.is_file():
        pytest.fail(build_acp_test_agent() or f"no ACP test agent at {agent_bin}")
    sandbox = FAKE_SANDBOX + "  default_harness: test\n"
    yield from serve(tmp_path_factory, sandbox, extra=harness_config(agent_bin.resolve()))


@pytest.fixture(scope="session")
def hclient(harness_server: Server) -> Iterator[Client]:
    with Client(harness_server.url, harness_server.token) as c:
        yield c


@pytest.fixture
async def haclient(harness_server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(harness_server.url, harness_server.token) as c:
        yield c


@pytest.fixture(scope="session")
def hagent(hclient: Client) -> Iterator[Agent]:
    """A running agent on the session tests' server, shared by the tests that only make
    sessions on it."""
    a = hclient.agents.create(unique("chat"), idle_minutes=0)
    yield a
    a.destroy()


@pytest.fixture
def session(hagent: Agent) -> Iterator[Session]:
    """A session of this test's own on the shared agent (deleted after)."""
    s = hagent.sessions.create(title="a test's")
    yield s
    with contextlib.suppress(Exception):
        s.delete()


@pytest.fixture(scope="session")
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, server.token) as c:
        yield c


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, server.token) as c:
        yield c


@pytest.fixture(scope="session")
def agent(client: Client) -> Iterator[Agent]:
    """A running agent shared by tests that only use it (files, commands, processes)."""
    a = client.agents.create(unique("shared"), idle_minutes=0)
    yield a
    a.destroy()


@pytest.fixture
def fresh(client: Client) -> Iterator[Agent]:
    """A running agent of this test's own, for tests that change its state."""
    a = client.agents.create(unique("fresh"), idle_minutes=0)
    yield a
    with contextlib.suppress(Exception):
        a.destroy()


class CuttingProxy:
    """A TCP proxy in front of the server that can cut every open connection at once, to
    break a stream in the middle the way a dropped network does."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.requests: list[bytes] = []
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._open += [conn, upstream]
            threading.Thread(target=self._pipe, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, conn, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client:
                    with self._lock:
                        self.requests.append(data.split(b"\r\n", 1)[0])
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Breaks every connection open now; later ones pass."""
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._stopped = True
        self.listener.close()
        self.cut()


@pytest.fixture
def proxy(server: Server) -> Iterator[CuttingProxy]:
    port = int(server.url.rsplit(":", 1)[1])
    p = CuttingProxy(port)
    yield p
    p.close()


@pytest.fixture
def proxy_h(harness_server: Server) -> Iterator[CuttingProxy]:
    """A :class:`CuttingProxy` in front of the session tests' server."""
    p = CuttingProxy(int(harness_server.url.rsplit(":", 1)[1]))
    yield p
    p.close()


@pytest.fixture
async def aagent(aclient: AsyncClient, agent: Agent) -> AsyncAgent:
    """The shared agent, through the async client."""
    return await aclient.agents.get(agent.id)


@pytest.fixture
async def afresh(aclient: AsyncClient) -> AsyncIterator[AsyncAgent]:
    """A running agent of this test's own, made through the async client."""
    a = await aclient.agents.create(unique("afresh"), idle_minutes=0)
    yield a
    with contextlib.suppress(Exception):
        await a.destroy()
