"""``GET /api/v1/events``: the server's Server-Sent Events, as typed values.

The stream opens with one :class:`~agenthold.models.AgentEvent` per existing agent (a
snapshot), then brings every change: agents, deletions, image pulls, egress decisions and
background processes. Kinds this client does not know come through as
:class:`~agenthold.models.UnknownEvent` rather than being dropped.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from types import TracebackType
from typing import Any

import httpx

from ._http import AsyncTransport, SyncTransport
from ._lines import SseDecoder, SseMessage
from .models import Event, parse_event

__all__ = ["EventStream", "AsyncEventStream", "decode"]

HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}


def decode(msg: SseMessage) -> Event:
    try:
        data: Any = json.loads(msg.data)
    except ValueError:
        data = msg.data
    return parse_event(msg.event, data)


def read_timeout(seconds: float | None) -> httpx.Timeout:
    """No read timeout by default: the server sends a keep-alive every 15 s, so a reader that
    wants to notice a dead connection can pass ``read_timeout`` above that."""
    return httpx.Timeout(None, connect=15.0, read=seconds)


class EventStream:
    """Iterate for events; ``close()`` (or leaving a ``with`` block) ends the stream.

    The iteration ends when the server closes the stream (it shuts down). A ``read_timeout``
    makes a silent connection raise :class:`~agenthold.errors.NetworkError` instead of waiting.
    """

    def __init__(self, transport: SyncTransport, read_timeout: float | None = None) -> None:
        self._transport = transport
        self._read_timeout = read_timeout
        self._gen: Generator[Event, None, None] | None = None

    def __iter__(self) -> Iterator[Event]:
        if self._gen is None:
            self._gen = self._events()
        return self._gen

    def __next__(self) -> Event:
        return next(iter(self))

    def _events(self) -> Generator[Event, None, None]:
        with self._transport.stream(
            "GET", "/events", headers=HEADERS, timeout=read_timeout(self._read_timeout)
        ) as r:
            decoder = SseDecoder()
            for chunk in self._transport.iter_bytes(r):
                for msg in decoder.feed(chunk):
                    yield decode(msg)

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncEventStream:
    """``async for`` events; ``await aclose()`` (or leaving ``async with``) ends the stream."""

    def __init__(self, transport: AsyncTransport, read_timeout: float | None = None) -> None:
        self._transport = transport
        self._read_timeout = read_timeout
        self._gen: AsyncGenerator[Event, None] | None = None

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._gen is None:
            self._gen = self._events()
        return self._gen

    async def __anext__(self) -> Event:
        return await self.__aiter__().__anext__()

    async def _events(self) -> AsyncGenerator[Event, None]:
        async with self._transport.stream(
            "GET", "/events", headers=HEADERS, timeout=read_timeout(self._read_timeout)
        ) as r:
            decoder = SseDecoder()
            async for chunk in self._transport.iter_bytes(r):
                for msg in decoder.feed(chunk):
                    yield decode(msg)

    async def aclose(self) -> None:
        if self._gen is not None:
            await self._gen.aclose()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
