"""Server errors arrive as the exception of their code, with the server's message and field."""

from __future__ import annotations

import pytest

from agenthold import (
    Agent,
    AgentholdError,
    AsyncAgent,
    AsyncClient,
    Client,
    Conflict,
    InvalidRequest,
    NetworkError,
    NotFound,
    TooLarge,
    Unauthorized,
)

from .conftest import Server, free_port, unique

HUGE_ARG = "x" * 200_000  # over Linux's 131071 bytes per argument


def test_not_found(client: Client, agent: Agent) -> None:
    gone = Agent(client._t, agent.info.__class__(id="nosuchagent1", name="x", state="running"))
    with pytest.raises(NotFound) as info:
        gone.refresh()
    assert info.value.status == 404 and info.value.code == "not_found" and info.value.message
    with pytest.raises(NotFound):
        agent.files.read(f"{unique('missing')}.txt")
    with pytest.raises(NotFound):
        agent.commands.get("no-such-tag")


def test_conflict_carries_its_field(client: Client, agent: Agent) -> None:
    with pytest.raises(Conflict) as info:
        client.agents.create(agent.name)
    assert info.value.status == 409 and info.value.field == "name"
    assert agent.name in info.value.message


def test_conflict_from_the_agents_state(client: Client, fresh: Agent) -> None:
    with pytest.raises(Conflict) as info:
        fresh.start()
    assert "running" in info.value.message
    fresh.stop(wait=True, timeout=60)
    with pytest.raises(Conflict):
        fresh.stop()
    # Files wake a sleeping agent, as every operation that needs the sandbox does.
    assert isinstance(fresh.files.list("."), list)
    assert fresh.refresh().state == "running"


def test_invalid_request_names_the_field(client: Client, agent: Agent) -> None:
    for kwargs, field in (
        ({"name": "Not A Name"}, "name"),
        ({"name": unique(), "cpus": 10_000}, "cpus"),
        ({"name": unique(), "memory_mb": 1}, "memoryMb"),
        ({"name": unique(), "idle_minutes": 10**6}, "idleMinutes"),
    ):
        with pytest.raises(InvalidRequest) as info:
            client.agents.create(**kwargs)
        assert info.value.status == 400 and info.value.field == field, kwargs
    with pytest.raises(InvalidRequest):
        agent.files.read("../outside")


def test_too_large_names_the_field(agent: Agent) -> None:
    with pytest.raises(TooLarge) as info:
        agent.commands.run(["echo", HUGE_ARG])
    assert info.value.status == 413 and info.value.field == "command"


def test_a_wrong_token_is_unauthorized(server: Server) -> None:
    with Client(server.url, "wrong-token-wrong-token") as c:
        assert c.health().status == "ok"  # needs no token
        with pytest.raises(Unauthorized) as info:
            c.agents.list()
    assert info.value.status == 401 and isinstance(info.value, AgentholdError)
    with Client(server.url, token="") as c, pytest.raises(Unauthorized):
        c.agents.list()


def test_an_unreachable_server_is_a_network_error() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "t") as c, pytest.raises(NetworkError):
        c.health()


async def test_async_errors(server: Server, aclient: AsyncClient, aagent: AsyncAgent) -> None:
    with pytest.raises(NotFound):
        await aclient.agents.get(unique("nobody"))
    with pytest.raises(NotFound):
        await aagent.files.read(f"{unique('missing')}.txt")
    with pytest.raises(Conflict) as conflict:
        await aclient.agents.create(aagent.name)
    assert conflict.value.field == "name"
    with pytest.raises(InvalidRequest) as invalid:
        await aclient.agents.create("Not A Name")
    assert invalid.value.field == "name"
    with pytest.raises(TooLarge) as large:
        await aagent.commands.run(["echo", HUGE_ARG])
    assert large.value.field == "command"
    async with AsyncClient(server.url, "wrong-token-wrong-token") as bad:
        with pytest.raises(Unauthorized):
            await bad.agents.list()
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", "t") as down:
        with pytest.raises(NetworkError):
            await down.health()
