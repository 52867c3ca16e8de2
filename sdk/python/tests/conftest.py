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

from agenthold import Agent, AsyncAgent, AsyncClient, Client

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


def server_binary() -> Path:
    path = Path(os.environ.get("AGENTHOLD_BIN") or REPO_ROOT / "target" / "debug" / "agenthold")
    if not path.is_file():
        pytest.exit(
            f"the agenthold server binary is missing at {path}: build it with "
            "`AGENTHOLD_SKIP_WEB_BUILD=1 cargo build --bin agenthold` from the repository root, "
            "or set AGENTHOLD_BIN",
            returncode=2,
        )
    return path


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
PRESETS = (
    "presets:\n"
    "  py:\n"
    "    description: for the client's tests\n"
    "    cpus: 1\n"
    "    env: {FROM_PRESET: p}\n"
    '    setup: echo "set up $FROM_PRESET" >> setup-ran\n'
    "  plain: {}\n"
)
#: The ``sandbox:`` lines of the fake-driver server. A small output buffer, so that a test
#: can make a process's output leave it (a gap).
FAKE_SANDBOX = "  driver: fake\n  process_output_kb: 64\n"


def _start(
    binary: Path, root: Path, sandbox: str = FAKE_SANDBOX, tunnel_ip: str = "127.0.0.1"
) -> Server:
    """Starts a server on free ports with ``sandbox`` (lines under ``sandbox:``, indented by
    two spaces) in its config."""
    api, tunnel = free_port(), free_port()
    token = secrets.token_hex(16)
    data = root / "data"
    config = root / "config.yaml"
    config.write_text(
        f"server: {{listen: '127.0.0.1:{api}', data_dir: '{data}', admin_token: '{token}'}}\n"
        f"sandbox:\n"
        f"  tunnel_listen: '{tunnel_ip}:{tunnel}'\n"
        f"  egress: {{port: 0, dns_port: 0}}\n"
        f"{sandbox}"
        f"{PRESETS}"
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
) -> Iterator[Server]:
    """A running server for the length of a fixture; stopped (SIGTERM, then SIGKILL) after."""
    binary = server_binary()
    # Another process may take a port between our probe and the server's bind: try again.
    for attempt in range(5):
        root = tmp_path_factory.mktemp(f"server{attempt}")
        srv = _start(binary, root, sandbox, tunnel_ip)
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
