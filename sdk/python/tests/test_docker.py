"""One smoke test of the client against a server on the Docker driver: a real container with
sandboxd inside, driven end to end through the client.

It needs a running Docker engine with the test images of ``scripts/docker-setup.sh`` and the
static sandboxd of ``scripts/build-sandboxd.sh``. Without them it is skipped with one line,
unless ``AGENTHOLD_DOCKER_TESTS=require`` (as ``scripts/test`` sets), which makes it fail.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest

from agenthold import Client, OutputChunk

from .conftest import REPO_ROOT, Server, serve, unique

IMAGE = "agenthold-test/agent:latest"
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
    # Sandboxes dial the tunnel on their bridge's gateway: it listens on every address.
    yield from ((srv, prefix) for srv in serve(tmp_path_factory, sandbox, tunnel_ip="0.0.0.0"))
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
