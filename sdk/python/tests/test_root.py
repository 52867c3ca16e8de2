"""``allow_root`` and ``user="root"``: the agent's setting, the server's gate on commands
(``Forbidden`` naming ``allowRoot``) and the process record's ``user``. The fake driver's
sandboxes run in the server's process, so a root command runs as root only when the server does."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from agenthold import Agent, AsyncClient, Client, Forbidden, InvalidRequest

from .conftest import unique


@pytest.fixture
def rooted(client: Client) -> Iterator[Agent]:
    a = client.agents.create(unique("root"), idle_minutes=0, allow_root=True)
    yield a
    with contextlib.suppress(Exception):
        a.destroy()


def test_allow_root_is_on_the_agent_and_defaults_to_false(fresh: Agent, rooted: Agent) -> None:
    assert fresh.info.allow_root is False
    assert rooted.info.allow_root is True
    changed = fresh.update(allow_root=True)
    assert changed.info.allow_root is True
    assert changed.info.needs_rebuild, "sudo follows at the rebuild"


def test_user_root_needs_allow_root(fresh: Agent, rooted: Agent) -> None:
    for background in (False, True):
        with pytest.raises(Forbidden) as refused:
            fresh.commands.run("id -u", user="root", background=background)
        assert "allowRoot" in str(refused.value)
        assert refused.value.field == "user"
    with pytest.raises(InvalidRequest):
        rooted.commands.run("id -u", user="admin")  # type: ignore[call-overload]
    plain = fresh.commands.run("true", user="agent")
    assert plain.ok
    started = fresh.commands.run("true", background=True)
    assert started.info.user == "agent"
    if os.geteuid() != 0:
        pytest.skip("the fake driver's sandboxd runs as this user, who is not root")
    assert rooted.commands.run("id -u", user="root").stdout == "0\n"
    handle = rooted.commands.run("id -u", user="root", background=True)
    assert handle.info.user == "root"
    assert handle.wait().exit_code == 0


async def test_async_create_and_run_as_root(aclient: AsyncClient) -> None:
    a = await aclient.agents.create(unique("aroot"), idle_minutes=0, allow_root=False)
    try:
        assert a.info.allow_root is False
        with pytest.raises(Forbidden):
            await a.commands.run("id -u", user="root")
    finally:
        await a.destroy()
