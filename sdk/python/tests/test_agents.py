"""Agents: create, find, change, drive and destroy, with the sync and the async client."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from agenthold import (
    Agent,
    AgentFailed,
    AsyncAgent,
    AsyncClient,
    Client,
    Conflict,
    EgressRules,
    InvalidRequest,
    NotFound,
    WaitTimeout,
)

from .conftest import unique

GONE_DEADLINE = 30.0


def wait_gone(c: Client, agent_id: str) -> None:
    """Polls until the agent is gone (destroying runs in the background)."""
    deadline = time.monotonic() + GONE_DEADLINE
    while time.monotonic() < deadline:
        try:
            c.agents.get(agent_id)
        except NotFound:
            return
        time.sleep(0.05)
    pytest.fail(f"agent {agent_id} was not gone within {GONE_DEADLINE} s")


def slow_image() -> str:
    """An image the fake driver pretends to pull for about a second, on its first use only."""
    return f"pull.invalid/slow-{uuid.uuid4().hex[:8]}:1"


# --- sync ---------------------------------------------------------------------------------


def test_health_and_limits(client: Client) -> None:
    assert client.url.startswith("http://127.0.0.1:")
    h = client.health()
    assert h.status == "ok" and h.driver == "fake" and h.version
    lim = client.limits()
    assert lim.max_cpus > 0 and lim.max_file_mb >= 100 and lim.default_image


def test_create_waits_until_running_with_its_settings(client: Client) -> None:
    name = unique()
    a = client.agents.create(
        name, cpus=1, memory_mb=512, idle_minutes=5, egress={"allow": ["pypi.org"]}
    )
    try:
        assert isinstance(a, Agent)
        assert a.state == "running" and a.name == name
        assert (a.cpus, a.memory_mb, a.idle_minutes) == (1.0, 512, 5)
        assert a.egress.rules == EgressRules(allow=("pypi.org",))
        assert a.created_at is not None and a.sleeps_at is not None
    finally:
        a.destroy()


def test_create_without_wait_returns_at_once(client: Client) -> None:
    a = client.agents.create(unique(), image=slow_image(), wait=False)
    try:
        assert a.state == "creating"
        assert a.wait_for("running", timeout=60).state == "running"
    finally:
        a.destroy()


def test_disk_mb_on_create_and_update(client: Client) -> None:
    name = unique()
    if client.limits().max_disk_mb is None:  # a server that cannot limit disks says so
        with pytest.raises(InvalidRequest) as info:
            client.agents.create(name, disk_mb=128)
        assert info.value.field == "diskMb"
        return
    a = client.agents.create(name, disk_mb=128)
    try:
        assert a.disk_mb == 128
        assert a.update(disk_mb=256).disk_mb == 256
        with pytest.raises(Conflict) as conflict:
            a.update(disk_mb=64)  # a home never shrinks: a conflict with the home as it is
        assert conflict.value.field == "diskMb"
    finally:
        a.destroy()


def test_get_by_name_or_id_and_list(client: Client, agent: Agent) -> None:
    by_name = client.agents.get(agent.name)
    by_id = client.agents.get(agent.id)
    assert by_name.id == by_id.id == agent.id
    assert agent.id in {a.id for a in client.agents.list()}
    with pytest.raises(NotFound):
        client.agents.get(unique("nobody"))


def test_update_changes_settings(client: Client, fresh: Agent) -> None:
    fresh.update(
        egress={"allow": ["example.org:443"], "deny": ["bad.example.org"]}, idle_minutes=30
    )
    assert fresh.idle_minutes == 30
    assert fresh.egress.rules == EgressRules(("example.org:443",), ("bad.example.org",))
    fresh.update(cpus=1.5)
    assert fresh.cpus == 1.5 and fresh.needs_rebuild
    again = client.agents.get(fresh.id)
    assert again.idle_minutes == 30 and again.cpus == 1.5


def test_an_egress_update_of_one_list_keeps_the_other(client: Client, fresh: Agent) -> None:
    fresh.update(egress={"allow": ["pypi.org"], "deny": ["bad.example.org"]})
    fresh.update(egress={"allow": ["github.com"]})
    assert fresh.egress.rules == EgressRules(("github.com",), ("bad.example.org",))
    fresh.update(egress={"deny": []})
    assert client.agents.get(fresh.id).egress.rules == EgressRules(("github.com",), ())


def test_egress_allow_deny_remove_change_a_list_at_a_time(client: Client, fresh: Agent) -> None:
    fresh.update(egress={"allow": ["pypi.org"], "deny": []})
    # Changed behind the handle's back: each call reads the rules afresh.
    client.agents.get(fresh.id).update(egress={"deny": ["bad.example.org"]})
    now = fresh.egress.allow("*.pythonhosted.org", "pypi.org")
    assert now == EgressRules(("pypi.org", "*.pythonhosted.org"), ("bad.example.org",))
    assert fresh.egress.deny("evil.example") == EgressRules(
        ("pypi.org", "*.pythonhosted.org"), ("bad.example.org", "evil.example")
    )
    assert fresh.egress.remove("pypi.org", "bad.example.org") == EgressRules(
        ("*.pythonhosted.org",), ("evil.example",)
    )
    assert client.agents.get(fresh.id).egress.rules == fresh.egress.rules
    # The fake sandbox has no proxy: nothing decided, nothing refused.
    assert fresh.egress.log() == []
    assert fresh.commands.run("true").egress_denied == ()


def test_stop_start_rebuild_refresh(fresh: Agent) -> None:
    fresh.stop(wait=False)
    assert fresh.state in ("stopping", "sleeping")
    assert fresh.wait_for("sleeping", timeout=60).state == "sleeping"
    assert fresh.refresh().state == "sleeping"
    fresh.start(wait=True, timeout=60)
    assert fresh.state == "running"
    fresh.update(memory_mb=256)
    assert fresh.needs_rebuild
    fresh.rebuild(wait=True, timeout=60)
    assert fresh.state == "running" and not fresh.needs_rebuild and fresh.memory_mb == 256
    fresh.stop(wait=True, timeout=60)
    assert fresh.state == "sleeping"


def test_an_operation_that_wakes_the_agent_shows_on_its_handles(
    client: Client, fresh: Agent
) -> None:
    other = client.agents.get(fresh.id)
    for wake in (
        lambda: fresh.commands.run("true"),
        lambda: fresh.files.list("."),
        lambda: fresh.commands.run("true", background=True).wait(),
    ):
        fresh.stop(wait=True, timeout=60)
        assert fresh.state == "sleeping"
        other.refresh()
        wake()
        # No refresh(): the answer that woke it said so, and every handle of the agent follows.
        assert fresh.state == "running"
        assert other.state == "running"


def test_runtime_on_create_and_update(client: Client) -> None:
    runtimes = client.limits().runtimes
    assert runtimes[:1] == ("runc",) and "runsc" in runtimes  # the fake engine has both
    a = client.agents.create(unique(), runtime="runsc")
    try:
        assert a.runtime == "runsc" and client.agents.get(a.id).runtime == "runsc"
        a.update(runtime="runc")
        assert a.runtime == "runc" and a.needs_rebuild
        a.rebuild(wait=True, timeout=60)
        assert a.state == "running" and a.runtime == "runc" and not a.needs_rebuild
        with pytest.raises(InvalidRequest) as info:
            a.update(runtime="kata")
        assert info.value.field == "runtime" and "runc, runsc" in str(info.value)
    finally:
        a.destroy()
    with pytest.raises(InvalidRequest) as info:
        client.agents.create(unique(), runtime="kata")
    assert info.value.field == "runtime"


def test_destroy_and_wait_until_gone(client: Client) -> None:
    a = client.agents.create(unique())
    a.destroy(wait=True, timeout=60)
    with pytest.raises(NotFound):
        a.refresh()


def test_context_manager_destroys_the_agent(client: Client) -> None:
    with client.agents.create(unique("tmp")) as a:
        assert a.state == "running"
        agent_id = a.id
    assert a.state == "destroying"
    wait_gone(client, agent_id)


def test_destroy_waits_for_an_operation_under_way(client: Client) -> None:
    # The server refuses to destroy an agent that is still creating (409); the client waits.
    with client.agents.create(unique("busy"), image=slow_image(), wait=False) as a:
        assert a.state == "creating"
    assert a.state == "destroying"
    wait_gone(client, a.id)


def test_a_failed_create_raises_with_the_agents_own_message(client: Client) -> None:
    with pytest.raises(AgentFailed) as info:
        client.agents.create(unique(), image="pull.invalid/missing:1", timeout=60)
    assert "missing" in info.value.message
    assert info.value.agent.state == "error"
    Agent(client._t, info.value.agent).destroy()


def test_a_wait_that_runs_out_raises_wait_timeout(client: Client) -> None:
    name = unique()
    with pytest.raises(WaitTimeout) as info:
        client.agents.create(name, image=slow_image(), timeout=0.05)
    assert isinstance(info.value, TimeoutError)
    a = client.agents.get(name)
    a.wait_for("running", timeout=60)
    a.destroy()


# --- async --------------------------------------------------------------------------------


async def test_async_health_and_limits(aclient: AsyncClient) -> None:
    assert (await aclient.health()).status == "ok"
    assert (await aclient.limits()).max_file_mb >= 100


async def test_async_create_get_list_update(aclient: AsyncClient) -> None:
    name = unique()
    a = await aclient.agents.create(name, memory_mb=512, egress=EgressRules(allow=("pypi.org",)))
    try:
        assert isinstance(a, AsyncAgent) and a.state == "running" and a.memory_mb == 512
        assert (await aclient.agents.get(name)).id == a.id
        assert (await aclient.agents.get(a.id)).name == name
        assert a.id in {x.id for x in await aclient.agents.list()}
        await a.update(idle_minutes=0, egress={"allow": [], "deny": ["*"]})
        assert a.idle_minutes == 0 and a.egress.rules == EgressRules((), ("*",))
        with pytest.raises(NotFound):
            await aclient.agents.get(unique("nobody"))
    finally:
        await a.destroy()


async def test_async_egress_allow_deny_remove(aclient: AsyncClient, afresh: AsyncAgent) -> None:
    await afresh.update(egress={"allow": ["pypi.org"], "deny": ["bad.example.org"]})
    await afresh.update(egress={"allow": ["github.com"]})
    assert afresh.egress.rules == EgressRules(("github.com",), ("bad.example.org",))
    assert await afresh.egress.allow("pypi.org") == EgressRules(
        ("github.com", "pypi.org"), ("bad.example.org",)
    )
    assert await afresh.egress.deny("evil.example") == EgressRules(
        ("github.com", "pypi.org"), ("bad.example.org", "evil.example")
    )
    assert await afresh.egress.remove("github.com", "evil.example") == EgressRules(
        ("pypi.org",), ("bad.example.org",)
    )
    assert (await aclient.agents.get(afresh.id)).egress.rules == afresh.egress.rules
    assert await afresh.egress.log() == []


async def test_async_create_without_wait(aclient: AsyncClient) -> None:
    a = await aclient.agents.create(unique(), image=slow_image(), wait=False)
    try:
        assert a.state == "creating"
        assert (await a.wait_for("running", timeout=60)).state == "running"
    finally:
        await a.destroy()


async def test_async_stop_start_rebuild_refresh(afresh: AsyncAgent) -> None:
    await afresh.stop(wait=True, timeout=60)
    assert afresh.state == "sleeping"
    assert (await afresh.refresh()).state == "sleeping"
    await afresh.start(timeout=60)
    assert afresh.state == "running"
    await afresh.rebuild(timeout=60)
    assert afresh.state == "running"


async def test_async_an_operation_that_wakes_the_agent_shows_on_its_handle(
    afresh: AsyncAgent,
) -> None:
    await afresh.stop(wait=True, timeout=60)
    assert afresh.state == "sleeping"
    await afresh.commands.run("true")
    assert afresh.state == "running"


async def test_async_runtime_on_create_and_update(aclient: AsyncClient) -> None:
    assert "runsc" in (await aclient.limits()).runtimes
    a = await aclient.agents.create(unique(), runtime="runsc")
    try:
        assert a.runtime == "runsc"
        await a.update(runtime="runc")
        assert a.runtime == "runc" and a.needs_rebuild
    finally:
        await a.destroy()


async def test_async_destroy_and_context_manager(aclient: AsyncClient) -> None:
    a = await aclient.agents.create(unique())
    await a.destroy(wait=True, timeout=60)
    with pytest.raises(NotFound):
        await a.refresh()
    async with await aclient.agents.create(unique("tmp")) as b:
        assert b.state == "running"
    assert b.state == "destroying"
    deadline = time.monotonic() + GONE_DEADLINE
    while time.monotonic() < deadline:
        try:
            await aclient.agents.get(b.id)
        except NotFound:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"agent {b.id} was not gone within {GONE_DEADLINE} s")


async def test_async_destroy_waits_for_an_operation_under_way(aclient: AsyncClient) -> None:
    a = await aclient.agents.create(unique("busy"), image=slow_image(), wait=False)
    assert a.state == "creating"
    await a.destroy(wait=True, timeout=60)
    with pytest.raises(NotFound):
        await a.refresh()


async def test_async_failed_create_and_wait_timeout(aclient: AsyncClient) -> None:
    with pytest.raises(AgentFailed) as info:
        await aclient.agents.create(unique(), image="pull.invalid/missing:2", timeout=60)
    assert "missing" in info.value.message
    await AsyncAgent(aclient._t, info.value.agent).destroy()
    name = unique()
    with pytest.raises(WaitTimeout):
        await aclient.agents.create(name, image=slow_image(), timeout=0.05)
    a = await aclient.agents.get(name)
    await a.wait_for("running", timeout=60)
    await a.destroy()
