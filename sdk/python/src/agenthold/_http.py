"""The HTTP transport under both clients: settings, auth, and turning failures into errors.

Every request of the library goes through :class:`SyncTransport` or :class:`AsyncTransport`,
so that an error answer always becomes the :mod:`agenthold.errors` class for its code, and a
broken connection always becomes :class:`~agenthold.errors.NetworkError`, whichever call made
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol
from urllib.parse import quote, unquote

import httpx

from .errors import NetworkError, error_for

__all__ = ["DEFAULT_URL", "SyncTransport", "AsyncTransport", "seg", "resolve_settings"]

DEFAULT_URL = "http://127.0.0.1:8080"
#: Seconds an ordinary request may take; long operations set their own.
DEFAULT_TIMEOUT = 60.0
API = "/api/v1"

TimeoutArg = float | None | httpx.Timeout
_DEFAULT: Any = object()

#: How many times a request the server refused with ``429`` or ``503`` is tried again.
DEFAULT_RETRIES = 8
#: The longest a request spends waiting between its tries, in all (seconds).
RETRY_BUDGET = 60.0
#: The first backoff (doubled at each try, at most :data:`RETRY_MAX`), before jitter.
RETRY_BASE, RETRY_MAX = 0.25, 8.0
#: The longest ``Retry-After`` honoured (a longer one ends the retries).
RETRY_AFTER_MAX = 30.0
#: The agent's state once the server handled a request under ``/agents/{id}``.
AGENT_STATE_HEADER = "X-Agenthold-Agent-State"

#: Methods whose request may be sent twice without harm.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds, when it is a number (the server sends whole seconds)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        secs = float(value)
    except ValueError:
        return None
    return secs if secs >= 0 else None


def _not_done(method: str, response: httpx.Response) -> bool:
    """Whether the answer says the request was not carried out and may be sent again.

    ``429`` is always a refusal before anything was done (a cap on open channels). ``503``
    is too for idempotent methods; for ``POST`` and ``PATCH`` only the refusals the server
    makes before it starts: a connection it would not take (a plain-text answer, not the API's
    error body) and an agent that did not wake within ``server.wake_timeout``. A ``503``
    after a command may have begun (the sandbox connection lost halfway) is not retried.
    """
    if response.status_code == 429:
        return True
    if response.status_code != 503:
        return False
    if method.upper() in IDEMPOTENT:
        return True
    if not response.headers.get("content-type", "").startswith("application/json"):
        return True
    try:
        body: Any = response.json()
        message = str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return True
    return "server.wake_timeout" in message


class _Retry:
    """The waits of one request between its tries: exponential backoff with jitter, never
    shorter than the server's ``Retry-After``, within :data:`RETRY_BUDGET` in all."""

    def __init__(self, retries: int) -> None:
        self.left = retries
        self.tries = 0
        self.budget_end = time.monotonic() + RETRY_BUDGET

    def pause(self, response: httpx.Response) -> float | None:
        """How long to wait before the next try, or ``None`` to give up."""
        if self.left <= 0:
            return None
        after = _retry_after(response)
        if after is not None and after > RETRY_AFTER_MAX:
            return None
        backoff = min(RETRY_MAX, RETRY_BASE * (2.0**self.tries))
        # Jitter spreads the callers the server refused at once over the next window, so that
        # they do not all come back together.
        pause = max(after or 0.0, backoff) * (1.0 + random.random())
        if time.monotonic() + pause > self.budget_end:
            return None
        self.left -= 1
        self.tries += 1
        return pause


def _replayable(content: Any) -> bool:
    """A body that can be sent again (not a stream that the first try used up)."""
    return content is None or isinstance(content, (bytes, bytearray, str))


def resolve_settings(url: str | None, token: str | None) -> tuple[str, str | None]:
    """The server's base URL and token: arguments first, then ``AGENTHOLD_URL`` and
    ``AGENTHOLD_TOKEN`` (the names the CLI reads), then the server's default address."""
    base = url or os.environ.get("AGENTHOLD_URL") or DEFAULT_URL
    base = base.rstrip("/")
    if base.endswith(API):
        base = base[: -len(API)]
    tok = token if token is not None else os.environ.get("AGENTHOLD_TOKEN") or None
    return base, tok


def seg(value: str) -> str:
    """One path segment, escaped: ids and tags are safe already, but a caller's name may not be."""
    return quote(value, safe="")


