"""Users and API tokens, with the sync and the async client."""

from __future__ import annotations

import httpx
import pytest

from agenthold import (
    AsyncClient,
    AuditEntry,
    Client,
    Conflict,
    CreatedToken,
    Forbidden,
    InvalidRequest,
    NotFound,
    Token,
    Unauthorized,
    User,
)

from .conftest import unique


def test_users_are_made_changed_and_deleted(client: Client) -> None:
    name = unique("u")
    user = client.users.create(name, password="a good password")
    assert isinstance(user, User)
    assert (user.name, user.role, user.has_password) == (name, "member", True)
    assert name in [u.name for u in client.users.list()]
    assert client.users.update(user, role="admin").role == "admin"
    with pytest.raises(Conflict):
        client.users.create(name)
    with pytest.raises(Conflict):
        client.users.delete("admin")
    client.users.delete(user)
    with pytest.raises(NotFound):
        client.users.delete(user.id)


def test_a_token_is_shown_once_and_can_do_only_its_scopes(client: Client) -> None:
    made = client.tokens.create(unique("t"), ["agents:read"], expires_in_days=1)
    assert isinstance(made, CreatedToken)
    assert made.token.startswith("aht_") and made.expires_at is not None
    listed = [t for t in client.tokens.list() if t.id == made.id]
    assert len(listed) == 1 and isinstance(listed[0], Token)
    assert listed[0].scopes == ("agents:read",) and listed[0].agents is None
    with Client(client.url, made.token) as narrow:
        me = narrow.me()
        assert me.user.name == "admin" and me.scopes == ("agents:read",)
        assert me.token is not None and me.token.id == made.id
        narrow.agents.list()
        with pytest.raises(Forbidden):
            narrow.users.list()
        with pytest.raises(Forbidden):
            narrow.tokens.create(unique("t"), ["agents:use"])
        client.tokens.revoke(made)
        with pytest.raises(Unauthorized):
            narrow.agents.list()
    assert client.me().token is None


async def test_the_async_client_has_them_too(aclient: AsyncClient) -> None:
    user = await aclient.users.create(unique("u"))
    assert not user.has_password
    assert (await aclient.users.update(user.id, password="another password")).has_password
    made = await aclient.tokens.create(unique("t"), ["agents:read", "agents:use"])
    assert made.id in [t.id for t in await aclient.tokens.list()]
    await aclient.tokens.revoke(made.id)
    await aclient.users.delete(user)
    assert (await aclient.me()).user.role == "admin"


def test_the_audit_log_names_who_did_what(client: Client) -> None:
    name = unique("au")
    made = client.tokens.create(name, ["agents:read"])
    entries = client.audit(action="token.create", since="1h", limit=50)
    assert entries and all(isinstance(e, AuditEntry) for e in entries)
    mine = [e for e in entries if e.detail and e.detail.startswith(name)]
    assert len(mine) == 1, entries
    e = mine[0]
    assert (e.user_name, e.token_name, e.status) == ("admin", None, 201)
    assert e.at is not None and made.token not in repr(entries)
    older = client.audit(before=e.id, limit=1)
    assert all(o.id < e.id for o in older)
    with pytest.raises(InvalidRequest):
        client.audit(action="explode")
    client.tokens.revoke(made)


async def test_the_async_client_reads_the_audit_log(aclient: AsyncClient) -> None:
    entries = await aclient.audit(limit=3)
    assert len(entries) <= 3 and all(isinstance(e, AuditEntry) for e in entries)


def _member_client(client: Client, name: str) -> Client:
    """A client with a token of a new member user (signed in by password, as the web UI does,
    then a token made with that session)."""
    client.users.create(name, password="a good password")
    with httpx.Client(base_url=client.url) as web:
        r = web.post("/api/v1/session", json={"name": name, "password": "a good password"})
        assert r.status_code == 204, r.text
        r = web.post(
            "/api/v1/tokens",
            json={"name": "py", "scopes": ["agents:read", "agents:write", "agents:use"]},
            headers={"origin": client.url},
        )
        assert r.status_code == 201, r.text
        return Client(client.url, r.json()["token"])


def test_members_access_and_joining(client: Client) -> None:
    owner_name, other_name = unique("o"), unique("n")
    with _member_client(client, owner_name) as owner, _member_client(client, other_name) as other:
        agent = owner.agents.create(unique("a"), access="protected")
        try:
            assert agent.info.owner is not None and agent.info.owner.name == owner_name
            assert agent.info.access == "protected"
            with pytest.raises(NotFound):
                other.agents.get(agent.id)
            token = agent.new_access_token()
            assert token.startswith("ahj_")
            with pytest.raises(Forbidden):
                other.join(agent.id, "ahj_wrong")
            joined = other.join(agent.id, token)
            assert joined.id == agent.id
            members = agent.members.list()
            assert [(m.user_name, m.role) for m in members] == [(other_name, "user")]
            with pytest.raises(Forbidden):
                joined.set_access("public")
            assert agent.members.add(other_name, "operator").role == "operator"
            agent.members.remove(other_name)
            assert agent.members.list() == []
            assert agent.set_access("public").info.access == "public"
            assert agent.id in [a.id for a in other.agents.list()]
        finally:
            agent.destroy()
