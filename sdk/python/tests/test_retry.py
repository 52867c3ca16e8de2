"""Refusals the server makes before doing anything (``429``, ``503``) are tried again with
backoff, honouring ``Retry-After``; the connection pool does not cap concurrency; lifecycle
calls wait for the agent to settle; ``kill`` of an ended process says so."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from agenthold import Agent, AsyncClient, Client, InvalidRequest, RateLimited, Unavailable, _http

from .conftest import FAKE_SANDBOX, Server, serve, unique


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff in milliseconds, so the unit tests below do not wait."""
    monkeypatch.setattr(_http, "RETRY_BASE", 0.001)


def _error(status: int, message: str, retry_after: str | None = "0") -> httpx.Response:
    code = {429: "too_many_requests", 503: "unavailable"}[status]
    headers = {} if retry_after is None else {"retry-after": retry_after}
    return httpx.Response(
        status, headers=headers, json={"error": {"code": code, "message": message}}
    )


def _client(answers: list[httpx.Response], seen: list[httpx.Request], **kw: Any) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0) if answers else httpx.Response(200, json={"ok": True})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    return Client("http://agenthold.test", "t", http=http, **kw)


def test_429_and_503_are_tried_again_after_retry_after(quick: None) -> None:
    seen: list[httpx.Request] = []
    c = _client(
        [
            _error(429, "too many channels"),
            _error(503, "agent a is still starting after 60s (server.wake_timeout); try again"),
        ],
        seen,
    )
    assert c._t.json("POST", "/agents/a/exec", json={"command": ["true"]}) == {"ok": True}
    assert len(seen) == 3
    assert all(json.loads(r.content) == {"command": ["true"]} for r in seen)


def test_the_pause_is_never_shorter_than_retry_after() -> None:
    retry = _http._Retry(3)
    pause = retry.pause(_error(429, "x", retry_after="2"))
    assert pause is not None and 2.0 <= pause <= 4.0
    # Longer than the client waits: given up at once.
    assert _http._Retry(3).pause(_error(503, "x", retry_after="3600")) is None


def test_a_503_after_a_command_may_have_begun_is_not_sent_again(quick: None) -> None:
    seen: list[httpx.Request] = []
    c = _client([_error(503, "the sandbox connection was lost")], seen)
    with pytest.raises(Unavailable):
        c._t.json("POST", "/agents/a/exec", json={"command": ["true"]})
    assert len(seen) == 1
    # An idempotent request is, and so is a POST whose agent did not wake in time.
    seen.clear()
    c = _client(
        [
            _error(503, "the sandbox connection was lost"),
            _error(503, "agent a is still starting after 60s (server.wake_timeout); try again"),
        ],
        seen,
    )
    c._t.json("GET", "/agents/a/fs/list")
    c._t.json("POST", "/agents/a/exec", json={"command": ["true"]})
    assert len(seen) == 4


def test_tries_are_bounded_and_retries_0_turns_them_off(quick: None) -> None:
    seen: list[httpx.Request] = []
    c = _client([_error(429, "busy") for _ in range(20)], seen, retries=3)
    with pytest.raises(RateLimited):
        c._t.json("GET", "/agents")
    assert len(seen) == 4
    seen.clear()
    c = _client([_error(429, "busy")], seen, retries=0)
    with pytest.raises(RateLimited):
        c._t.json("GET", "/agents")
    assert len(seen) == 1


def test_a_streamed_upload_is_not_sent_twice(quick: None) -> None:
    seen: list[httpx.Request] = []
    c = _client([_error(429, "busy")], seen)
    with pytest.raises(RateLimited):
        c._t.request("PUT", "/agents/a/fs/write", content=iter([b"once"]))
    assert len(seen) == 1


async def test_async_retries_too(quick: None) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _error(429, "busy") if len(seen) < 3 else httpx.Response(200, json=[])

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with AsyncClient("http://agenthold.test", "t", http=http) as c:
        assert await c._t.json("GET", "/agents") == []
    assert len(seen) == 3


def test_the_default_pool_does_not_cap_concurrency() -> None:
    assert _http.pool_limits(None).max_connections is None
    assert _http.pool_limits(10).max_connections == 10


# --- against a server whose agents take few channels at once -------------------------------

COMMANDS = 200


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, sandbox=FAKE_SANDBOX + "  max_streams_per_agent: 4\n")


def test_200_concurrent_commands_all_succeed(narrow: Server) -> None:
    with Client(narrow.url, narrow.token) as c:
        agent = c.agents.create(unique("busy"))
        try:
            with ThreadPoolExecutor(max_workers=COMMANDS) as pool:
                results = list(
                    pool.map(
                        lambda i: agent.commands.run(["sh", "-c", f"sleep 0.05; echo {i}"]),
                        range(COMMANDS),
                    )
                )
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(COMMANDS)]
        finally:
            agent.destroy()


async def test_200_concurrent_async_commands_all_succeed(narrow: Server) -> None:
    async with AsyncClient(narrow.url, narrow.token) as c:
        agent = await c.agents.create(unique("abusy"))
        try:
            results = await asyncio.gather(
                *(
                    agent.commands.run(["sh", "-c", f"sleep 0.05; echo {i}"])
                    for i in range(COMMANDS)
                )
            )
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(COMMANDS)]
        finally:
            await agent.destroy()


# --- lifecycle waits and kill --------------------------------------------------------------


def test_stop_then_start_does_not_conflict(fresh: Agent) -> None:
    fresh.stop(wait=False)
    assert fresh.state in ("stopping", "sleeping")
    fresh.start()
    assert fresh.state == "running"
    # Lifecycle calls wait by default: the next one finds the agent settled.
    fresh.stop()
    assert fresh.state == "sleeping"
    fresh.start()
    assert fresh.state == "running"


def test_kill_of_an_ended_process_returns_false(agent: Agent) -> None:
    h = agent.commands.run(["sleep", "300"], background=True)
    assert h.kill() is True
    assert h.wait(timeout=30).state == "killed"
    assert h.kill("KILL") is False
    assert h.info.state == "killed"
    with pytest.raises(InvalidRequest):
        h.kill("NOSUCHSIGNAL")
    h.remove()
