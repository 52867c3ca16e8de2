"""Commands held for approval (an agent's ``approvals`` setting): a refused one raises
:class:`ApprovalRejected` / :class:`ApprovalExpired` (both :class:`Forbidden`), and
``client.approvals`` lists and answers them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agenthold import (
    Agent,
    ApprovalExpired,
    ApprovalRejected,
    Client,
    Forbidden,
)
from agenthold.errors import error_for

from .conftest import Server, unique


@pytest.fixture
def held(client: Client) -> Iterator[Agent]:
    """An agent whose every command of others (and of supervised tokens) waits."""
    a = client.agents.create(unique("held"), idle_minutes=0)
    client._t.json("PATCH", f"/agents/{a.id}", json={"approvals": {"commands": "always"}})
    yield a
    a.destroy()


def test_refusals_are_their_own_forbidden_errors() -> None:
    for code, cls in [
        ("approval_rejected", ApprovalRejected),
        ("approval_expired", ApprovalExpired),
    ]:
        e = error_for(403, {"error": {"code": code, "message": "nothing was run"}})
        assert isinstance(e, cls) and isinstance(e, Forbidden)
        assert e.code == code and e.status == 403


def test_a_deny_token_is_refused_at_once(server: Server, client: Client, held: Agent) -> None:
    made = client.tokens.create(
        unique("sub"), ["agents:read", "agents:use"], supervised=True, approvals="deny"
    )
    assert made.supervised and made.approvals == "deny"
    with Client(server.url, made.token) as sub, pytest.raises(ApprovalRejected) as info:
        sub.agents.get(held.id).commands.run(["echo", "never"])
    assert info.value.status == 403
    client.tokens.revoke(made)


def test_a_held_command_is_listed_and_answered(server: Server, client: Client, held: Agent) -> None:
    made = client.tokens.create(unique("sup"), ["agents:read", "agents:use"], supervised=True)
    outcome: dict[str, BaseException | None] = {}

    def run() -> None:
        with Client(server.url, made.token) as sup:
            try:
                sup.agents.get(held.id).commands.run(["echo", "held"])
                outcome["error"] = None
            except BaseException as e:
                outcome["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 30
    while True:
        waiting = [a for a in client.approvals.list("pending", held) if a.kind == "command"]
        if waiting or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert waiting, "the command should wait as an approval"
    a = waiting[0]
    assert a.command == "echo held" and a.session_id is None and a.requester
    answered = client.approvals.answer(a, "reject")
    assert answered.outcome == "selected" and answered.option_id == "reject"
    t.join(30)
    assert isinstance(outcome.get("error"), ApprovalRejected), outcome
    client.tokens.revoke(made)
