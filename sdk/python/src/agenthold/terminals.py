"""``agent.terminals``: interactive terminal sessions over a WebSocket
(``GET /api/v1/agents/{id}/terminal``).

A session's shell lives in the sandbox and outlives its socket: :meth:`Terminal.close`
detaches, and :meth:`Terminals.attach` with the session's id and the offset seen so far picks
up exactly where the reader left off. Binary messages are terminal bytes; text messages are
JSON control messages (``session``, ``redraw``, ``resize``, ``exit``), handled here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection as AsyncConnection
from websockets.asyncio.client import connect as async_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection as SyncConnection
from websockets.sync.client import connect as sync_connect

from ._http import AsyncTransport, SyncTransport, seg
from .errors import (
    AgentholdError,
    Conflict,
    InvalidRequest,
    NotFound,
    RateLimited,
    Unavailable,
    WaitTimeout,
    error_for,
)
from .models import TerminalSession

__all__ = ["Terminals", "AsyncTerminals", "Terminal", "AsyncTerminal"]

#: How long opening may take: a sleeping agent is woken first.
OPEN_TIMEOUT = 120.0
#: A redraw of the screen can be large; nothing the server sends is bigger.
MAX_MESSAGE = 128 * 1024 * 1024

_CLOSE_ERRORS: dict[int, tuple[type[AgentholdError], str, str]] = {
    1011: (Unavailable, "unavailable", "the link to the sandbox was lost; attach again"),
    4400: (InvalidRequest, "invalid", "the offset is beyond the session's output"),
    4404: (NotFound, "not_found", "the terminal session is gone"),
    4409: (Conflict, "conflict", "the session has too many viewers"),
    4429: (RateLimited, "too_many_requests", "the agent has too many channels open"),
}


def _close_error(e: ConnectionClosed) -> AgentholdError | None:
    """The error a close code stands for; ``None`` for a normal end (the shell exited)."""
    frame = e.rcvd
    code = frame.code if frame is not None else 1006
    if code in (1000, 1001):
        return None
    cls, word, default = _CLOSE_ERRORS.get(
        code, (Unavailable, "unavailable", f"the terminal closed with code {code}")
    )
    reason = frame.reason if frame is not None and frame.reason else default
    return cls(reason, code=word)


def _handshake_error(e: InvalidStatus) -> AgentholdError:
    body: Any = None
    with contextlib.suppress(ValueError):
        body = json.loads(e.response.body or b"")
    text = (e.response.body or b"").decode("utf-8", errors="replace")
    return error_for(e.response.status_code, body, text)


class _Screen:
    """The protocol state of one socket: the session, its offset and what a message means."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.offset = 0
        self.cols = 0
        self.rows = 0
        self.exit_code: int | None = None
        self._redraw_at: int | None = None

    def take(self, msg: str | bytes) -> bytes | None:
        """Takes a message; returns the terminal bytes it carries, if any."""
        if isinstance(msg, str):
            self._control(msg)
            return None
        if self.id is None:
            return None  # status text ("Starting the sandbox…") before the session
        if self._redraw_at is not None:
            self.offset, self._redraw_at = self._redraw_at, None
            return bytes(msg)
        self.offset += len(msg)
        return bytes(msg)

    def _control(self, text: str) -> None:
        try:
            m = json.loads(text)
        except ValueError:
            return
        if not isinstance(m, dict):
            return
        kind = m.get("type")
        if kind == "session":
            self.id = str(m.get("id"))
            self.offset = int(m.get("offset") or 0)
            self.cols, self.rows = int(m.get("cols") or 0), int(m.get("rows") or 0)
        elif kind == "redraw":
            self._redraw_at = int(m.get("offset") or 0)
        elif kind == "resize":
            self.cols, self.rows = int(m.get("cols") or 0), int(m.get("rows") or 0)
        elif kind == "exit":
            self.exit_code = int(m.get("code") or 0)


def _query(
    cols: int | None,
    rows: int | None,
    command: str | None = None,
    session: str | None = None,
    offset: int | None = None,
) -> str:
    q: dict[str, str] = {}
    for k, v in (("cols", cols), ("rows", rows), ("offset", offset)):
        if v is not None:
            q[k] = str(v)
    if command is not None:
        q["command"] = command
    if session is not None:
        q["session"] = session
    return "?" + urlencode(q) if q else ""


