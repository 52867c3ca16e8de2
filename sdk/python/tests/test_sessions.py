"""Agent sessions and approvals against a real server (the fake driver), whose harness is the
repository's model-free ACP test agent (acp-test-agent/README.md: plain text is echoed,
``stream N`` streams, ``tool`` asks permission with options b7 reject_always, a2 allow_once,
c9 reject_once and d4 allow_always, ``wait`` waits for a cancel, ``crash`` exits mid-turn).

Nothing here sleeps for an outcome: each test acts on the event that says it may (a permission
request, the ``wait`` chunk) from inside ``on_update``.
"""

from __future__ import annotations

import dataclasses

import pytest

from agenthold import (
    Agent,
    AgentEvent,
    Approval,
    ApprovalEvent,
    AsyncClient,
    Client,
    Conflict,
    ConversationEvent,
    InvalidRequest,
    NotFound,
    NoticeEvent,
    PermissionEvent,
    PermissionResolvedEvent,
    PromptEvent,
    Session,
    SessionDeletedEvent,
    SessionEvent,
    TooLarge,
    TurnEvent,
    TurnTimeout,
    UpdateEvent,
)

from .conftest import CuttingProxy, Server, unique

TOOL_OPTIONS = [
    ("b7", "reject_always"),
    ("a2", "allow_once"),
    ("c9", "reject_once"),
    ("d4", "allow_always"),
]
#: An approval id no approval has.
NO_SUCH_APPROVAL = "zzzzzzzzzzzz"


def bare(events: list[ConversationEvent]) -> list[ConversationEvent]:
    """The events without their ``at`` (which only the JSON transcript has)."""
    return [dataclasses.replace(e, at=None) for e in events]


def waiting(event: ConversationEvent) -> bool:
    """The ``wait`` command's one chunk: the harness now waits for a cancel."""
    return isinstance(event, UpdateEvent) and "waiting for session/cancel" in (event.text or "")


def tool_status(events: tuple[ConversationEvent, ...]) -> str | None:
    """The status the turn's tool call ended in."""
    statuses = [
        e.status
        for e in events
        if isinstance(e, UpdateEvent) and e.session_update == "tool_call_update" and e.status
    ]
    return statuses[-1] if statuses else None


def test_create_list_get_rename_delete(hagent: Agent) -> None:
    s = hagent.sessions.create(title="notes")
    info = s.info
    assert (s.harness, s.title, s.state, info.cwd, info.turns) == (
        "test",
        "notes",
        "idle",
        "/home/agent",
        0,
    )
    assert info.agent_id == hagent.id and info.created_at is not None
    # Creating a session does not start its harness: that waits for the first prompt.
    assert (info.acp_session_id, info.process_id, info.restore) == (None, None, None)
    assert s.id in [i.id for i in hagent.sessions.list()]
    assert hagent.sessions.get(s.id).info.id == s.id
    assert s.rename("renamed").title == "renamed"
    assert hagent.sessions.get(s.id).title == "renamed"
    other = hagent.sessions.create(harness="test-forgetful", cwd="/home/agent")
    assert other.harness == "test-forgetful" and other.title == "New session"
    s.delete()
    other.delete()
    with pytest.raises(NotFound):
        hagent.sessions.get(s.id)
    with pytest.raises(NotFound):
        s.refresh()
    with pytest.raises(InvalidRequest) as info_:
        hagent.sessions.create(harness="no-such-harness")
    assert "test" in info_.value.message  # it names the configured ones


def test_an_echo_prompt_returns_the_agents_text(session: Session) -> None:
    r = session.prompt("hello from the client")
    assert (r.turn, r.stop_reason, r.text, r.ok) == (1, "end_turn", "hello from the client", True)
    info = session.refresh().info
    assert (info.state, info.turns) == ("idle", 1)
    assert info.acp_session_id and info.process_id
    prompts = [e for e in r.events if isinstance(e, PromptEvent)]
    assert [(p.turn, p.text) for p in prompts] == [(1, "hello from the client")]
    # Content blocks work as text does.
    blocks = [{"type": "text", "text": "two"}, {"type": "text", "text": "blocks"}]
    assert session.prompt(blocks).text == "two\nblocks"


