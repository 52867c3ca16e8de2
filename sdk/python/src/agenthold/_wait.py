"""Waiting for an agent to reach a state (or to be gone), with a deadline.

The wait follows ``GET /api/v1/events?agent=ID`` (that agent's events alone): the stream is
opened first and the agent read once after, so a change that happens in between cannot be
missed (the server subscribes the stream before it answers). Where the event stream cannot be
had (a proxy that buffers it, a broken connection) the wait polls ``GET /api/v1/agents/{id}``
instead, until the same deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from ._http import AsyncTransport, SyncTransport, is_timeout, seg
from ._lines import SseDecoder
from .errors import AgentFailed, NetworkError, NotFound, WaitTimeout
from .events import HEADERS
from .models import TRANSIENT_STATES, AgentInfo

#: A silent event stream is reopened after this long (the server's keep-alive is every 15 s).
SSE_READ = 20.0
POLL_FIRST, POLL_MAX = 0.1, 1.0


class Deadline:
    def __init__(self, timeout: float | None) -> None:
        self.at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at


#: A wait target: any state in which no operation is under way (``error`` included).
AT_REST = "*"


def settled(agent: AgentInfo, target: str | None) -> bool:
    """Whether a wait for ``target`` is over with ``agent`` (``None``: waiting for it to go).

    Raises :class:`AgentFailed` when the agent came to rest elsewhere: ``error`` (with the
    agent's own message) or another resting state (it slept while we waited for it to run).
    """
    if target is not None and agent.state == target:
        return True
    if agent.state in TRANSIENT_STATES:
        return False
    if target == AT_REST:
        return True
    if agent.state == "error":
        raise AgentFailed(agent.error or f"agent {agent.name} failed", agent)
    want = "being destroyed" if target is None else target
    raise AgentFailed(f"agent {agent.name} is {agent.state}, not {want}", agent)


def _gone(agent_id: str, target: str | None) -> bool:
    if target is None:
        return True
    raise NotFound(f"agent {agent_id} was destroyed while waiting for it", code="not_found")


def _timed_out(agent_id: str, target: str | None, last: AgentInfo | None) -> WaitTimeout:
    want = "to be gone" if target is None else f"to be {target}"
    now = f" (it is {last.state})" if last else ""
    return WaitTimeout(f"gave up waiting for agent {agent_id} {want}{now}")


def _event_agent(kind: str, data: str, agent_id: str) -> AgentInfo | bool | None:
    """An ``agent`` event's agent, ``True`` for its ``deleted`` event, else ``None``."""
    if kind not in ("agent", "deleted"):
        return None
    try:
        d: Any = json.loads(data)
    except ValueError:
        return None
    if not isinstance(d, dict) or d.get("id") != agent_id:
        return None
    return True if kind == "deleted" else AgentInfo.from_json(d)


def _sse_timeout(deadline: Deadline) -> httpx.Timeout:
    rem = deadline.remaining()
    read = SSE_READ if rem is None else min(SSE_READ, rem + 0.05)
    return httpx.Timeout(None, connect=15.0, read=read)


def wait_sync(
    t: SyncTransport, agent_id: str, target: str | None, timeout: float | None
) -> AgentInfo | None:
    """Waits until agent ``agent_id`` is ``target`` (returned) or gone (``target=None``)."""
    deadline = Deadline(timeout)
    last: AgentInfo | None = None
    while not deadline.expired():
        try:
            with t.stream(
                "GET",
                "/events",
                params={"agent": agent_id},
                headers=HEADERS,
                timeout=_sse_timeout(deadline),
            ) as r:
                try:
                    last = AgentInfo.from_json(t.json("GET", f"/agents/{seg(agent_id)}"))
                except NotFound:
                    _gone(agent_id, target)
                    return None
                if settled(last, target):
                    return last
                decoder = SseDecoder()
                for chunk in t.iter_bytes(r):
                    for msg in decoder.feed(chunk):
                        got = _event_agent(msg.event, msg.data, agent_id)
                        if got is True:
                            _gone(agent_id, target)
                            return None
                        if isinstance(got, AgentInfo):
                            last = got
                            if settled(got, target):
                                return got
                    if deadline.expired():
                        break
        except NotFound:
            # The stream of an agent that is gone is 404 from the start.
            _gone(agent_id, target)
            return None
        except NetworkError as e:
            if not is_timeout(e):
                return _poll_sync(t, agent_id, target, deadline)
    raise _timed_out(agent_id, target, last)


def _poll_sync(
    t: SyncTransport, agent_id: str, target: str | None, deadline: Deadline
) -> AgentInfo | None:
    pause, last = POLL_FIRST, None
    while True:
        try:
            last = AgentInfo.from_json(t.json("GET", f"/agents/{seg(agent_id)}"))
        except NotFound:
            _gone(agent_id, target)
            return None
        if settled(last, target):
            return last
        rem = deadline.remaining()
        if rem is not None and rem <= 0:
            raise _timed_out(agent_id, target, last)
        time.sleep(pause if rem is None else min(pause, rem))
        pause = min(pause * 2, POLL_MAX)


async def wait_async(
    t: AsyncTransport, agent_id: str, target: str | None, timeout: float | None
) -> AgentInfo | None:
    """:func:`wait_sync` for the async client."""
    deadline = Deadline(timeout)
    last: AgentInfo | None = None
    while not deadline.expired():
        try:
            async with t.stream(
                "GET",
                "/events",
                params={"agent": agent_id},
                headers=HEADERS,
                timeout=_sse_timeout(deadline),
            ) as r:
                try:
                    last = AgentInfo.from_json(await t.json("GET", f"/agents/{seg(agent_id)}"))
                except NotFound:
                    _gone(agent_id, target)
                    return None
                if settled(last, target):
                    return last
                decoder = SseDecoder()
                async for chunk in t.iter_bytes(r):
                    for msg in decoder.feed(chunk):
                        got = _event_agent(msg.event, msg.data, agent_id)
                        if got is True:
                            _gone(agent_id, target)
                            return None
                        if isinstance(got, AgentInfo):
                            last = got
                            if settled(got, target):
                                return got
                    if deadline.expired():
                        break
        except NotFound:
            # The stream of an agent that is gone is 404 from the start.
            _gone(agent_id, target)
            return None
        except NetworkError as e:
            if not is_timeout(e):
                return await _poll_async(t, agent_id, target, deadline)
    raise _timed_out(agent_id, target, last)


async def _poll_async(
    t: AsyncTransport, agent_id: str, target: str | None, deadline: Deadline
) -> AgentInfo | None:
    pause, last = POLL_FIRST, None
    while True:
        try:
            last = AgentInfo.from_json(await t.json("GET", f"/agents/{seg(agent_id)}"))
        except NotFound:
            _gone(agent_id, target)
            return None
        if settled(last, target):
            return last
        rem = deadline.remaining()
        if rem is not None and rem <= 0:
            raise _timed_out(agent_id, target, last)
        await asyncio.sleep(pause if rem is None else min(pause, rem))
        pause = min(pause * 2, POLL_MAX)
