"""``GET /api/v1/events``: the server's Server-Sent Events, as typed values.

The stream opens with one :class:`~agenthold.models.AgentEvent` per existing agent (a
snapshot), then brings every change: agents, deletions, image pulls, egress decisions and
background processes. Kinds this client does not know come through as
:class:`~agenthold.models.UnknownEvent` rather than being dropped.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from types import TracebackType
from typing import Any

import httpx

from ._http import AsyncTransport, SyncTransport, shut_down
from ._lines import SseDecoder, SseMessage
from .errors import NetworkError
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


def _shut(response: httpx.Response) -> None:
    if not shut_down(response):
        # A transport without a socket: the sync close is the best left (an async one refuses).
        with contextlib.suppress(Exception):
            response.close()


class _Closer:
    """What ``close()`` needs from any thread: a flag, and the response to end once it is open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._response: httpx.Response | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def opened(self, response: httpx.Response) -> bool:
        """Records the open response; ``False`` when the stream was closed meanwhile."""
        with self._lock:
            if self._closed:
                return False
            self._response = response
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            response, self._response = self._response, None
        if response is not None:
            _shut(response)


class EventStream:
    """Iterate for events; ``close()`` (or leaving a ``with`` block) ends the stream.

    ``close()`` may be called from any thread, also while another thread is blocked reading
    the stream: it ends the connection, and that thread's iteration then ends cleanly (no
    exception). The iteration also ends when the server closes the stream (it shuts down). A
    ``read_timeout`` makes a silent connection raise :class:`~agenthold.errors.NetworkError`
    instead of waiting.
    """

    def __init__(self, transport: SyncTransport, read_timeout: float | None = None) -> None:
        self._transport = transport
        self._read_timeout = read_timeout
        self._gen: Generator[Event, None, None] | None = None
        self._closer = _Closer()

    @property
    def closed(self) -> bool:
        return self._closer.closed

    def __iter__(self) -> Iterator[Event]:
        if self._gen is None:
            self._gen = self._events()
        return self._gen

    def __next__(self) -> Event:
        return next(iter(self))

    def _events(self) -> Generator[Event, None, None]:
        if self._closer.closed:
            return
        with self._transport.stream(
            "GET", "/events", headers=HEADERS, timeout=read_timeout(self._read_timeout)
        ) as r:
            if not self._closer.opened(r):
                return
            decoder = SseDecoder()
            try:
                for chunk in self._transport.iter_bytes(r):
                    for msg in decoder.feed(chunk):
                        yield decode(msg)
            except NetworkError:
                if self._closer.closed:
                    return  # the connection ended by close()
                raise

    def close(self) -> None:
        """Ends the stream; safe from any thread, and more than once."""
        self._closer.close()
        gen = self._gen
        if gen is not None and not getattr(gen, "gi_running", False):
            # Another thread may have entered it since: the ended connection wakes that one.
            with contextlib.suppress(ValueError):
                gen.close()

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
    """``async for`` events; ``await aclose()`` (or leaving ``async with``) ends the stream.

    ``aclose()`` may be awaited from another task while one waits for the next event, and
    ``close()`` called from any thread: the connection ends and the waiting ``async for`` ends
    cleanly.
    """

    def __init__(self, transport: AsyncTransport, read_timeout: float | None = None) -> None:
        self._transport = transport
        self._read_timeout = read_timeout
        self._gen: AsyncGenerator[Event, None] | None = None
        self._closer = _Closer()

    @property
    def closed(self) -> bool:
        return self._closer.closed

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._gen is None:
            self._gen = self._events()
        return self._gen

    async def __anext__(self) -> Event:
        return await self.__aiter__().__anext__()

    async def _events(self) -> AsyncGenerator[Event, None]:
        if self._closer.closed:
            return
        async with self._transport.stream(
            "GET", "/events", headers=HEADERS, timeout=read_timeout(self._read_timeout)
        ) as r:
            if not self._closer.opened(r):
                return
            decoder = SseDecoder()
            try:
                async for chunk in self._transport.iter_bytes(r):
                    for msg in decoder.feed(chunk):
                        yield decode(msg)
            except NetworkError:
                if self._closer.closed:
                    return
                raise

    def close(self) -> None:
        """Ends the connection; safe from any thread or task. A waiting ``async for`` ends."""
        self._closer.close()

    async def aclose(self) -> None:
        """Ends the stream, also while another task waits for its next event."""
        self._closer.close()
        gen = self._gen
        if gen is not None and not getattr(gen, "ag_running", False):
            # Another task may be inside it: the ended connection wakes that one.
            with contextlib.suppress(RuntimeError):
                await gen.aclose()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