def test_streamed_updates_reach_on_update_in_order(session: Session) -> None:
    session.prompt("warm up")
    seen: list[ConversationEvent] = []
    r = session.prompt("stream 5", on_update=seen.append)
    expected = [f"chunk {i} of 5\n" for i in range(1, 6)]
    assert r.stop_reason == "end_turn" and r.text == "".join(expected)
    assert seen == list(r.events)
    chunks = [e.text for e in seen if isinstance(e, UpdateEvent)]
    assert chunks == expected
    # Every event of the turn, none of the one before, in the order of their seqs.
    first = seen[0].seq
    assert [e.seq for e in seen] == list(range(first, first + len(seen)))
    assert not any(isinstance(e, PromptEvent) and e.turn != r.turn for e in seen)
    started = next(i for i, e in enumerate(seen) if isinstance(e, TurnEvent))
    assert seen[started] == TurnEvent(seen[started].seq, 2, "started")
    assert started < min(i for i, e in enumerate(seen) if isinstance(e, UpdateEvent))
    assert seen[-1] == TurnEvent(seen[-1].seq, 2, "ended", "end_turn")
    # The JSON transcript says what the stream said, event for event.
    assert bare(session.transcript(after=first - 1)) == seen
    assert all(e.at is not None for e in session.transcript(limit=3))


@pytest.mark.parametrize(("choice", "status"), [("a2", "completed"), ("c9", "failed")])
def test_a_tool_call_waits_for_its_approval(
    hclient: Client, hagent: Agent, session: Session, choice: str, status: str
) -> None:
    asked: list[Approval] = []

    def on_update(event: ConversationEvent) -> None:
        if isinstance(event, PermissionEvent):
            # Listed while pending, for this agent (passed as an agent or by its id).
            pending = hclient.approvals.list(state="pending", agent=hagent)
            assert event.approval.id in [a.id for a in pending]
            assert event.approval.id in [a.id for a in hclient.approvals.list(agent=hagent.id)]

    def on_permission(approval: Approval) -> str | None:
        asked.append(approval)
        return choice

    r = session.prompt("tool", on_update=on_update, on_permission=on_permission)
    assert r.stop_reason == "end_turn"
    assert tool_status(r.events) == status
    (a,) = asked
    assert (a.session_id, a.agent_id, a.kind, a.state) == (
        session.id,
        hagent.id,
        "permission",
        "pending",
    )
    assert [(o.option_id, o.kind) for o in a.options] == TOOL_OPTIONS
    assert a.tool_call and a.expires_at is not None
    resolved = [e for e in r.events if isinstance(e, PermissionResolvedEvent)]
    assert [(e.id, e.outcome, e.option_id, e.by) for e in resolved] == [
        (a.id, "selected", choice, "admin")
    ]
    done = {x.id: x for x in hclient.approvals.list(state="resolved", agent=hagent)}[a.id]
    assert (done.state, done.outcome, done.option_id, done.decided_by) == (
        "resolved",
        "selected",
        choice,
        "admin",
    )
    assert a.id not in [x.id for x in hclient.approvals.list(state="pending")]


def test_answering_through_the_approvals_queue(hclient: Client, session: Session) -> None:
    answered: list[Approval] = []

    def on_update(event: ConversationEvent) -> None:
        if not isinstance(event, PermissionEvent):
            return
        approval = event.approval
        with pytest.raises(InvalidRequest):
            hclient.approvals.answer(approval, "zz")  # not offered
        answered.append(hclient.approvals.answer(approval.id, "d4"))
        with pytest.raises(Conflict):
            hclient.approvals.answer(approval.id, "a2")  # the first answer won

    # No on_permission: the prompt leaves the question to others, and waits.
    r = session.prompt("tool", on_update=on_update)
    assert r.stop_reason == "end_turn" and tool_status(r.events) == "completed"
    (a,) = answered
    assert (a.state, a.outcome, a.option_id) == ("resolved", "selected", "d4")
    assert a.decided_by == "admin"
    with pytest.raises(NotFound):
        hclient.approvals.answer(NO_SUCH_APPROVAL, "a2")


