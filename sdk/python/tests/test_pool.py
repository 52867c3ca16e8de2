"""Warm pools: ``client.pool()``, and a create that claims a sandbox started ahead of need,
which returns at once (the server answers it ``running``), with the sync and the async client.

The fake-driver server's preset ``warm`` keeps one sandbox ready (conftest's ``PRESETS``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NoReturn

import httpx
import pytest

import agenthold.agents
from agenthold import Agent, AsyncAgent, AsyncClient, Client, PoolStatus

from .conftest import WARM_PRESET, Server, unique

#: How long the pool may take to have its entry ready (made, started, its sandboxd dialled in).
POOL_DEADLINE = 60.0


def _ready(pools: list[PoolStatus]) -> bool:
    return any(p.preset == WARM_PRESET and p.ready >= 1 for p in pools)


def wait_ready(client: Client) -> list[PoolStatus]:
    """The pools once the warm preset's has an entry ready to claim."""
    deadline = time.monotonic() + POOL_DEADLINE
    while True:
        pools = client.pool()
        if _ready(pools):
            return pools
        if time.monotonic() >= deadline:
            pytest.fail(f"the {WARM_PRESET} pool had nothing ready in {POOL_DEADLINE} s: {pools}")
        time.sleep(0.05)


async def await_ready(client: AsyncClient) -> list[PoolStatus]:
    """:func:`wait_ready` with the async client."""
    deadline = time.monotonic() + POOL_DEADLINE
    while True:
        pools = await client.pool()
        if _ready(pools):
            return pools
        if time.monotonic() >= deadline:
            pytest.fail(f"the {WARM_PRESET} pool had nothing ready in {POOL_DEADLINE} s: {pools}")
        await asyncio.sleep(0.05)


def forbid_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes every way a create could wait for the agent (its handle's ``wait_for``, the event
    stream's and the polling wait) fail the test."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("the create waited for an agent the server answered running")

    for handle in (Agent, AsyncAgent):
        monkeypatch.setattr(handle, "wait_for", refuse)
    monkeypatch.setattr(agenthold.agents, "wait_sync", refuse)
    monkeypatch.setattr(agenthold.agents, "wait_async", refuse)


def test_the_pool_lists_the_warm_preset(client: Client) -> None:
    pools = wait_ready(client)
    # Only presets with `warm` above 0 have a pool: not `py` nor `plain`.
    assert [p.preset for p in pools] == [WARM_PRESET]
    pool = pools[0]
    assert isinstance(pool, PoolStatus)
    assert (pool.preset, pool.target, pool.ready, pool.starting) == (WARM_PRESET, 1, 1, 0)


def test_a_create_from_the_warm_pool_returns_at_once(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []

    def record(r: httpx.Request) -> None:
        sent.append(f"{r.method} {r.url.path}")

    http = httpx.Client(event_hooks={"request": [record]})
    with http, Client(server.url, server.token, http=http) as c:
        wait_ready(c)
        sent.clear()
        with monkeypatch.context() as m:
            forbid_waiting(m)
            a = c.agents.create(unique("warm"), preset=WARM_PRESET, idle_minutes=0)
        try:
            # The POST alone: no event stream, no read of the agent after.
            assert sent == ["POST /api/v1/agents"]
            assert (a.state, a.info.warm, a.preset) == ("running", True, WARM_PRESET)
            assert a.commands.run("echo claimed").stdout == "claimed\n"
            # The pool makes another entry in the background for the next create.
            assert [p.target for p in c.pool() if p.preset == WARM_PRESET] == [1]
            wait_ready(c)
        finally:
            a.destroy()


async def test_async_create_from_the_warm_pool_returns_at_once(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []

    async def record(r: httpx.Request) -> None:
        sent.append(f"{r.method} {r.url.path}")

    async with (
        httpx.AsyncClient(event_hooks={"request": [record]}) as http,
        AsyncClient(server.url, server.token, http=http) as c,
    ):
        pools = await await_ready(c)
        assert [(p.preset, p.target) for p in pools] == [(WARM_PRESET, 1)]
        assert all(isinstance(p, PoolStatus) for p in pools)
        sent.clear()
        with monkeypatch.context() as m:
            forbid_waiting(m)
            a = await c.agents.create(unique("awarm"), preset=WARM_PRESET, idle_minutes=0)
        try:
            assert sent == ["POST /api/v1/agents"]
            assert (a.state, a.info.warm, a.preset) == ("running", True, WARM_PRESET)
            assert (await a.commands.run("echo claimed")).stdout == "claimed\n"
        finally:
            await a.destroy()
        await await_ready(c)


def test_a_create_the_pool_cannot_serve_still_waits(client: Client) -> None:
    # Root in the sandbox is not the pool's: a cold create, answered `creating`, waited for.
    with client.agents.create(
        unique("cold"), preset=WARM_PRESET, allow_root=True, idle_minutes=0
    ) as a:
        assert (a.state, a.info.warm, a.info.allow_root) == ("running", False, True)
        assert a.commands.run("echo cold").stdout == "cold\n"
