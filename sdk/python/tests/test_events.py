"""The event stream, typed: agent, deleted, pull and process events.

Each test opens the stream and reads its first event (the snapshot has at least the shared
agent in it), so the stream is subscribed before the test makes what it waits for.
"""

from __future__ import annotations

import uuid

from agenthold import (
    Agent,
    AgentEvent,
    AsyncAgent,
    AsyncClient,
    Client,
    DeletedEvent,
    ProcessEvent,
    PullEvent,
)

from .conftest import unique


def test_events_bring_agent_pull_process_and_deleted_events(client: Client, agent: Agent) -> None:
    with client.events(read_timeout=60) as events:
        it = iter(events)
        assert isinstance(next(it), AgentEvent)  # the snapshot: open and subscribed
        image = f"pull.invalid/events-{uuid.uuid4().hex[:8]}:1"
        a = client.agents.create(unique("ev"), image=image, wait=False)
        states, pulls = [], []
        for ev in it:
            if isinstance(ev, PullEvent) and ev.id == a.id:
                pulls.append(ev.progress.status)
            if isinstance(ev, AgentEvent) and ev.id == a.id:
                states.append(ev.agent.state)
                if ev.agent.state == "running":
                    break
        assert states[0] == "creating" and states[-1] == "running"
        assert pulls[0] == "pulling" and pulls[-1] == "done"

        h = Agent(client._t, a.info).commands.run("exit 3", background=True)
        ended = None
        for ev in it:
            if isinstance(ev, ProcessEvent) and ev.process.id == h.id and not ev.process.running:
                ended = ev
                break
        assert ended is not None and ended.id == a.id and ended.process.exit_code == 3

        a.destroy()
        for ev in it:
            if isinstance(ev, DeletedEvent) and ev.id == a.id:
                break


async def test_async_events(aclient: AsyncClient, aagent: AsyncAgent) -> None:
    async with aclient.events(read_timeout=60) as events:
        assert isinstance(await events.__anext__(), AgentEvent)
        a = await aclient.agents.create(unique("aev"), wait=False)
        async for ev in events:
            if isinstance(ev, AgentEvent) and ev.id == a.id and ev.agent.state == "running":
                break
        await a.destroy()
        async for ev in events:
            if isinstance(ev, DeletedEvent) and ev.id == a.id:
                break
