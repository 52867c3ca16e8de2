"""``agent.members``: who besides the agent's owner and admins may see and use it
(``/api/v1/agents/{id}/members``). Adding and removing members is the owner's and admins' to do;
anyone who sees the agent may list them."""

from __future__ import annotations

from typing import Any

from ._http import AsyncTransport, SyncTransport, seg
from .models import AgentMember, MemberRole

__all__ = ["Members", "AsyncMembers"]


def _add_body(user: str, role: MemberRole) -> dict[str, Any]:
    return {"user": user, "role": role}


class Members:
    """``agent.members``: the agent's members."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/members"

    def list(self) -> list[AgentMember]:
        """The members, by name (the owner is ``agent.info.owner``, not a member)."""
        return [AgentMember.from_json(m) for m in self._t.json("GET", self._base)]

    def add(self, user: str, role: MemberRole = "user") -> AgentMember:
        """Makes ``user`` (an id or a name) a member with ``role``, or gives a member that
        role. :class:`NotFound` for an unknown user; :class:`BadRequest` for the owner."""
        return AgentMember.from_json(self._t.json("POST", self._base, json=_add_body(user, role)))

    def remove(self, user: str) -> None:
        """Removes a member (an id or a name); :class:`NotFound` for one who is none."""
        self._t.request("DELETE", f"{self._base}/{seg(user)}")


class AsyncMembers:
    """``agent.members`` of the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/members"

    async def list(self) -> list[AgentMember]:
        """See :meth:`Members.list`."""
        return [AgentMember.from_json(m) for m in await self._t.json("GET", self._base)]

    async def add(self, user: str, role: MemberRole = "user") -> AgentMember:
        """See :meth:`Members.add`."""
        return AgentMember.from_json(
            await self._t.json("POST", self._base, json=_add_body(user, role))
        )

    async def remove(self, user: str) -> None:
        """See :meth:`Members.remove`."""
        await self._t.request("DELETE", f"{self._base}/{seg(user)}")
