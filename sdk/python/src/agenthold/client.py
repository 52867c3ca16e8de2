"""The entry points: :class:`Client` and :class:`AsyncClient`, with the same names throughout.

A client holds one connection pool; make one and share it (it is safe across threads for the
sync client, across tasks for the async one), and close it when done (or use ``with``).
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType

import httpx

from ._http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, AsyncTransport, SyncTransport
from .agents import Agent, Agents, AsyncAgent, AsyncAgents, AsyncPresets, Presets
from .approvals import Approvals, AsyncApprovals
from .events import AsyncEventStream, EventStream
from .models import AuditEntry, Health, Limits, Me, PoolStatus
from .secrets import AsyncSecrets, Secrets
from .teams import AsyncTokens, AsyncUsers, Tokens, Users, audit_params

__all__ = ["Client", "AsyncClient"]


class Client:
    """A client of one agenthold server.

    ``url`` and ``token`` default to ``AGENTHOLD_URL`` and ``AGENTHOLD_TOKEN`` (as the CLI's
    do), and the URL to ``http://127.0.0.1:8080``. ``timeout`` bounds ordinary requests;
    commands, transfers and waits have their own. ``http`` lets a caller bring an
    ``httpx.Client`` of its own (proxies, certificates); it is then not closed here.

    A request the server refused without doing it (``429``, ``503``: too many channels open to
    an agent, too many connections, an agent that did not wake in time) is tried again up to
    ``retries`` times with exponential backoff, never sooner than the answer's
    ``Retry-After``, for at most 60 s in all; ``retries=0`` turns that off.
    ``max_connections`` caps the connections the client opens at once (``None``, the
    default: no cap of its own, so 200 threads run 200 requests at once; the server's
    ``server.max_connections_per_ip`` then bounds them, and its refusals are retried).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
        retries: int = DEFAULT_RETRIES,
        max_connections: int | None = None,
    ) -> None:
        self._t = SyncTransport(
            url, token, timeout, http, retries=retries, max_connections=max_connections
        )
        self.agents = Agents(self._t)
        self.presets = Presets(self._t)
        #: The server's queue of questions for a person (harnesses' permission requests).
        self.approvals = Approvals(self._t)
        #: The server's users (admins only).
        self.users = Users(self._t)
        #: API tokens: the credential's user's own (an admin's: everyone's).
        self.tokens = Tokens(self._t)
        #: Secrets agents use but never see (admins only).
        self.secrets = Secrets(self._t)

    @property
    def url(self) -> str:
        return self._t.base_url

    def health(self) -> Health:
        """Liveness, version and driver (needs no token)."""
        return Health.from_json(self._t.json("GET", "/health"))

    def limits(self) -> Limits:
        """The server's limits and defaults, to check input before sending it."""
        return Limits.from_json(self._t.json("GET", "/limits"))

    def pool(self) -> list[PoolStatus]:
        """The warm pools, sorted by preset: each preset with ``warm`` above 0 in the server's
        config (and any pool being emptied), with how many started sandboxes it keeps
        (``target``), how many a create can claim now (``ready``) and how many are being made
        (``starting``). A create from such a preset claims a ready one and returns ``running``
        at once, its ``warm`` true. Any signed-in credential may read it."""
        return [PoolStatus.from_json(p) for p in self._t.json("GET", "/pool")]

    def join(self, agent_id: str, access_token: str) -> Agent:
        """Joins a ``protected`` agent with its access token: see :meth:`Agents.join`."""
        return self.agents.join(agent_id, access_token)

    def me(self) -> Me:
        """Who the client's token is: its user, the scopes in effect, the token."""
        return Me.from_json(self._t.json("GET", "/me"))

    def audit(
        self,
        *,
        agent: str | None = None,
        user: str | None = None,
        action: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        before: int | None = None,
        limit: int | None = None,
    ) -> list[AuditEntry]:
        """The audit log, newest first (an admin's: everyone's; anyone else's: their own
        actions). ``agent`` and ``user`` are an id or a name; ``since``/``until`` a datetime,
        an RFC 3339 string or a duration ago (``"24h"``); ``limit`` 1 to 1000 (default 100);
        the next page is ``before=`` the last entry's ``id``. A bad filter raises
        :class:`~agenthold.errors.InvalidRequest`."""
        params = audit_params(agent, user, action, since, until, before, limit)
        return [AuditEntry.from_json(e) for e in self._t.json("GET", "/audit", params=params)]

    def events(self, read_timeout: float | None = None) -> EventStream:
        """The server's event stream: first one ``AgentEvent`` per agent, then every change."""
        return EventStream(self._t, read_timeout)

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient:
    """:class:`Client` for ``asyncio``: the same calls, awaited."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
        retries: int = DEFAULT_RETRIES,
        max_connections: int | None = None,
    ) -> None:
        self._t = AsyncTransport(
            url, token, timeout, http, retries=retries, max_connections=max_connections
        )
        self.agents = AsyncAgents(self._t)
        self.presets = AsyncPresets(self._t)
        self.approvals = AsyncApprovals(self._t)
        self.users = AsyncUsers(self._t)
        self.tokens = AsyncTokens(self._t)
        self.secrets = AsyncSecrets(self._t)

    @property
    def url(self) -> str:
        return self._t.base_url

    async def health(self) -> Health:
        return Health.from_json(await self._t.json("GET", "/health"))

    async def limits(self) -> Limits:
        return Limits.from_json(await self._t.json("GET", "/limits"))

    async def pool(self) -> list[PoolStatus]:
        """See :meth:`Client.pool`."""
        return [PoolStatus.from_json(p) for p in await self._t.json("GET", "/pool")]

    async def join(self, agent_id: str, access_token: str) -> AsyncAgent:
        """See :meth:`Client.join`."""
        return await self.agents.join(agent_id, access_token)

    async def me(self) -> Me:
        return Me.from_json(await self._t.json("GET", "/me"))

    async def audit(
        self,
        *,
        agent: str | None = None,
        user: str | None = None,
        action: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        before: int | None = None,
        limit: int | None = None,
    ) -> list[AuditEntry]:
        """See :meth:`Client.audit`."""
        params = audit_params(agent, user, action, since, until, before, limit)
        return [AuditEntry.from_json(e) for e in await self._t.json("GET", "/audit", params=params)]

    def events(self, read_timeout: float | None = None) -> AsyncEventStream:
        """``async for ev in client.events()``: see :meth:`Client.events`."""
        return AsyncEventStream(self._t, read_timeout)

    async def aclose(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