def test_a_prompt_over_a_mib_is_too_large_and_unknown_ids_are_not_found(
    hagent: Agent, session: Session
) -> None:
    with pytest.raises(TooLarge):
        session.prompt("x" * (1024 * 1024 + 1))
    with pytest.raises(NotFound):
        hagent.sessions.get("zzzzzzzzzzzz")
    assert session.prompt("still fine").ok


def test_cancel_during_a_turn(session: Session) -> None:
    def on_update(event: ConversationEvent) -> None:
        if waiting(event):
            with pytest.raises(Conflict):
                session.prompt("a second turn")  # one turn at a time
            session.cancel()

    r = session.prompt("wait", on_update=on_update)
    assert r.stop_reason == "cancelled"
    assert session.refresh().state == "idle"
    with pytest.raises(Conflict):
        session.cancel()  # no turn runs


def test_cancel_resolves_a_pending_approval(hclient: Client, session: Session) -> None:
    r = session.prompt(
        "tool", on_update=lambda e: session.cancel() if isinstance(e, PermissionEvent) else None
    )
    assert r.stop_reason == "cancelled" and tool_status(r.events) == "failed"
    (resolved,) = [e for e in r.events if isinstance(e, PermissionResolvedEvent)]
    assert (resolved.outcome, resolved.by) == ("cancelled", "cancel")
    with pytest.raises(Conflict):
        hclient.approvals.answer(resolved.id, "a2")


def test_a_prompt_that_times_out_leaves_its_turn_running(session: Session) -> None:
    with pytest.raises(TurnTimeout) as info:
        session.prompt("wait", timeout=1.0)
    partial = info.value.result
    assert (info.value.turn, partial.stop_reason) == (1, None)
    assert session.refresh().running
    session.cancel()
    last = partial.events[-1].seq if partial.events else 0
    with session.events(after=last) as events:
        ended = next(e for e in events if isinstance(e, TurnEvent) and e.ended)
    assert (ended.turn, ended.stop_reason) == (1, "cancelled")


def test_a_crash_ends_the_turn_in_error_and_the_next_prompt_starts_it_again(
    session: Session,
) -> None:
    r = session.prompt("crash")
    assert r.stop_reason == "error"
    assert "harness_exited" in [n.kind for n in r.notices]
    again = session.prompt("still there?")
    assert again.ok and again.text == "still there?"
    assert session.refresh().info.restore == "load"  # the test agent's default


def test_events_resume_after_a_seq_and_across_a_cut(
    harness_server: Server, hagent: Agent, session: Session, proxy_h: CuttingProxy
) -> None:
    session.prompt("stream 3")
    whole = session.transcript()
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))
    with session.events(after=2) as stream:
        got = [next(stream) for _ in whole[2:]]
        assert stream.seq == len(whole)
    assert got == bare(whole[2:])

    with Client(proxy_h.url, harness_server.token) as through_proxy:
        watched = through_proxy.agents.get(hagent.id).sessions.get(session.id)
        with watched.events() as stream:
            before = [next(stream), next(stream)]
            proxy_h.cut()  # the stream breaks; a turn happens while it is down
            r = session.prompt("after the cut")
            after = []
            for event in stream:
                after.append(event)
                if isinstance(event, TurnEvent) and event.turn == r.turn and event.ended:
                    break
    seqs = [e.seq for e in before + after]
    assert seqs == list(range(1, len(seqs) + 1))  # nothing lost, nothing twice
    assert bare(session.transcript()) == before + after
    asked = [line for line in proxy_h.requests if b"/events" in line and b"/sessions/" in line]
    assert len(asked) == 2, asked


def test_a_prompt_wakes_a_sleeping_agent_and_the_conversation_is_restored(
    hclient: Client,
) -> None:
    a = hclient.agents.create(unique("wake"), idle_minutes=0)
    try:
        kept = a.sessions.create()
        forgetful = a.sessions.create(harness="test-forgetful")
        assert kept.prompt("before sleep").ok and forgetful.prompt("me too").ok
        a.stop(wait=True, timeout=60)
        r = kept.prompt("after sleep")
        assert r.ok and r.text == "after sleep"
        kinds = [type(e) for e in r.events]
        assert r.notices[0].kind == "waking"
        assert kinds.index(NoticeEvent) < kinds.index(UpdateEvent)
        assert kept.refresh().info.restore == "load"
        assert a.refresh().state == "running"
        # A harness that can neither resume nor load starts anew, and says so.
        r = forgetful.prompt("who are you?")
        assert r.ok and "context_reset" in [n.kind for n in r.notices]
        assert forgetful.refresh().info.restore == "new"
    finally:
        a.destroy()