def _pattern(p: str | bytes) -> bytes:
    return p.encode("utf-8") if isinstance(p, str) else p


class _TerminalBase:
    _screen: _Screen

    @property
    def id(self) -> str:
        """The session's id, for :meth:`Terminals.attach`."""
        return self._screen.id or ""

    @property
    def offset(self) -> int:
        """The offset after the last output byte read: give it to ``attach`` to resume."""
        return self._screen.offset

    @property
    def size(self) -> tuple[int, int]:
        return self._screen.cols, self._screen.rows

    @property
    def exit_code(self) -> int | None:
        """The shell's exit status once it has exited."""
        return self._screen.exit_code


class Terminal(_TerminalBase):
    """One socket onto a terminal session."""

    def __init__(self, terminals: Terminals, ws: SyncConnection, screen: _Screen) -> None:
        self._terminals = terminals
        self._ws = ws
        self._screen = screen
        self._closed = False

    def send(self, data: str | bytes) -> None:
        """Types ``data`` (keystrokes: ``"ls\\n"``)."""
        self._ws.send(_pattern(data))

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    def read(self, timeout: float | None = None) -> bytes:
        """The next output; ``b""`` once the shell has exited and the socket closed.

        Raises :class:`WaitTimeout` when nothing comes within ``timeout`` seconds, and the
        close code's error when the socket closes otherwise (``NotFound``: the session is
        gone; ``Unavailable``: the link broke, attach again).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self._next(deadline)
            if msg is None:
                return b""
            out = self._screen.take(msg)
            if out:
                return out

    def _next(self, deadline: float | None) -> str | bytes | None:
        """The next message, ``None`` at a normal close."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self._ws.recv(timeout=left)
        except TimeoutError:
            raise WaitTimeout("no terminal output in time") from None
        except ConnectionClosed as e:
            self._closed = True
            err = _close_error(e)
            if err is not None:
                raise err from e
            return None

    def _begin(self, timeout: float) -> None:
        """Reads up to the ``session`` message (status text before it is dropped)."""
        deadline = time.monotonic() + timeout
        while self._screen.id is None:
            msg = self._next(deadline)
            if msg is None:
                raise Unavailable("the terminal closed before its session began")
            self._screen.take(msg)

    def read_until(self, pattern: str | bytes, timeout: float | None = None) -> bytes:
        """Reads until the output holds ``pattern``; returns all it read. Raises
        :class:`WaitTimeout` when ``timeout`` passes first, ``EOFError`` at the end."""
        want, seen = _pattern(pattern), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        while want not in seen:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                raise WaitTimeout(f"{pattern!r} did not appear within {timeout} s")
            chunk = self.read(timeout=left)
            if not chunk:
                raise EOFError(f"the terminal ended before {pattern!r} appeared")
            seen += chunk
        return bytes(seen)

    def close(self) -> None:
        """Detaches; the session lives on (``kill`` ends it)."""
        if not self._closed:
            self._closed = True
            self._ws.close()

    def kill(self) -> None:
        """Ends the session and its shell."""
        self.close()
        self._terminals.kill(self.id)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncTerminal(_TerminalBase):
    """:class:`Terminal` for the async client."""

    def __init__(self, terminals: AsyncTerminals, ws: AsyncConnection, screen: _Screen) -> None:
        self._terminals = terminals
        self._ws = ws
        self._screen = screen
        self._closed = False

    async def send(self, data: str | bytes) -> None:
        await self._ws.send(_pattern(data))

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    async def read(self, timeout: float | None = None) -> bytes:
        """See :meth:`Terminal.read`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = await self._next(deadline)
            if msg is None:
                return b""
            out = self._screen.take(msg)
            if out:
                return out

    async def _next(self, deadline: float | None) -> str | bytes | None:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return await asyncio.wait_for(self._ws.recv(), left)
        except asyncio.TimeoutError:
            raise WaitTimeout("no terminal output in time") from None
        except ConnectionClosed as e:
            self._closed = True
            err = _close_error(e)
            if err is not None:
                raise err from e
            return None

    async def _begin(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._screen.id is None:
            msg = await self._next(deadline)
            if msg is None:
                raise Unavailable("the terminal closed before its session began")
            self._screen.take(msg)

    async def read_until(self, pattern: str | bytes, timeout: float | None = None) -> bytes:
        """See :meth:`Terminal.read_until`."""
        want, seen = _pattern(pattern), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        while want not in seen:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                raise WaitTimeout(f"{pattern!r} did not appear within {timeout} s")
            chunk = await self.read(timeout=left)
            if not chunk:
                raise EOFError(f"the terminal ended before {pattern!r} appeared")
            seen += chunk
        return bytes(seen)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._ws.close()

    async def kill(self) -> None:
        await self.close()
        await self._terminals.kill(self.id)

    async def __aenter__(self) -> AsyncTerminal:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class Terminals:
    """The terminal sessions of one agent."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}"

    def open(
        self,
        cols: int = 80,
        rows: int = 24,
        command: str | None = None,
        timeout: float = OPEN_TIMEOUT,
    ) -> Terminal:
        """Starts a session (a login shell, or ``command`` run by the account's shell) and
        returns once it is there; a sleeping agent is woken first."""
        return self._connect(_query(cols, rows, command=command), timeout)

    def attach(
        self,
        session_id: str,
        offset: int | None = None,
        cols: int | None = None,
        rows: int | None = None,
        timeout: float = OPEN_TIMEOUT,
    ) -> Terminal:
        """Attaches to a living session; with ``offset`` the output resumes after it (or
        with a redraw of the screen, if those bytes have left the buffer)."""
        return self._connect(_query(cols, rows, session=session_id, offset=offset), timeout)

    def _connect(self, query: str, timeout: float) -> Terminal:
        url = self._t.ws_url(f"{self._base}/terminal{query}")
        try:
            # Entered by hand, as `with` would, since the socket outlives this call: websockets
            # 17 wants that, and earlier versions accept it. What `connect` returns differs
            # between versions, hence Any.
            connecting: Any = sync_connect(
                url,
                additional_headers=self._t.headers,
                open_timeout=timeout,
                max_size=MAX_MESSAGE,
            )
            ws: SyncConnection = connecting.__enter__()
        except InvalidStatus as e:
            raise _handshake_error(e) from e
        except OSError as e:
            raise Unavailable(f"the terminal could not connect: {e}", code="network") from e
        term = Terminal(self, ws, _Screen())
        try:
            term._begin(timeout)
        except BaseException:
            term.close()
            raise
        return term

    def list(self) -> list[TerminalSession]:
        """The agent's sessions (does not wake the agent)."""
        return [
            TerminalSession.from_json(s) for s in self._t.json("GET", f"{self._base}/terminals")
        ]

    def kill(self, session_id: str) -> None:
        """Ends a session and its shell."""
        self._t.request("DELETE", f"{self._base}/terminals/{seg(session_id)}")


