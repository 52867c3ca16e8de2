"""The event stream, typed: agent, deleted, pull and process events.

Each test opens the stream and reads its first event (the snapshot has at least the shared
agent in it), so the stream is subscribed before the test makes what it waits for.
"""

from __future__ import annotations

import asyncio
import threading
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

#: How long a stream closed elsewhere may take to end its reader's iteration.
CLOSE_DEADLINE = 10.0


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


def test_a_stream_closed_from_another_thread_ends_its_blocked_reader(
    client: Client, agent: Agent
) -> None:
    events = client.events()  # no read timeout: only close() can end the wait
    first = threading.Event()
    seen: list[object] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            for ev in events:
                seen.append(ev)
                first.set()
        except BaseException as e:
            failed.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(CLOSE_DEADLINE), "no snapshot event"
    # The reader now iterates on, waiting for the next event (the snapshot has at least the
    # shared agent); this thread closes the stream under it.
    events.close()
    reader.join(CLOSE_DEADLINE)
    assert not reader.is_alive(), "the reader still blocks after close()"
    assert failed == [] and events.closed
    assert isinstance(seen[0], AgentEvent)
    events.close()  # twice is fine
    assert list(events) == []


async def test_an_async_stream_closed_from_another_task_ends_its_reader(
    aclient: AsyncClient, aagent: AsyncAgent
) -> None:
    events = aclient.events()
    first = asyncio.Event()

    async def read() -> int:
        n = 0
        async for _ in events:
            n += 1
            first.set()
        return n

    reader = asyncio.create_task(read())
    await asyncio.wait_for(first.wait(), CLOSE_DEADLINE)
    await events.aclose()
    assert await asyncio.wait_for(reader, CLOSE_DEADLINE) >= 1

    # close() from another thread wakes an async reader too.
    events = aclient.events()
    reader = asyncio.create_task(read())
    first.clear()
    await asyncio.wait_for(first.wait(), CLOSE_DEADLINE)
    await asyncio.to_thread(events.close)
    assert await asyncio.wait_for(reader, CLOSE_DEADLINE) >= 1