def _timeout(t: TimeoutArg) -> httpx.Timeout:
    if isinstance(t, httpx.Timeout):
        return t
    # Connecting is never slow on a working network; a slow answer may be.
    return httpx.Timeout(t, connect=None if t is None else min(t, 15.0))


def raise_for(response: httpx.Response) -> None:
    """Raises the error an answer stands for (its body must have been read)."""
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    raise error_for(response.status_code, body, response.text[:2000])


def shut_down(response: httpx.Response) -> bool:
    """Wakes a reader blocked on the response, from any thread: shuts its socket down (closing
    a socket another thread reads does not wake that thread; a shutdown does). ``False`` when
    the response has no socket to shut (a custom transport)."""
    stream = response.extensions.get("network_stream")
    try:
        sock: Any = stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # a stream without one
        sock = None
    # A socket.socket, or asyncio's TransportSocket around one (which has shutdown too).
    shutdown = getattr(sock, "shutdown", None)
    if not callable(shutdown):
        return False
    with contextlib.suppress(OSError):  # already closed
        shutdown(socket.SHUT_RDWR)
    return True


def network_error(e: httpx.TransportError) -> NetworkError:
    kind = "timed out" if isinstance(e, httpx.TimeoutException) else "failed"
    return NetworkError(f"the connection to the agenthold server {kind}: {e}", code="network")


def is_timeout(e: BaseException) -> bool:
    """A :class:`NetworkError` that was a timeout (not a refused or broken connection)."""
    return isinstance(e, NetworkError) and isinstance(e.__cause__, httpx.TimeoutException)


def pool_limits(max_connections: int | None) -> httpx.Limits:
    """The connection pool's limits: ``max_connections`` at once (``None``: no cap of the
    client's own; the server's ``server.max_connections_per_ip``, 256 by default, is then the
    bound, and its refusals are retried), of which up to 100 are kept alive between requests."""
    return httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=100 if max_connections is None else min(100, max_connections),
    )


class StateFollower(Protocol):
    """A handle whose ``state`` follows what the server says after each of its agent's requests."""

    def state_heard(self, state: str) -> None: ...


class _Base:
    def __init__(
        self, url: str | None, token: str | None, timeout: float | None, retries: int
    ) -> None:
        from . import __version__

        #: The handles of each agent, held weakly: a handle let go is not kept alive here.
        self._followers: dict[str, weakref.WeakSet[StateFollower]] = {}
        self._followers_lock = threading.Lock()

        self.base_url, self.token = resolve_settings(url, token)
        self.timeout = _timeout(timeout)
        self.retries = max(0, retries)
        self.headers = {"User-Agent": f"agenthold-python/{__version__}"}
        if self.token:
            self.headers["Authorization"] = f"Bearer {self.token}"

    def url(self, path: str) -> str:
        return f"{self.base_url}{API}{path}"

    def follow_state(self, agent_id: str, handle: StateFollower) -> None:
        """Has ``handle`` told the agent's state after every request of that agent's (the
        server's ``X-Agenthold-Agent-State``): an operation that woke it shows at once."""
        with self._followers_lock:
            self._followers.setdefault(agent_id, weakref.WeakSet()).add(handle)

    def heard(self, response: httpx.Response) -> None:
        state = response.headers.get(AGENT_STATE_HEADER)
        if state is None:
            return
        path = response.request.url.path
        at = path.find(f"{API}/agents/")
        if at < 0:
            return
        agent_id = unquote(path[at + len(API) + len("/agents/") :].split("/", 1)[0])
        with self._followers_lock:
            handles = list(self._followers.get(agent_id, ()))
        for handle in handles:
            handle.state_heard(state)

    def ws_url(self, path: str) -> str:
        """The same route on ``ws://`` or ``wss://``, for the terminal."""
        u = self.url(path)
        return "ws" + u[4:] if u.startswith("http") else u