class AsyncTerminals:
    """:class:`Terminals` for the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}"

    async def open(
        self,
        cols: int = 80,
        rows: int = 24,
        command: str | None = None,
        timeout: float = OPEN_TIMEOUT,
    ) -> AsyncTerminal:
        return await self._connect(_query(cols, rows, command=command), timeout)

    async def attach(
        self,
        session_id: str,
        offset: int | None = None,
        cols: int | None = None,
        rows: int | None = None,
        timeout: float = OPEN_TIMEOUT,
    ) -> AsyncTerminal:
        return await self._connect(_query(cols, rows, session=session_id, offset=offset), timeout)

    async def _connect(self, query: str, timeout: float) -> AsyncTerminal:
        url = self._t.ws_url(f"{self._base}/terminal{query}")
        try:
            ws = await async_connect(
                url,
                additional_headers=self._t.headers,
                open_timeout=timeout,
                max_size=MAX_MESSAGE,
            )
        except InvalidStatus as e:
            raise _handshake_error(e) from e
        except OSError as e:
            raise Unavailable(f"the terminal could not connect: {e}", code="network") from e
        term = AsyncTerminal(self, ws, _Screen())
        try:
            await term._begin(timeout)
        except BaseException:
            await term.close()
            raise
        return term

    async def list(self) -> list[TerminalSession]:
        body = await self._t.json("GET", f"{self._base}/terminals")
        return [TerminalSession.from_json(s) for s in body]

    async def kill(self, session_id: str) -> None:
        await self._t.request("DELETE", f"{self._base}/terminals/{seg(session_id)}")
