"""Sessions and approvals without a server: the typed events, and ``prompt``'s bookkeeping
against a scripted one (``httpx.MockTransport``) that cuts its event stream every two events,
so that each turn is followed across reconnections (``Last-Event-ID``)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from agenthold import (
    Approval,
    ApprovalEvent,
    AsyncClient,
    Client,
    Conflict,
    NoticeEvent,
    PermissionEvent,
    PermissionResolvedEvent,
    PromptEvent,
    SessionDeletedEvent,
    SessionEvent,
    TurnEvent,
    TurnTimeout,
    UnknownConversationEvent,
    UpdateEvent,
)
from agenthold._lines import SseDecoder
from agenthold.agents import Agent, AsyncAgent
from agenthold.models import AgentInfo, ConversationEvent, parse_conversation_event, parse_event

SESSION = {
    "id": "s1",
    "agentId": "a1",
    "harness": "test",
    "title": "New session",
    "cwd": "/home/agent",
    "state": "idle",
    "acpSessionId": None,
    "restore": None,
    "processId": None,
    "createdAt": "2026-12-06T05:00:00Z",
    "updatedAt": "2026-12-06T05:00:00Z",
    "turns": 0,
}
OPTIONS = [
    {"optionId": "b7", "name": "Never", "kind": "reject_always"},
    {"optionId": "a2", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "c9", "name": "Reject", "kind": "reject_once"},
    {"optionId": "d4", "name": "Always", "kind": "allow_always"},
]


def approval(state: str = "pending", **over: Any) -> dict[str, Any]:
    return {
        "id": "ap1",
        "agentId": "a1",
        "sessionId": "s1",
        "kind": "permission",
        "toolCall": {"toolCallId": "t1", "title": "Write notes.txt", "kind": "edit"},
        "options": OPTIONS,
        "state": state,
        "createdAt": "2026-12-06T05:00:01Z",
        "expiresAt": "2026-12-06T05:10:01Z",
        "outcome": None,
        "optionId": None,
        "decidedBy": None,
        **over,
    }


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def test_the_sse_decoder_keeps_the_last_event_id() -> None:
    dec = SseDecoder()
    msgs = dec.feed(
        b"id: 7\nevent: turn\ndata: {}\n\nevent: notice\ndata: {}\n\nid: 9\ndata: x\n\n"
    )
    assert [(m.event, m.id) for m in msgs] == [("turn", "7"), ("notice", "7"), ("message", "9")]


def test_conversation_events_are_typed() -> None:
    p = parse_conversation_event(
        "prompt", {"turn": 2, "prompt": [{"type": "text", "text": "hi"}, 3]}, 5, "2026-12-06T05:00Z"
    )
    assert isinstance(p, PromptEvent) and (p.seq, p.turn, p.text) == (5, 2, "hi")
    assert p.at is not None and p.at.tzinfo is not None
    u = parse_conversation_event("update", chunk("Hel"), 6)
    assert isinstance(u, UpdateEvent) and (u.session_update, u.text, u.at) == (
        "agent_message_chunk",
        "Hel",
        None,
    )
    tool = parse_conversation_event(
        "update", {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed"}, 7
    )
    assert isinstance(tool, UpdateEvent) and (tool.text, tool.tool_call_id, tool.status) == (
        None,
        "t1",
        "failed",
    )
    t = parse_conversation_event("turn", {"turn": 2, "state": "ended", "stopReason": "end_turn"}, 8)
    assert t == TurnEvent(8, 2, "ended", "end_turn") and t.ended
    n = parse_conversation_event("notice", {"kind": "waking", "text": "Starting the sandbox…"}, 1)
    assert n == NoticeEvent(1, "waking", "Starting the sandbox…")
    perm = parse_conversation_event("permission", approval(), 9)
    assert isinstance(perm, PermissionEvent) and perm.approval.pending
    assert perm.approval.title == "Write notes.txt" and perm.approval.tool_call["kind"] == "edit"
    assert [o.option_id for o in perm.approval.options] == ["b7", "a2", "c9", "d4"]
    resolved = {"id": "ap1", "outcome": "selected", "optionId": "a2", "by": "admin"}
    done = parse_conversation_event("permission_resolved", resolved, 10)
    assert done == PermissionResolvedEvent(10, "ap1", "selected", "a2", "admin")
    assert parse_conversation_event("mood", {"x": 1}, 11) == UnknownConversationEvent(
        11, "mood", {"x": 1}
    )
    assert parse_conversation_event("turn", "garbage", 12) == UnknownConversationEvent(
        12, "turn", "garbage"
    )


def test_options_are_chosen_by_kind_never_by_position() -> None:
    a = Approval.from_json(approval())
    assert a.option_for("allow_once") == "a2"
    assert a.option_for("reject_once", "reject_always") == "c9"
    assert a.option_for("allow_always", "allow_once") == "d4"
    assert a.option_for("something_else") is None


def test_server_events_for_sessions_and_approvals() -> None:
    s = parse_event("session", {**SESSION, "state": "running", "turns": 1})
    assert isinstance(s, SessionEvent) and s.id == "s1" and s.session.running
    gone = parse_event("session_deleted", {"id": "s1", "agentId": "a1", "deleted": True})
    assert gone == SessionDeletedEvent("s1", "a1")
    a = parse_event("approval", approval())
    assert isinstance(a, ApprovalEvent) and a.id == "ap1" and a.approval.pending


class FakeSessions:
    """A scripted server: one session with a first turn done, whose second turn asks
    permission and goes on once answered. Its event stream ends after two events each time
    (a cut), so that followers must reconnect."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = [
            ("prompt", {"turn": 1, "prompt": [{"type": "text", "text": "hi"}]}),
            ("turn", {"turn": 1, "state": "started", "stopReason": None}),
            ("update", chunk("hi")),
            ("turn", {"turn": 1, "state": "ended", "stopReason": "end_turn"}),
        ]
        self.requests: list[httpx.Request] = []
        self.answers: list[str] = []

    def sse(self, after: int) -> bytes:
        out = []
        for seq, (name, data) in enumerate(self.events, 1):
            if seq > after:
                out.append(f"id: {seq}\nevent: {name}\ndata: {json.dumps(data)}\n\n")
        return (": keep-alive\n\n" + "".join(out[:2])).encode()

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, params = request.url.path, request.url.params
        if path.endswith("/events") and params.get("format") == "json":
            after, limit = int(params["after"]), int(params["limit"])
            items = [
                {"seq": seq, "event": name, "data": data, "at": "2026-12-06T05:00:00Z"}
                for seq, (name, data) in enumerate(self.events, 1)
                if seq > after
            ][:limit]
            return httpx.Response(200, json=items)
        if path.endswith("/events"):
            after = int(request.headers.get("Last-Event-ID") or params.get("after") or 0)
            return httpx.Response(
                200, content=self.sse(after), headers={"Content-Type": "text/event-stream"}
            )
        if path.endswith("/prompt"):
            assert json.loads(request.content) == {"text": "write notes"}
            self.events += [
                ("notice", {"kind": "waking", "text": "Starting the sandbox…"}),
                ("prompt", {"turn": 2, "prompt": [{"type": "text", "text": "write notes"}]}),
                ("turn", {"turn": 2, "state": "started", "stopReason": None}),
                ("update", chunk("Let me ")),
                ("update", chunk("hmm", "agent_thought_chunk")),
                ("permission", approval()),
            ]
            return httpx.Response(202, json={"turn": 2})
        if path.endswith("/approvals/ap1"):
            option = json.loads(request.content)["optionId"]
            self.answers.append(option)
            if len(self.answers) > 1:
                return httpx.Response(409, json={"error": {"code": "conflict", "message": "x"}})
            self.events += [
                ("permission_resolved", {"id": "ap1", "outcome": "selected", "optionId": option}),
                ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "t1"}),
                ("update", chunk("write it.")),
                ("turn", {"turn": 2, "state": "ended", "stopReason": "end_turn"}),
            ]
            return httpx.Response(200, json=approval("resolved", optionId=option))
        if path.endswith("/sessions/s1"):
            return httpx.Response(200, json={**SESSION, "lastSeq": len(self.events)})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})

    def sse_requests(self) -> list[tuple[str | None, str | None]]:
        return [
            (r.url.params.get("after"), r.headers.get("Last-Event-ID"))
            for r in self.requests
            if r.url.path.endswith("/events") and "format" not in r.url.params
        ]