def test_the_server_event_stream_tells_of_sessions_and_approvals(
    hclient: Client, hagent: Agent
) -> None:
    with hclient.events(read_timeout=60) as events:
        it = iter(events)
        assert isinstance(next(it), AgentEvent)  # the snapshot: open and subscribed
        s = hagent.sessions.create(title="watched")
        r = s.prompt("tool", on_permission=lambda a: a.option_for("allow_once"))
        s.delete()
        states, approvals = [], []
        for event in it:
            if isinstance(event, SessionEvent) and event.id == s.id:
                states.append((event.session.state, event.session.turns))
            elif isinstance(event, ApprovalEvent) and event.approval.session_id == s.id:
                approvals.append((event.approval.state, event.approval.option_id))
            elif isinstance(event, SessionDeletedEvent) and event.id == s.id:
                assert event.agent_id == hagent.id
                break
    assert r.ok
    assert states[0] == ("idle", 0) and ("running", 1) in states and states[-1] == ("idle", 1)
    assert approvals == [("pending", None), ("resolved", "a2")]


# --- async --------------------------------------------------------------------------------


async def test_async_sessions_prompts_approvals_and_events(
    haclient: AsyncClient, hagent: Agent
) -> None:
    agent = await haclient.agents.get(hagent.id)
    s = await agent.sessions.create(title="async")
    try:
        assert s.id in [i.id for i in await agent.sessions.list()]
        assert (await agent.sessions.get(s.id)).title == "async"
        assert (await s.rename("async, renamed")).title == "async, renamed"
        r = await s.prompt("hello async")
        assert (r.turn, r.stop_reason, r.text) == (1, "end_turn", "hello async")

        seen: list[ConversationEvent] = []
        asked: list[Approval] = []

        async def on_update(event: ConversationEvent) -> None:
            seen.append(event)

        async def on_permission(approval: Approval) -> str | None:
            pending = await haclient.approvals.list(state="pending", agent=agent)
            assert approval.id in [a.id for a in pending]
            asked.append(approval)
            return approval.option_for("allow_once")

        r = await s.prompt("tool", on_update=on_update, on_permission=on_permission)
        assert r.ok and tool_status(r.events) == "completed" and seen == list(r.events)
        (a,) = asked
        with pytest.raises(Conflict):
            await haclient.approvals.answer(a, "c9")
        done = {x.id: x for x in await haclient.approvals.list(state="resolved")}[a.id]
        assert (done.outcome, done.option_id) == ("selected", "a2")

        async def cancel_when_waiting(event: ConversationEvent) -> None:
            if waiting(event):
                await s.cancel()

        r = await s.prompt("wait", on_update=cancel_when_waiting)
        assert r.stop_reason == "cancelled"
        with pytest.raises(Conflict):
            await s.cancel()

        whole = await s.transcript()
        assert bare(whole[-3:]) == bare(await s.transcript(after=len(whole) - 3))
        async with s.events(after=len(whole) - 3) as stream:
            got = [await stream.__anext__() for _ in range(3)]
        assert got == bare(whole[-3:])
        with pytest.raises(NotFound):
            await haclient.approvals.answer(NO_SUCH_APPROVAL, "a2")
    finally:
        await s.delete()
    with pytest.raises(NotFound):
        await agent.sessions.get(s.id)


async def test_async_timeout_and_errors(haclient: AsyncClient, hagent: Agent) -> None:
    agent = await haclient.agents.get(hagent.id)
    with pytest.raises(InvalidRequest):
        await agent.sessions.create(harness="no-such-harness")
    s = await agent.sessions.create()
    try:
        with pytest.raises(TurnTimeout) as info:
            await s.prompt("wait", timeout=1.0)
        await s.cancel()
        partial = info.value.result.events
        after = partial[-1].seq if partial else 0
        async with s.events(after=after) as events:
            async for event in events:
                if isinstance(event, TurnEvent) and event.ended:
                    assert event.stop_reason == "cancelled"
                    break
    finally:
        await s.delete()
