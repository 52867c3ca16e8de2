"""``agent.previews``: the URLs that open an agent's ports from a browser
(``/api/v1/agents/{id}/previews``); ``agent.ports()`` and ``agent.get_host()`` use them.

A preview is a URL on an origin of its own, ``{scheme}://{port}-{agent name}.{domain}[:{listener
port}]/``, served by the server's preview listener, which reaches the app on the sandbox's
loopback through the sandbox's tunnel (the sandbox's network stays closed). One preview per port.
"""

from __future__ import annotations

from typing import Any

from ._http import AsyncTransport, SyncTransport, seg
from .errors import Conflict
from .models import Preview, PreviewAccess

__all__ = ["Previews", "AsyncPreviews"]


def _create_body(
    port: int, access: PreviewAccess, expires_in_minutes: int | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"port": port, "access": access}
    if expires_in_minutes is not None:
        body["expiresInMinutes"] = expires_in_minutes
    return body


def _on_port(previews: list[Preview], port: int) -> Preview | None:
    return next((p for p in previews if p.port == port), None)


class Previews:
    """``agent.previews``: the agent's preview URLs."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/previews"

    def create(
        self,
        port: int,
        access: PreviewAccess = "private",
        expires_in_minutes: int | None = None,
    ) -> Preview:
        """A new preview of ``port`` (1 to 65535; it need not listen yet, nor the agent run).

        ``access``: ``private`` (people signed in to the web UI, and programs with the admin
        token as ``Authorization: Bearer``), ``token`` (whoever has the preview's own token,
        in ``Preview.token`` of this answer only), or ``public`` (anyone who reaches the
        preview listener). ``expires_in_minutes`` (1 to 525600) ends it that long from now.
        :class:`Conflict` when the port has a preview already (its id is in the message) or
        the agent has the server's ``previews.max_per_agent``.
        """
        body = _create_body(port, access, expires_in_minutes)
        return Preview.from_json(self._t.json("POST", self._base, json=body))

    def delete(self, preview_id: str) -> None:
        """Deletes a preview: its URL answers ``410`` at once and every connection open
        through it is cut. :class:`NotFound` for an unknown or already deleted one."""
        self._t.request("DELETE", f"{self._base}/{seg(preview_id)}")

    def list(self) -> list[Preview]:
        """The agent's previews, by port (deleted and expired ones are not listed; no token is
        ever listed)."""
        return [Preview.from_json(p) for p in self._t.json("GET", self._base)]


class AsyncPreviews:
    """``agent.previews`` of the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/previews"

    async def create(
        self,
        port: int,
        access: PreviewAccess = "private",
        expires_in_minutes: int | None = None,
    ) -> Preview:
        """See :meth:`Previews.create`."""
        body = _create_body(port, access, expires_in_minutes)
        return Preview.from_json(await self._t.json("POST", self._base, json=body))

    async def delete(self, preview_id: str) -> None:
        """See :meth:`Previews.delete`."""
        await self._t.request("DELETE", f"{self._base}/{seg(preview_id)}")

    async def list(self) -> list[Preview]:
        """See :meth:`Previews.list`."""
        return [Preview.from_json(p) for p in await self._t.json("GET", self._base)]


def host_of(previews: Previews, port: int) -> str:
    """The host of ``port``'s preview, made ``private`` when there is none (see
    :meth:`agenthold.Agent.get_host`)."""
    found = _on_port(previews.list(), port)
    if found is None:
        try:
            found = previews.create(port)
        except Conflict:
            # Made by someone else since the list; a 409 for another reason (the agent's
            # limit, a destroy under way) finds nothing and goes up as it is.
            found = _on_port(previews.list(), port)
            if found is None:
                raise
    return found.host


async def async_host_of(previews: AsyncPreviews, port: int) -> str:
    """:func:`host_of` for the async client."""
    found = _on_port(await previews.list(), port)
    if found is None:
        try:
            found = await previews.create(port)
        except Conflict:
            found = _on_port(await previews.list(), port)
            if found is None:
                raise
    return found.host