def check_turn(fake: FakeSessions, seen: list[ConversationEvent], text: str, reason: str) -> None:
    assert (text, reason) == ("Let me write it.", "end_turn")
    assert [e.seq for e in seen] == list(range(5, 15))  # the turn's events, none before
    assert isinstance(seen[0], NoticeEvent) and isinstance(seen[-1], TurnEvent)
    assert fake.answers == ["a2"]
    # The first stream starts after the transcript's end; each reconnection says where the
    # last one stopped.
    assert fake.sse_requests() == [
        ("4", None),
        ("6", "6"),
        ("8", "8"),
        ("10", "10"),
        ("12", "12"),
    ]


def test_prompt_follows_its_turn_across_cuts_and_answers_by_option_id() -> None:
    fake = FakeSessions()
    http = httpx.Client(transport=httpx.MockTransport(fake.handle))
    with http, Client("http://mock", "t", http=http) as c:
        session = Agent(c._t, AgentInfo("a1", "x", "running")).sessions.get("s1")
        seen: list[ConversationEvent] = []
        asked: list[Approval] = []

        def decide(a: Approval) -> str | None:
            asked.append(a)
            return a.option_for("allow_once")

        r = session.prompt("write notes", on_update=seen.append, on_permission=decide)
        assert r.turn == 2 and r.ok and list(r.events) == seen
        assert [n.kind for n in r.notices] == ["waking"]
        check_turn(fake, seen, r.text, r.stop_reason or "")
        assert [a.id for a in asked] == ["ap1"]
        # A second answer loses: 409, the Conflict the caller gets from approvals.answer.
        with pytest.raises(Conflict):
            c.approvals.answer("ap1", "c9")
        # Reading the whole transcript pages through it.
        assert [e.seq for e in session.transcript(after=3, limit=4)] == [4, 5, 6, 7]
        assert len(session.transcript()) == 14
        with session.events(after=12) as stream:
            assert [next(stream).seq, next(stream).seq] == [13, 14]
            assert stream.seq == 14


