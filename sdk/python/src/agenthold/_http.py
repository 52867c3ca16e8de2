"""The HTTP transport under both clients: settings, auth, and turning failures into errors.

Every request of the library goes through :class:`SyncTransport` or :class:`AsyncTransport`,
so that an error answer always becomes the :mod:`agenthold.errors` class for its code, and a
broken connection always becomes :class:`~agenthold.errors.NetworkError`, whichever call made
it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import quote

import httpx

from .errors import NetworkError, error_for

__all__ = ["DEFAULT_URL", "SyncTransport", "AsyncTransport", "seg", "resolve_settings"]

DEFAULT_URL = "http://127.0.0.1:8080"
#: Seconds an ordinary request may take; long operations set their own.
DEFAULT_TIMEOUT = 60.0
API = "/api/v1"

TimeoutArg = float | None | httpx.Timeout
_DEFAULT: Any = object()


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


def network_error(e: httpx.TransportError) -> NetworkError:
    kind = "timed out" if isinstance(e, httpx.TimeoutException) else "failed"
    return NetworkError(f"the connection to the agenthold server {kind}: {e}", code="network")


def is_timeout(e: BaseException) -> bool:
    """A :class:`NetworkError` that was a timeout (not a refused or broken connection)."""
    return isinstance(e, NetworkError) and isinstance(e.__cause__, httpx.TimeoutException)


class _Base:
    def __init__(self, url: str | None, token: str | None, timeout: float | None) -> None:
        from . import __version__

        self.base_url, self.token = resolve_settings(url, token)
        self.timeout = _timeout(timeout)
        self.headers = {"User-Agent": f"agenthold-python/{__version__}"}
        if self.token:
            self.headers["Authorization"] = f"Bearer {self.token}"

    def url(self, path: str) -> str:
        return f"{self.base_url}{API}{path}"

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
    ) -> None:
        super().__init__(url, token, timeout)
        self.http = http or httpx.Client(timeout=self.timeout)
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
        """One request, its body read; an error status raises unless listed in ``accept``."""
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
        """A response whose body is read as it comes; an error status raises at once."""
        try:
            with self.http.stream(
                method,
                self.url(path),
                json=json,
                params=params,
                headers={**self.headers, **(headers or {})},
                timeout=self.timeout if timeout is _DEFAULT else _timeout(timeout),
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    raise_for(r)
                yield r
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
    ) -> None:
        super().__init__(url, token, timeout)
        self.http = http or httpx.AsyncClient(timeout=self.timeout)
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
        """One request, its body read; an error status raises unless listed in ``accept``."""
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
        """A response whose body is read as it comes; an error status raises at once."""
        try:
            async with self.http.stream(
                method,
                self.url(path),
                json=json,
                params=params,
                headers={**self.headers, **(headers or {})},
                timeout=self.timeout if timeout is _DEFAULT else _timeout(timeout),
            ) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise_for(r)
                yield r
        except httpx.TransportError as e:
            raise network_error(e) from e

    @staticmethod
    async def iter_bytes(response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.TransportError as e:
            raise network_error(e) from e
