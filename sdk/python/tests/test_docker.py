"""Smoke tests of the client against a server on the Docker driver: a real container with
sandboxd inside, driven end to end through the client, and code run in the ready image's
ipykernel (``agent.run_code``), which the fake driver cannot start.

It needs a running Docker engine with the test images of ``scripts/docker-setup.sh`` and the
static sandboxd of ``scripts/build-sandboxd.sh``. Without them it is skipped with one line,
unless ``AGENTHOLD_DOCKER_TESTS=require`` (as ``scripts/test`` sets), which makes it fail.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest

from agenthold import AsyncClient, Client, OutputChunk, Result

from .conftest import COLD_PRESETS, REPO_ROOT, Server, serve, unique

IMAGE = "agenthold-test/agent:latest"
#: The ready image, which has Debian's python3-ipykernel (scripts/build-agent-image.sh).
DEV_IMAGE = "agenthold/agent:bookworm"
SANDBOXD = REPO_ROOT / "target" / "sandboxd" / "sandboxd"
#: Creating, waking and stopping a real container on a loaded machine.
WAIT = 180.0


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _missing() -> str | None:
    """Why the Docker driver cannot run here, or None when it can."""
    try:
        if _docker("info").returncode != 0:
            return "no Docker engine answers (`docker info` fails)"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no Docker engine answers ({e})"
    if _docker("image", "inspect", IMAGE).returncode != 0:
        return f"the test image {IMAGE} is missing (run scripts/docker-setup.sh)"
    if not SANDBOXD.is_file():
        return f"the static sandboxd is missing at {SANDBOXD} (run scripts/build-sandboxd.sh)"
    return None


@pytest.fixture(scope="module")
def docker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    why = _missing()
    if why is not None:
        if os.environ.get("AGENTHOLD_DOCKER_TESTS") == "require":
            pytest.fail(f"the Docker smoke test needs Docker: {why}")
        pytest.skip(f"skipping the Docker smoke test: {why}")
    prefix = f"ahpy{secrets.token_hex(3)}"
    # A /24 of the pool of its own, away from the Rust Docker tests' 10.213.100-254.
    pool = f"10.213.{10 + secrets.randbelow(80)}.0/24"
    sandbox = (
        "  driver: docker\n"
        f"  default_image: {IMAGE}\n"
        "  default_cpus: 1\n"
        "  default_memory_mb: 256\n"
        f"  sandboxd_path: {SANDBOXD}\n"
        f"  docker: {{name_prefix: {prefix}, network_pool: {pool}}}\n"
    )
    # Sandboxes dial the tunnel on their bridge's gateway: it listens on every address. No warm
    # pool: its entry's container would be one more than the test counts, and a server keeps
    # its entries across a restart (docs/api.md), so it would be left behind.
    servers = serve(tmp_path_factory, sandbox, tunnel_ip="0.0.0.0", presets=COLD_PRESETS)
    yield from ((srv, prefix) for srv in servers)
    # Whatever the test left is removed, and then it is a failure.
    left = _docker("ps", "-aq", "--filter", f"label=agenthold.prefix={prefix}").stdout.split()
    if left:
        _docker("rm", "-f", *left)
        pytest.fail(f"the Docker smoke test left containers behind: {left}")


def test_an_agent_on_docker_runs_commands_keeps_files_and_sleeps_and_wakes(
    docker_server: tuple[Server, str],
) -> None:
    srv, prefix = docker_server
    with Client(srv.url, srv.token) as ah:
        assert ah.health().driver == "docker"
        agent = ah.agents.create(unique("py"), idle_minutes=0, wait=True, timeout=WAIT)
        try:
            assert agent.state == "running"
            containers = _docker("ps", "-q", "--filter", f"label=agenthold.prefix={prefix}")
            assert len(containers.stdout.split()) == 1, "one running container for the agent"

            r = agent.commands.run("uname -s; echo to-stderr >&2; exit 3", timeout=WAIT)
            assert (r.stdout, r.stderr, r.exit_code) == ("Linux\n", "to-stderr\n", 3)

            payload = os.urandom(3 << 20)
            agent.files.make_dir("smoke")
            agent.files.write("smoke/data.bin", payload)
            assert agent.files.read("smoke/data.bin", format="bytes") == payload
            assert [e.name for e in agent.files.list("smoke")] == ["data.bin"]
            r = agent.commands.run("sha256sum /home/agent/smoke/data.bin", timeout=WAIT)
            assert r.exit_code == 0 and len(r.stdout.split()[0]) == 64

            job = agent.commands.run(
                "for i in 1 2 3; do echo line-$i; done", background=True, tag="smoke"
            )
            assert job.wait(timeout=WAIT).exit_code == 0
            out = b"".join(c.data for c in job.output(follow=False) if isinstance(c, OutputChunk))
            assert out == b"line-1\nline-2\nline-3\n"

            # Asleep, the container stops; the home is still there when the agent wakes.
            agent.stop(wait=True, timeout=WAIT)
            assert agent.refresh().state == "sleeping"
            running = _docker("ps", "-q", "--filter", f"label=agenthold.prefix={prefix}")
            assert running.stdout.split() == [], "the container still runs while asleep"
            agent.start(wait=True, timeout=WAIT)
            assert agent.files.read("smoke/data.bin", format="bytes") == payload
        finally:
            agent.destroy(wait=True, timeout=WAIT)
        left = _docker("ps", "-aq", "--filter", f"label=agenthold.prefix={prefix}")
        assert left.stdout.split() == [], "the container outlived its agent"


#: A 1x1 PNG made from bytes (no matplotlib), displayed, and its base64 printed to compare.
PNG = r"""
import base64, struct, zlib
from IPython.display import Image, display
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b''))
display(Image(data=png))
print(base64.b64encode(png).decode())
"""


def test_run_code_keeps_state_shows_results_and_errors_and_streams(
    docker_server: tuple[Server, str],
) -> None:
    srv, _ = docker_server
    if _docker("image", "inspect", DEV_IMAGE).returncode != 0:
        why = f"the ready image {DEV_IMAGE} is missing (run scripts/build-agent-image.sh)"
        if os.environ.get("AGENTHOLD_DOCKER_TESTS") == "require":
            pytest.fail(why)
        pytest.skip(why)
    with Client(srv.url, srv.token) as ah:
        agent = ah.agents.create(
            unique("pycode"),
            image=DEV_IMAGE,
            memory_mb=512,
            idle_minutes=0,
            wait=True,
            timeout=WAIT,
        )
        try:
            first = agent.run_code("x = 41\nprint('hi')\nx + 1", timeout=WAIT)
            assert (first.text, first.stdout, first.error, first.execution_count) == (
                "42",
                "hi\n",
                None,
                1,
            )
            assert agent.run_code("x * 2", timeout=WAIT).text == "82", "x was kept"

            png = agent.run_code(PNG, timeout=WAIT)
            want = base64.b64decode(png.stdout.strip())
            (image,) = [r for r in png.results if r.png is not None]
            assert image.bytes("image/png") == want and want.startswith(b"\x89PNG")

            err = agent.run_code("def f():\n    return 1 / 0\nf()", timeout=WAIT)
            assert err.error is not None
            assert (err.error.name, err.error.value) == ("ZeroDivisionError", "division by zero")
            assert "return 1 / 0" in err.error.traceback and "\x1b" not in err.error.traceback
            assert err.results == ()

            # A stream: each piece reaches its callback, and the execution is the same as an
            # answer at the end would be.
            seen: list[tuple[str, object]] = []
            streamed = agent.run_code(
                "import sys\nprint('out')\nprint('err', file=sys.stderr)\nx",
                on_stdout=lambda t: seen.append(("stdout", t)),
                on_stderr=lambda t: seen.append(("stderr", t)),
                on_result=lambda r: seen.append(("result", r)),
                timeout=WAIT,
            )
            # The kernel flushes each stream on its own: the order within one is kept.
            assert "".join(str(v) for k, v in seen if k == "stdout") == "out\n"
            assert "".join(str(v) for k, v in seen if k == "stderr") == "err\n"
            assert seen[-1] == ("result", Result({"text/plain": "41"}))
            assert (streamed.stdout, streamed.stderr, streamed.text) == ("out\n", "err\n", "41")
            assert streamed.execution_count is not None and streamed.execution_count > 1

            # A context of its own has its own variables; a restart forgets them.
            ctx = agent.code.contexts.create()
            assert agent.run_code("y = 5", context=ctx, timeout=WAIT).error is None
            missing = agent.run_code("x", context=ctx, timeout=WAIT).error
            assert missing is not None and missing.name == "NameError"
            assert {c.id for c in agent.code.contexts.list()} == {"default", ctx.id}
            restarted = agent.code.contexts.restart(ctx)
            assert restarted.id == ctx.id and restarted.execution_count == 0
            gone = agent.run_code("y", context=ctx.id, timeout=WAIT).error
            assert gone is not None and gone.name == "NameError"
            assert agent.run_code("x", timeout=WAIT).text == "41", "default was not restarted"
            agent.code.contexts.delete(ctx)
            assert [c.id for c in agent.code.contexts.list()] == ["default"]

            async def through_async() -> str | None:
                async with AsyncClient(srv.url, srv.token) as aah:
                    a = await aah.agents.get(agent.id)
                    chunks: list[str] = []

                    async def keep(t: str) -> None:
                        chunks.append(t)

                    e = await a.run_code("print(x)\nx + 1", on_stdout=keep, timeout=WAIT)
                    assert chunks == ["41\n"]
                    return e.text

            assert asyncio.run(through_async()) == "42"
        finally:
            agent.destroy(wait=True, timeout=WAIT)
