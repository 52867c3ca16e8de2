"""``client.approvals``: the server's one queue of questions for a person.

Today it holds the harnesses' permission requests: an agent's harness asks before a tool call,
the turn waits, and the first answer wins. An answer names an option by its ``option_id``
(never by its position); nobody answering within the server's ``approval_timeout`` is a
refusal (the ``reject_once`` option), never consent.
"""

from __future__ import annotations

import builtins
from typing import Protocol

from ._http import AsyncTransport, SyncTransport, seg
from .models import Approval

__all__ = ["Approvals", "AsyncApprovals", "answer_sync", "answer_async"]


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


def _id(value: str | _HasId) -> str:
    return value if isinstance(value, str) else value.id


def _params(state: str | None, agent: str | _HasId | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if state is not None:
        params["state"] = state
    if agent is not None:
        params["agent"] = _id(agent)
    return params


def answer_sync(t: SyncTransport, approval_id: str, option_id: str) -> Approval:
    body = t.json("POST", f"/approvals/{seg(approval_id)}", json={"optionId": option_id})
    return Approval.from_json(body)


async def answer_async(t: AsyncTransport, approval_id: str, option_id: str) -> Approval:
    body = await t.json("POST", f"/approvals/{seg(approval_id)}", json={"optionId": option_id})
    return Approval.from_json(body)


class Approvals:
    """``client.approvals``."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport

    def list(
        self, state: str | None = None, agent: str | _HasId | None = None
    ) -> builtins.list[Approval]:
        """The approvals, oldest first: ``state`` ``pending`` or ``resolved`` (the server keeps
        the last 1000 resolved ones), of every agent or of ``agent`` (an id, or an agent)."""
        body = self._t.json("GET", "/approvals", params=_params(state, agent))
        return [Approval.from_json(a) for a in body]

    def answer(self, approval: str | Approval, option_id: str) -> Approval:
        """Answers ``approval`` (its id, or itself) with the option ``option_id``; returns it
        resolved. :class:`Conflict` when it was decided already or has expired (the first
        answer wins), :class:`InvalidRequest` for an option it did not offer,
        :class:`NotFound` for an unknown id."""
        return answer_sync(self._t, _id(approval), option_id)


class AsyncApprovals:
    """``client.approvals`` of the async client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(
        self, state: str | None = None, agent: str | _HasId | None = None
    ) -> builtins.list[Approval]:
        """See :meth:`Approvals.list`."""
        body = await self._t.json("GET", "/approvals", params=_params(state, agent))
        return [Approval.from_json(a) for a in body]

    async def answer(self, approval: str | Approval, option_id: str) -> Approval:
        """See :meth:`Approvals.answer`."""
        return await answer_async(self._t, _id(approval), option_id)
