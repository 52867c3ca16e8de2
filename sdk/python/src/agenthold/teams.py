"""``client.users`` and ``client.tokens``: the server's users (admins manage them) and API
tokens (each acts for the user who made it, with at most that user's power)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ._http import AsyncTransport, SyncTransport, seg
from .models import CreatedToken, Token, User

__all__ = ["Users", "AsyncUsers", "Tokens", "AsyncTokens", "audit_params"]


def audit_params(
    agent: str | None,
    user: str | None,
    action: str | None,
    since: str | datetime | None,
    until: str | datetime | None,
    before: int | None,
    limit: int | None,
) -> dict[str, Any]:
    """``GET /audit``'s query: the filters given, times as RFC 3339 (a string is sent as it
    is: a time, or a duration ago such as ``"24h"``)."""
    given = {
        "agent": agent,
        "user": user,
        "action": action,
        "since": since.isoformat() if isinstance(since, datetime) else since,
        "until": until.isoformat() if isinstance(until, datetime) else until,
        "before": before,
        "limit": limit,
    }
    return {k: v for k, v in given.items() if v is not None}


def _user_body(name: str, role: str, password: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "role": role}
    if password is not None:
        body["password"] = password
    return body


def _change_body(name: str | None, role: str | None, password: str | None) -> dict[str, Any]:
    given = {"name": name, "role": role, "password": password}
    return {k: v for k, v in given.items() if v is not None}


def _token_body(
    name: str,
    scopes: Iterable[str],
    agents: Iterable[str] | None,
    expires_in_days: int | None,
    supervised: bool = False,
    approvals: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "scopes": list(scopes)}
    if supervised:
        body["supervised"] = True
    if approvals is not None:
        body["approvals"] = approvals
    if agents is not None:
        body["agents"] = list(agents)
    if expires_in_days is not None:
        body["expiresInDays"] = expires_in_days
    return body


def _id(value: str | User | Token | CreatedToken) -> str:
    return value if isinstance(value, str) else value.id


class Users:
    """``client.users`` (admins only)."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport

    def list(self) -> builtins.list[User]:
        """Every user, oldest first."""
        return [User.from_json(u) for u in self._t.json("GET", "/users")]

    def create(self, name: str, role: str = "member", password: str | None = None) -> User:
        """Makes a user (``role`` ``admin`` or ``member``); without ``password`` the user
        cannot sign in with one. :class:`Conflict` for a taken name."""
        return User.from_json(self._t.json("POST", "/users", json=_user_body(name, role, password)))

    def update(
        self,
        user: str | User,
        *,
        name: str | None = None,
        role: str | None = None,
        password: str | None = None,
    ) -> User:
        """Changes what is given. :class:`Conflict` when it would leave no admin."""
        body = _change_body(name, role, password)
        return User.from_json(self._t.json("PATCH", f"/users/{seg(_id(user))}", json=body))

    def delete(self, user: str | User) -> None:
        """Deletes a user with their tokens and web sessions."""
        self._t.request("DELETE", f"/users/{seg(_id(user))}")


class AsyncUsers:
    """``client.users`` of the async client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self) -> builtins.list[User]:
        """See :meth:`Users.list`."""
        return [User.from_json(u) for u in await self._t.json("GET", "/users")]

    async def create(self, name: str, role: str = "member", password: str | None = None) -> User:
        """See :meth:`Users.create`."""
        body = _user_body(name, role, password)
        return User.from_json(await self._t.json("POST", "/users", json=body))

    async def update(
        self,
        user: str | User,
        *,
        name: str | None = None,
        role: str | None = None,
        password: str | None = None,
    ) -> User:
        """See :meth:`Users.update`."""
        body = _change_body(name, role, password)
        path = f"/users/{seg(_id(user))}"
        return User.from_json(await self._t.json("PATCH", path, json=body))

    async def delete(self, user: str | User) -> None:
        """See :meth:`Users.delete`."""
        await self._t.request("DELETE", f"/users/{seg(_id(user))}")


class Tokens:
    """``client.tokens``."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport

    def list(self) -> builtins.list[Token]:
        """The credential's user's tokens (an admin's: everyone's), oldest first."""
        return [Token.from_json(t) for t in self._t.json("GET", "/tokens")]

    def create(
        self,
        name: str,
        scopes: Iterable[str],
        *,
        agents: Iterable[str] | None = None,
        expires_in_days: int | None = None,
        supervised: bool = False,
        approvals: str | None = None,
    ) -> CreatedToken:
        """Makes a token for the credential's user; its ``token`` is shown this once.
        ``scopes``: ``agents:read``, ``agents:write``, ``agents:use``, ``approvals:answer``,
        ``admin`` (each one the credential has, else :class:`Forbidden`); ``agents``: ids or
        names it is limited to. ``supervised``: its commands wait for approval wherever the
        agent's ``approvals`` setting holds them, even its user's own; ``approvals``: what its
        held commands get, ``deny``, ``ask`` (the server's default) or ``allow``."""
        body = _token_body(name, scopes, agents, expires_in_days, supervised, approvals)
        return CreatedToken.from_json(self._t.json("POST", "/tokens", json=body))

    def revoke(self, token: str | Token | CreatedToken) -> None:
        """Revokes a token (its id, or itself): it stops working at once."""
        self._t.request("DELETE", f"/tokens/{seg(_id(token))}")


class AsyncTokens:
    """``client.tokens`` of the async client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self) -> builtins.list[Token]:
        """See :meth:`Tokens.list`."""
        return [Token.from_json(t) for t in await self._t.json("GET", "/tokens")]

    async def create(
        self,
        name: str,
        scopes: Iterable[str],
        *,
        agents: Iterable[str] | None = None,
        expires_in_days: int | None = None,
        supervised: bool = False,
        approvals: str | None = None,
    ) -> CreatedToken:
        """See :meth:`Tokens.create`."""
        body = _token_body(name, scopes, agents, expires_in_days, supervised, approvals)
        return CreatedToken.from_json(await self._t.json("POST", "/tokens", json=body))

    async def revoke(self, token: str | Token | CreatedToken) -> None:
        """See :meth:`Tokens.revoke`."""
        await self._t.request("DELETE", f"/tokens/{seg(_id(token))}")
