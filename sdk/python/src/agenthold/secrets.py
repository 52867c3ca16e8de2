"""``client.secrets``: values agents use but never see (admins). A granted agent sees a
placeholder in an env variable of the secret's name; the server's egress proxy puts the value
in requests to the secret's hosts only. A value goes in with :meth:`Secrets.set` and never
comes back out."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any

from ._http import AsyncTransport, SyncTransport, seg
from .models import Secret

__all__ = ["Secrets", "AsyncSecrets"]


def _body(
    value: str, hosts: Iterable[str], header: str | None, format: str | None, in_body: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {"value": value, "hosts": list(hosts), "inBody": in_body}
    if header is not None:
        body["header"] = header
    if format is not None:
        body["format"] = format
    return body


class Secrets:
    """``client.secrets`` (admins only)."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport

    def list(self) -> builtins.list[Secret]:
        """Every secret by name, without values."""
        return [Secret.from_json(s) for s in self._t.json("GET", "/secrets")]

    def set(
        self,
        name: str,
        value: str,
        *,
        hosts: Iterable[str],
        header: str | None = None,
        format: str | None = None,
        in_body: bool = False,
    ) -> Secret:
        """Sets secret ``name`` (new, or a rotation the next request uses). ``hosts``: egress
        rules of where it may be sent (``api.anthropic.com``, ``*.github.com:443``);
        ``header`` (default ``Authorization``) and ``format`` (default ``Bearer {value}``) say
        how it is sent. :class:`InvalidRequest` names a field that breaks its rule."""
        body = _body(value, hosts, header, format, in_body)
        return Secret.from_json(self._t.json("PUT", f"/secrets/{seg(name)}", json=body))

    def delete(self, name: str) -> None:
        """Deletes a secret; :class:`NotFound` when there is none of that name."""
        self._t.request("DELETE", f"/secrets/{seg(name)}")


class AsyncSecrets:
    """``client.secrets`` of the async client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self) -> builtins.list[Secret]:
        """See :meth:`Secrets.list`."""
        return [Secret.from_json(s) for s in await self._t.json("GET", "/secrets")]

    async def set(
        self,
        name: str,
        value: str,
        *,
        hosts: Iterable[str],
        header: str | None = None,
        format: str | None = None,
        in_body: bool = False,
    ) -> Secret:
        """See :meth:`Secrets.set`."""
        body = _body(value, hosts, header, format, in_body)
        return Secret.from_json(await self._t.json("PUT", f"/secrets/{seg(name)}", json=body))

    async def delete(self, name: str) -> None:
        """See :meth:`Secrets.delete`."""
        await self._t.request("DELETE", f"/secrets/{seg(name)}")
