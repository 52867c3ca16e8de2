"""Lifetimes, labels and finding agents: ``ttl_minutes``, ``keep_alive``, ``labels`` and the
filters of ``agents.list``; ``agents.get`` reads one agent (not the whole list) and ``wait_for``
follows that agent's events alone. Each test that checks a request records what the client sent."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agenthold import AsyncClient, Client, InvalidRequest

from .conftest import Server, unique


@pytest.fixture
def recorded(server: Server) -> Iterator[tuple[Client, list[httpx.Request]]]:
    """A client whose requests are recorded as they are sent."""
    seen: list[httpx.Request] = []
    http = httpx.Client(timeout=30, event_hooks={"request": [seen.append]})
    with Client(server.url, server.token, http=http) as c:
        yield c, seen
    http.close()


def test_ttl_labels_and_keep_alive(client: Client) -> None:
    with client.agents.create(unique(), labels={"team": "ml", "task": "t-1"}, ttl_minutes=30) as a:
        assert a.ttl_minutes == 30
        assert a.labels == {"team": "ml", "task": "t-1"}
        first = a.expires_at
        assert first is not None
        a.keep_alive(120)
        assert a.ttl_minutes == 120
        assert a.expires_at is not None and a.expires_at > first
        a.update(labels={"team": "web"}, ttl_minutes=0)
        assert a.labels == {"team": "web"}
        assert a.ttl_minutes is None and a.expires_at is None
        a.update(ttl_minutes=5)
        assert a.ttl_minutes == 5
        a.keep_alive()
        assert a.ttl_minutes == 5
        with pytest.raises(InvalidRequest) as e:
            a.update(labels={"Bad Key": "x"})
        assert e.value.field == "labels"


def test_list_filters_select_the_right_agents(client: Client) -> None:
    tag = unique("run")
    a = client.agents.create(unique(), labels={"run": tag, "team": "ml"})
    b = client.agents.create(unique(), labels={"run": tag, "team": "web"}, preset="plain")
    c = client.agents.create(unique(), labels={"run": tag})
    try:
        c.stop(wait=True)

        def ids(**filters: object) -> set[str]:
            return {x.id for x in client.agents.list(**filters)}  # type: ignore[arg-type]

        assert ids(label=f"run={tag}") == {a.id, b.id, c.id}
        assert ids(label=[f"run={tag}", "team=ml"]) == {a.id}
        assert ids(label={"run": tag, "team": None}) == {a.id, b.id}
        assert ids(label=f"run={tag}", state="sleeping") == {c.id}
        assert ids(label=f"run={tag}", preset="plain") == {b.id}
        with pytest.raises(InvalidRequest):
            client.agents.list(label="Bad=x")
    finally:
        for x in (a, b, c):
            x.destroy()


def test_get_reads_one_agent_not_the_list(
    recorded: tuple[Client, list[httpx.Request]], client: Client
) -> None:
    c, seen = recorded
    with client.agents.create(unique()) as a:
        seen.clear()
        assert c.agents.get(a.id).id == a.id
        assert [(r.method, r.url.path) for r in seen] == [("GET", f"/api/v1/agents/{a.id}")]
        seen.clear()
        # By name: the id route misses, then the agents of that name alone.
        assert c.agents.get(a.name).id == a.id
        assert all(r.url.path != "/api/v1/agents" or r.url.params.get("name") for r in seen)
        assert seen[-1].url.params.get("name") == a.name


def test_wait_for_follows_only_its_agents_events(
    recorded: tuple[Client, list[httpx.Request]], client: Client
) -> None:
    c, seen = recorded
    a = c.agents.create(unique())
    try:
        streams = [r for r in seen if r.url.path == "/api/v1/events"]
        assert streams, "create waits on the event stream"
        assert all(r.url.params.get("agent") == a.id for r in streams), streams
        seen.clear()
        a.stop(wait=True)
        streams = [r for r in seen if r.url.path == "/api/v1/events"]
        assert streams and all(r.url.params.get("agent") == a.id for r in streams)
    finally:
        a.destroy(wait=True)


async def test_async_ttl_labels_and_filters(aclient: AsyncClient) -> None:
    tag = unique("arun")
    a = await aclient.agents.create(unique(), labels={"run": tag}, ttl_minutes=10)
    try:
        assert a.ttl_minutes == 10 and a.labels == {"run": tag}
        await a.keep_alive(20)
        assert a.ttl_minutes == 20
        await a.update(labels={"run": tag, "x": "y"})
        found = await aclient.agents.list(label=[f"run={tag}", "x"])
        assert [x.id for x in found] == [a.id]
        assert (await aclient.agents.get(a.name)).id == a.id
    finally:
        await a.destroy(wait=True)


def test_an_expiring_event_is_typed() -> None:
    from agenthold.models import ExpiringEvent, parse_event

    ev = parse_event("expiring", {"id": "a1", "expiresAt": "2026-12-06T10:00:00Z"})
    assert isinstance(ev, ExpiringEvent)
    assert ev.id == "a1" and ev.expires_at is not None and ev.expires_at.year == 2026