async def test_async_prompt_with_coroutine_callbacks() -> None:
    fake = FakeSessions()
    http = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
    async with AsyncClient("http://mock", "t", http=http) as c:
        session = await AsyncAgent(c._t, AgentInfo("a1", "x", "running")).sessions.get("s1")
        seen: list[ConversationEvent] = []

        async def on_update(e: ConversationEvent) -> None:
            seen.append(e)

        async def decide(a: Approval) -> str | None:
            return a.option_for("allow_once")

        r = await session.prompt("write notes", on_update=on_update, on_permission=decide)
        check_turn(fake, seen, r.text, r.stop_reason or "")
        async with session.events(after=12) as stream:
            assert [(await stream.__anext__()).seq, (await stream.__anext__()).seq] == [13, 14]
        assert [e.seq for e in await session.transcript(after=10)] == [11, 12, 13, 14]
    await http.aclose()


def test_a_permission_left_to_others_is_not_answered() -> None:
    fake = FakeSessions()
    http = httpx.Client(transport=httpx.MockTransport(fake.handle))
    with http, Client("http://mock", "t", http=http) as c:
        session = Agent(c._t, AgentInfo("a1", "x", "running")).sessions.get("s1")

        def someone_else(e: ConversationEvent) -> None:
            # Another client answers first; ours then gets 409 and lets it be.
            if isinstance(e, PermissionEvent):
                c.approvals.answer(e.approval, "c9")

        r = session.prompt("write notes", on_update=someone_else, on_permission=lambda a: "a2")
    assert r.ok and fake.answers == ["c9", "a2"]


def test_a_prompt_that_runs_out_of_time_says_what_its_turn_did() -> None:
    fake = FakeSessions()
    calls: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events") and "format" not in request.url.params:
            calls.append(1)
            if len(calls) > 1:
                # The turn says no more: the stream is silent until its read times out.
                time.sleep(0.02)
                raise httpx.ReadTimeout("silent", request=request)
        return fake.handle(request)

    http = httpx.Client(transport=httpx.MockTransport(handle))
    with http, Client("http://mock", "t", http=http) as c:
        session = Agent(c._t, AgentInfo("a1", "x", "running")).sessions.get("s1")
        with pytest.raises(TurnTimeout) as info:
            session.prompt("write notes", timeout=0.3)
    partial = info.value.result
    assert (info.value.turn, partial.stop_reason) == (2, None)
    assert [e.seq for e in partial.events] == [5, 6]
    assert len(calls) > 2  # a silent stream is opened again, not given up on