class SyncTransport(_Base):
    def __init__(
        self,
        url: str | None,
        token: str | None,
        timeout: float | None = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
        *,
        retries: int = DEFAULT_RETRIES,
        max_connections: int | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retries)
        self.http = http or httpx.Client(timeout=self.timeout, limits=pool_limits(max_connections))
        self._owns_http = http is None

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        content: Any = None,
        files: Any = None,
        headers: dict[str, str] | None = None,
        timeout: TimeoutArg = _DEFAULT,
        accept: tuple[int, ...] = (),
    ) -> httpx.Response:
        """One request, its body read; an error status raises unless listed in ``accept``.
        A ``429`` or ``503`` that says the request was not carried out is tried again (see
        :func:`_not_done`), after a pause that honours ``Retry-After``."""
        retry = _Retry(self.retries if _replayable(content) and files is None else 0)
        while True:
            try:
                r = self.http.request(
                    method,
                    self.url(path),
                    json=json,
                    params=params,
                    content=content,
                    files=files,
                    headers={**self.headers, **(headers or {})},
                    timeout=self.timeout if timeout is _DEFAULT else _timeout(timeout),
                )
            except httpx.TransportError as e:
                raise network_error(e) from e
            self.heard(r)
            if r.status_code not in accept and _not_done(method, r):
                pause = retry.pause(r)
                if pause is not None:
                    time.sleep(pause)
                    continue
            if r.status_code not in accept:
                raise_for(r)
            return r

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return self.request(method, path, **kw).json()

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: TimeoutArg = _DEFAULT,
    ) -> Iterator[httpx.Response]:
        """A response whose body is read as it comes; an error status raises at once (after
        the tries :meth:`request` makes for a refusal)."""
        retry = _Retry(self.retries)
        try:
            while True:
                with self.http.stream(
                    method,
                    self.url(path),
                    json=json,
                    params=params,
                    headers={**self.headers, **(headers or {})},
                    timeout=self.timeout if timeout is _DEFAULT else _timeout(timeout),
                ) as r:
                    self.heard(r)
                    if r.status_code >= 400:
                        r.read()
                        pause = retry.pause(r) if _not_done(method, r) else None
                        if pause is None:
                            raise_for(r)
                    else:
                        yield r
                        return
                time.sleep(pause or 0.0)
        except httpx.TransportError as e:
            raise network_error(e) from e

    @staticmethod
    def iter_bytes(response: httpx.Response) -> Iterator[bytes]:
        try:
            yield from response.iter_bytes()
        except httpx.TransportError as e:
            raise network_error(e) from e


class AsyncTransport(_Base):
    def __init__(
        self,
        url: str | None,
        token: str | None,
        timeout: float | None = DEFAULT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
        *,
        retries: int = DEFAULT_RETRIES,
        max_connections: int | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retries)
        self.http = http or httpx.AsyncClient(
            timeout=self.timeout, limits=pool_limits(max_connections)
        )
        self._owns_http = http is None

    async def close(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        content: Any = None,
        files: Any = None,
        headers: dict[str, str] | None = None,
        timeout: TimeoutArg = _DEFAULT,
        accept: tuple[int, ...] = (),
    ) -> httpx.Response:
        """One request, its body read; an error status raises unless listed in ``accept``.
        Refusals are tried again as by :meth:`SyncTransport.request`."""
        retry = _Retry(self.retries if _replayable(content) and files is None else 0)
        while True:
            try:
                r = await self.http.request(
                    method,
                    self.url(path),
                    json=json,
                    params=params,
                    content=content,
                    files=files,
                    headers={**self.headers, **(headers or {})},
                    timeout=self.timeout if timeout is _DEFAULT else _timeout(timeout),
                )
            except httpx.TransportError as e:
                raise network_error(e) from e
            self.heard(r)
            if r.status_code not in accept and _not_done(method, r):
                pause = retry.pause(r)
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
            if r.status_code not in accept:
                raise_for(r)
            return r

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        return (await self.request(method, path, **kw)).json()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: TimeoutArg = _DEFAULT,
    ) -> AsyncIterator[httpx.Response]:
        """A response whose body is read as it comes; an error status raises at once (after
        the tries :meth:`request` makes for a refusal)."""
        retry = _Retry(self.retries)
        try:
            while True:
                async with self.http.stream(
                    method,
                    self.url(path),
                    json=json,
                    params=params,
                    headers={**self.headers, **(headers or {})},
                    timeout=self.timeout if timeout is _DEFAULT else _timeout(timeout),
                ) as r:
                    self.heard(r)
                    if r.status_code >= 400:
                        await r.aread()
                        pause = retry.pause(r) if _not_done(method, r) else None
                        if pause is None:
                            raise_for(r)
                    else:
                        yield r
                        return
                await asyncio.sleep(pause or 0.0)
        except httpx.TransportError as e:
            raise network_error(e) from e

    @staticmethod
    async def iter_bytes(response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.TransportError as e:
            raise network_error(e) from e
