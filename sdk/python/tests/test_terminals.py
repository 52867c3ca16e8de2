"""Terminals over the WebSocket: open, type, read, resize, detach and attach, list, kill."""

from __future__ import annotations

import pytest

from agenthold import Agent, AsyncAgent, NotFound

READ = 30.0


def test_a_terminal_session_lives_on_after_detaching(agent: Agent) -> None:
    t = agent.terminals.open(cols=100, rows=30)
    assert t.id and t.size == (100, 30)
    t.send("echo $((6*7))\n")
    t.read_until("42", timeout=READ)
    t.resize(120, 40)
    t.send("stty size\n")
    t.read_until("40 120", timeout=READ)
    seen = t.offset
    sessions = {s.id: s for s in agent.terminals.list()}
    assert sessions[t.id].viewers == 1 and sessions[t.id].offset >= seen
    t.close()

    with agent.terminals.attach(t.id, offset=seen) as again:
        again.send("echo $((7*8))\n")
        out = again.read_until("56", timeout=READ)
        assert b"42" not in out  # nothing before the offset comes again
    t.kill()
    assert t.id not in {s.id for s in agent.terminals.list()}
    with pytest.raises(NotFound):
        agent.terminals.attach(t.id)


def test_a_shell_that_exits_ends_the_terminal_with_its_code(agent: Agent) -> None:
    with agent.terminals.open(command="echo bye; exit 5") as t:
        out = b""
        while chunk := t.read(timeout=READ):
            out += chunk
        assert b"bye" in out and t.exit_code == 5


async def test_async_terminal(aagent: AsyncAgent) -> None:
    t = await aagent.terminals.open()
    assert t.size == (80, 24)
    await t.send("echo $((6*7))\n")
    await t.read_until(b"42", timeout=READ)
    await t.resize(90, 20)
    await t.send("stty size\n")
    await t.read_until("20 90", timeout=READ)
    seen = t.offset
    assert t.id in {s.id for s in await aagent.terminals.list()}
    await t.close()
    async with await aagent.terminals.attach(t.id, offset=seen) as again:
        await again.send("exit 4\n")
        while await again.read(timeout=READ):
            pass
        assert again.exit_code == 4

    other = await aagent.terminals.open(command="sleep 300")
    assert other.id in {s.id for s in await aagent.terminals.list()}
    await other.kill()
    assert other.id not in {s.id for s in await aagent.terminals.list()}
    with pytest.raises(NotFound):
        await aagent.terminals.kill(other.id)
    with pytest.raises(NotFound):
        await aagent.terminals.attach(other.id)
