"""``agent.sessions``: conversations with a harness, a coding agent (Claude Code, Codex, …)
that the server runs in the agent's sandbox and drives over the Agent Client Protocol.

A session's transcript is a list of events numbered 1, 2, … (``seq``): the user's prompts,
the harness's ``session/update``\\ s verbatim, turns starting and ending, notices, permission
requests and their answers. :meth:`Session.prompt` starts a turn and follows the transcript
until that turn ends; :meth:`Session.events` follows it for as long as one likes, and
:meth:`Session.transcript` reads it as a list. Both followers resume a cut stream from the last
event they delivered (``Last-Event-ID``), so nothing is lost or repeated.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing, closing, suppress
from types import TracebackType
from typing import Any

import httpx

from ._decode import read
from ._http import AsyncTransport, SyncTransport, seg
from ._lines import SseDecoder, SseMessage
from ._wait import Deadline
from .approvals import answer_async, answer_sync
from .errors import AgentholdError, Conflict, NetworkError, TurnTimeout, Unavailable
from .models import (
    Approval,
    ConversationEvent,
    PermissionEvent,
    PromptEvent,
    PromptResult,
    SessionInfo,
    TurnEvent,
    UpdateEvent,
    parse_conversation_event,
)

__all__ = [
    "Sessions",
    "AsyncSessions",
    "Session",
    "AsyncSession",
    "SessionEventStream",
    "AsyncSessionEventStream",
    "Prompt",
    "UpdateCallback",
    "PermissionCallback",
    "AsyncUpdateCallback",
    "AsyncPermissionCallback",
]

#: Text, or ACP content blocks (``{"type": "text", "text": …}``, ``{"type": "image", …}``).
Prompt = str | Sequence[Mapping[str, Any]]
UpdateCallback = Callable[[ConversationEvent], Any]
#: Given a pending approval, returns the ``option_id`` to answer it with, or ``None`` to leave
#: it to someone else (a person in the web UI, another program).
PermissionCallback = Callable[[Approval], str | None]
AsyncUpdateCallback = Callable[[ConversationEvent], Any]
AsyncPermissionCallback = Callable[[Approval], Awaitable[str | None] | str | None]

HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
#: The most events one page of the JSON transcript holds (the server's bound for ``limit``).
PAGE = 10_000
#: How often in a row a cut event stream is opened again without an event in between.
MAX_RESUMES = 5
#: A silent event stream is opened again after this long: a turn may think quietly for minutes,
#: and a connection that died without a word would otherwise be waited on for ever. Reopening
#: costs nothing (it asks for what came after the last event).
SSE_READ = 60.0


def _prompt_body(prompt: Prompt | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(prompt, str):
        return {"text": prompt}
    blocks = [dict(prompt)] if isinstance(prompt, Mapping) else [dict(b) for b in prompt]
    if not blocks:
        raise ValueError("the prompt has no content blocks")
    return {"prompt": blocks}


def _seq(msg_id: str | None) -> int | None:
    try:
        return int(msg_id) if msg_id is not None else None
    except ValueError:
        return None


def _from_sse(msg: SseMessage, seq: int) -> ConversationEvent:
    try:
        data: Any = json.loads(msg.data)
    except ValueError:
        data = msg.data
    return parse_conversation_event(msg.event, data, seq)


def _from_json(item: Any) -> ConversationEvent:
    """One event of the transcript's JSON form, ``{"seq", "event", "data", "at"}``."""
    d = item if isinstance(item, dict) else {}
    return parse_conversation_event(
        read(str, d.get("event")), d.get("data"), read(int, d.get("seq")), d.get("at")
    )


def _page_params(after: int, limit: int) -> dict[str, str]:
    return {"format": "json", "after": str(after), "limit": str(limit)}


def _session_path(events_path: str) -> str:
    return events_path.removesuffix("/events")


def _last_seq_of(info: Any, seen: int) -> int:
    """The session's ``lastSeq`` (its transcript's last event), or ``seen`` if later."""
    last = info.get("lastSeq") if isinstance(info, dict) else None
    return max(seen, read(int, last)) if last is not None else seen


def _silent(e: NetworkError) -> bool:
    """The stream said nothing for a while (not: the connection failed)."""
    return isinstance(e.__cause__, httpx.ReadTimeout)


def _stream_timeout(deadline: Deadline | None, read_timeout: float | None) -> httpx.Timeout:
    read_s = read_timeout
    remaining = None if deadline is None else deadline.remaining()
    if remaining is not None:
        read_s = remaining + 0.05 if read_s is None else min(read_s, remaining + 0.05)
    return httpx.Timeout(None, connect=15.0, read=read_s)


class _Follow:
    """Where a follower of a session's events is: the last seq it delivered, and how often in
    a row its stream was cut since; shared by the sync and async loops."""

    def __init__(self, after: int) -> None:
        self.seq = after
        self.resumes = 0
        self.opened = False

    def params(self) -> dict[str, str]:
        return {"after": str(self.seq)}

    def headers(self) -> dict[str, str]:
        # A reconnection says where it stopped the standard way (the server honours it over
        # ``after``, which says the same).
        if self.opened:
            return {**HEADERS, "Last-Event-ID": str(self.seq)}
        return HEADERS

    def take(self, msg: SseMessage) -> ConversationEvent | None:
        seq = _seq(msg.id)
        if seq is not None and seq <= self.seq:
            return None  # delivered before a reconnection
        if seq is not None:
            self.seq = seq
        self.resumes = 0
        return _from_sse(msg, seq or 0)

    def cut(self, error: AgentholdError) -> float:
        """Counts a reconnection; the pause before it, or raises when reconnecting gets
        nowhere."""
        self.resumes += 1
        if self.resumes > MAX_RESUMES:
            raise error
        return min(0.1 * 2.0 ** (self.resumes - 1), 2.0)


def _ended_early() -> Unavailable:
    return Unavailable("the session's event stream ended", code="unavailable")


def _follow_sync(
    t: SyncTransport,
    path: str,
    state: _Follow,
    deadline: Deadline | None = None,
    read_timeout: float | None = SSE_READ,
) -> Generator[ConversationEvent, None, None]:
    """The session's events after ``state.seq``, live; it ends only when ``deadline`` passes."""
    while deadline is None or not deadline.expired():
        try:
            with t.stream(
                "GET",
                path,
                params=state.params(),
                headers=state.headers(),
                timeout=_stream_timeout(deadline, read_timeout),
            ) as r:
                state.opened = True
                decoder = SseDecoder()
                for chunk in t.iter_bytes(r):
                    for msg in decoder.feed(chunk):
                        event = state.take(msg)
                        if event is not None:
                            yield event
            error: AgentholdError = _ended_early()
        except NetworkError as e:
            if _silent(e):
                continue
            error = e
        time.sleep(state.cut(error))


async def _follow_async(
    t: AsyncTransport,
    path: str,
    state: _Follow,
    deadline: Deadline | None = None,
    read_timeout: float | None = SSE_READ,
) -> AsyncGenerator[ConversationEvent, None]:
    """:func:`_follow_sync` for the async client."""
    while deadline is None or not deadline.expired():
        try:
            async with t.stream(
                "GET",
                path,
                params=state.params(),
                headers=state.headers(),
                timeout=_stream_timeout(deadline, read_timeout),
            ) as r:
                state.opened = True
                decoder = SseDecoder()
                async for chunk in t.iter_bytes(r):
                    for msg in decoder.feed(chunk):
                        event = state.take(msg)
                        if event is not None:
                            yield event
            error: AgentholdError = _ended_early()
        except NetworkError as e:
            if _silent(e):
                continue
            error = e
        await asyncio.sleep(state.cut(error))


class _Turn:
    """What a prompt has seen of its turn so far."""

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.events: list[ConversationEvent] = []
        self.text: list[str] = []
        self.started = False
        self.stop_reason: str | None = None
        self.ended = False

    def add(self, event: ConversationEvent) -> None:
        self.events.append(event)
        if isinstance(event, (PromptEvent, TurnEvent)) and event.turn == self.turn:
            self.started = True
            if isinstance(event, TurnEvent) and event.ended:
                self.ended = True
                self.stop_reason = event.stop_reason or ""
        elif (
            self.started
            and isinstance(event, UpdateEvent)
            and event.session_update == "agent_message_chunk"
            and event.text is not None
        ):
            self.text.append(event.text)

    def result(self) -> PromptResult:
        return PromptResult(self.turn, self.stop_reason, "".join(self.text), tuple(self.events))

    def timed_out(self, timeout: float | None) -> TurnTimeout:
        return TurnTimeout(
            f"turn {self.turn} has not ended after {timeout} s (it goes on: cancel() stops it)",
            self.result(),
        )


def _asks(event: ConversationEvent) -> Approval | None:
    """The approval a permission event asks for, while it waits for an answer."""
    if isinstance(event, PermissionEvent) and event.approval.pending:
        return event.approval
    return None


class _SessionBase:
    info: SessionInfo

    def __init__(self, agent_id: str, info: SessionInfo) -> None:
        self.agent_id = agent_id
        #: The session as last seen (refreshed by ``refresh`` and ``rename``).
        self.info = info
        # The highest seq this handle has seen: a prompt reads the transcript from there to
        # learn where it ends before it posts.
        self._seen = 0

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def title(self) -> str:
        return self.info.title

    @property
    def harness(self) -> str:
        return self.info.harness

    @property
    def state(self) -> str:
        """``idle``, or ``running`` while a turn runs (as last seen: ``refresh()``)."""
        return self.info.state

    @property
    def running(self) -> bool:
        return self.info.running

    @property
    def _path(self) -> str:
        return f"/agents/{seg(self.agent_id)}/sessions/{seg(self.info.id)}"

    @property
    def _events_path(self) -> str:
        return f"{self._path}/events"

    def _set(self, body: Any) -> None:
        self.info = SessionInfo.from_json(body)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.info.id} {self.info.harness} {self.info.state} "
            f"title={self.info.title!r}>"
        )


class Session(_SessionBase):
    """One agent session: prompt it, follow its events, read its transcript."""

    def __init__(self, transport: SyncTransport, agent_id: str, info: SessionInfo) -> None:
        super().__init__(agent_id, info)
        self._t = transport

    def refresh(self) -> Session:
        self._set(self._t.json("GET", self._path))
        return self

    def rename(self, title: str) -> Session:
        """Sets the title (at most 200 characters)."""
        self._set(self._t.json("PATCH", self._path, json={"title": title}))
        return self

    def delete(self) -> None:
        """Deletes the session: a running turn is cancelled, the harness ended, the transcript
        deleted."""
        self._t.request("DELETE", self._path)

    def cancel(self) -> None:
        """Cancels the running turn: the harness is told (``session/cancel``), the session's
        pending approvals are resolved ``cancelled``, and the turn ends ``cancelled`` (at the
        latest 5 s later). :class:`Conflict` when no turn runs."""
        self._t.request("POST", f"{self._path}/cancel")

    def prompt(
        self,
        prompt: Prompt,
        *,
        on_update: UpdateCallback | None = None,
        on_permission: PermissionCallback | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        """Sends ``prompt`` (text, or ACP content blocks) and returns once the turn it starts
        has ended: a :class:`PromptResult` with its ``stop_reason`` and the agent's ``text``.

        ``on_update(event)`` is called with each event of the turn as it comes, in order: the
        prompt, updates, notices (``waking`` when the prompt woke the agent), permission
        requests and their resolution, the turn's end. A permission request waits for an
        answer from anyone: ``on_permission(approval)`` may give it, returning the
        ``option_id`` to choose (by id or by kind, ``approval.option_for("allow_once")``,
        never by position) or ``None`` to leave it to others (the web UI,
        ``client.approvals.answer``). An approval answered before ours is left as it is (the
        first answer wins); an option it did not offer raises :class:`InvalidRequest` (the
        question stays open). Unanswered, it expires at the server's ``approval_timeout``
        with its ``reject_once`` option: silence is never consent.

        :class:`Conflict` when a turn runs already. :class:`TurnTimeout` (with what the turn
        did so far) when ``timeout`` seconds pass first; the turn goes on (``cancel()``).
        """
        body = _prompt_body(prompt)
        deadline = Deadline(timeout)
        # Where the transcript ends now: the turn's events are the ones after it.
        state = _Follow(self._catch_up())
        turn = _Turn(read(int, self._t.json("POST", f"{self._path}/prompt", json=body).get("turn")))
        with closing(_follow_sync(self._t, self._events_path, state, deadline)) as events:
            for event in events:
                self._seen = state.seq
                turn.add(event)
                if on_update is not None:
                    on_update(event)
                approval = _asks(event)
                if approval is not None and on_permission is not None:
                    choice = on_permission(approval)
                    if choice is not None:
                        with suppress(Conflict):  # answered by someone first, or expired
                            answer_sync(self._t, approval.id, choice)
                if turn.ended:
                    return turn.result()
                if deadline.expired():
                    break
        raise turn.timed_out(timeout)

    def _catch_up(self) -> int:
        """The seq of the transcript's last event, as the session says (``lastSeq``)."""
        info = self._t.json("GET", _session_path(self._events_path))
        self._seen = _last_seq_of(info, self._seen)
        return self._seen

    def events(self, after: int = 0, read_timeout: float | None = SSE_READ) -> SessionEventStream:
        """The session's events after seq ``after`` (0: from the start), then live, as they
        happen, until closed: typed (:class:`PromptEvent`, :class:`UpdateEvent`,
        :class:`TurnEvent`, :class:`NoticeEvent`, :class:`PermissionEvent`,
        :class:`PermissionResolvedEvent`, :class:`UnknownConversationEvent`), each with its
        ``seq``. A cut stream is opened again with ``Last-Event-ID``, so none is lost or
        repeated; one silent for ``read_timeout`` seconds is opened again too."""
        return SessionEventStream(self._t, self._events_path, after, read_timeout)

    def transcript(self, after: int = 0, limit: int | None = None) -> list[ConversationEvent]:
        """The events after seq ``after`` as they are now (the JSON form: each has its ``at``),
        oldest first: all of them, or the first ``limit``."""
        out: list[ConversationEvent] = []
        while limit is None or len(out) < limit:
            n = PAGE if limit is None else min(PAGE, limit - len(out))
            page = self._t.json("GET", self._events_path, params=_page_params(after, n))
            got = [_from_json(x) for x in page] if isinstance(page, list) else []
            out += got
            if len(got) < n:
                break
            after = got[-1].seq
        return out


class AsyncSession(_SessionBase):
    """:class:`Session` for the async client; callbacks may be coroutine functions."""

    def __init__(self, transport: AsyncTransport, agent_id: str, info: SessionInfo) -> None:
        super().__init__(agent_id, info)
        self._t = transport

    async def refresh(self) -> AsyncSession:
        self._set(await self._t.json("GET", self._path))
        return self

    async def rename(self, title: str) -> AsyncSession:
        self._set(await self._t.json("PATCH", self._path, json={"title": title}))
        return self

    async def delete(self) -> None:
        await self._t.request("DELETE", self._path)

    async def cancel(self) -> None:
        """See :meth:`Session.cancel`."""
        await self._t.request("POST", f"{self._path}/cancel")

    async def prompt(
        self,
        prompt: Prompt,
        *,
        on_update: AsyncUpdateCallback | None = None,
        on_permission: AsyncPermissionCallback | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        """See :meth:`Session.prompt`; ``on_update`` and ``on_permission`` may be plain
        functions or coroutine functions."""
        body = _prompt_body(prompt)
        deadline = Deadline(timeout)
        state = _Follow(await self._catch_up())
        accepted = await self._t.json("POST", f"{self._path}/prompt", json=body)
        turn = _Turn(read(int, accepted.get("turn")))
        events = _follow_async(self._t, self._events_path, state, deadline)
        async with aclosing(events):
            async for event in events:
                self._seen = state.seq
                turn.add(event)
                if on_update is not None:
                    await _maybe_await(on_update(event))
                approval = _asks(event)
                if approval is not None and on_permission is not None:
                    choice = await _maybe_await(on_permission(approval))
                    if choice is not None:
                        with suppress(Conflict):  # answered by someone first, or expired
                            await answer_async(self._t, approval.id, choice)
                if turn.ended:
                    return turn.result()
                if deadline.expired():
                    break
        raise turn.timed_out(timeout)

    async def _catch_up(self) -> int:
        info = await self._t.json("GET", _session_path(self._events_path))
        self._seen = _last_seq_of(info, self._seen)
        return self._seen

    def events(
        self, after: int = 0, read_timeout: float | None = SSE_READ
    ) -> AsyncSessionEventStream:
        """``async for event in session.events()``: see :meth:`Session.events`."""
        return AsyncSessionEventStream(self._t, self._events_path, after, read_timeout)

    async def transcript(self, after: int = 0, limit: int | None = None) -> list[ConversationEvent]:
        """See :meth:`Session.transcript`."""
        out: list[ConversationEvent] = []
        while limit is None or len(out) < limit:
            n = PAGE if limit is None else min(PAGE, limit - len(out))
            page = await self._t.json("GET", self._events_path, params=_page_params(after, n))
            got = [_from_json(x) for x in page] if isinstance(page, list) else []
            out += got
            if len(got) < n:
                break
            after = got[-1].seq
        return out


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class SessionEventStream:
    """Iterate for a session's events; ``close()`` (or leaving a ``with`` block) ends it.
    ``seq`` is the last event delivered: ``session.events(after=stream.seq)`` goes on from
    there later."""

    def __init__(
        self, transport: SyncTransport, path: str, after: int, read_timeout: float | None
    ) -> None:
        self._state = _Follow(after)
        self._gen = _follow_sync(transport, path, self._state, None, read_timeout)

    @property
    def seq(self) -> int:
        return self._state.seq

    def __iter__(self) -> Iterator[ConversationEvent]:
        return self._gen

    def __next__(self) -> ConversationEvent:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()

    def __enter__(self) -> SessionEventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSessionEventStream:
    """``async for`` a session's events; ``await aclose()`` (or leaving ``async with``) ends
    it. See :class:`SessionEventStream`."""

    def __init__(
        self, transport: AsyncTransport, path: str, after: int, read_timeout: float | None
    ) -> None:
        self._state = _Follow(after)
        self._gen = _follow_async(transport, path, self._state, None, read_timeout)

    @property
    def seq(self) -> int:
        return self._state.seq

    def __aiter__(self) -> AsyncIterator[ConversationEvent]:
        return self._gen

    async def __anext__(self) -> ConversationEvent:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def __aenter__(self) -> AsyncSessionEventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _create_body(harness: str | None, cwd: str | None, title: str | None) -> dict[str, str]:
    fields = {"harness": harness, "cwd": cwd, "title": title}
    return {k: v for k, v in fields.items() if v is not None}


class Sessions:
    """``agent.sessions``: the agent's conversations with harnesses."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._agent_id = agent_id
        self._base = f"/agents/{seg(agent_id)}/sessions"

    def create(
        self, harness: str | None = None, cwd: str | None = None, title: str | None = None
    ) -> Session:
        """A new session with ``harness`` (by default the agent's preset's, else the
        server's ``default_harness``; :class:`InvalidRequest` names the configured ones), run
        in ``cwd`` (absolute; the home by default). It does not wake the agent: the harness
        starts with the first prompt."""
        body = _create_body(harness, cwd, title)
        info = SessionInfo.from_json(self._t.json("POST", self._base, json=body))
        return Session(self._t, self._agent_id, info)

    def list(self) -> list[SessionInfo]:
        """The agent's sessions, oldest first."""
        return [SessionInfo.from_json(s) for s in self._t.json("GET", self._base)]

    def get(self, session_id: str) -> Session:
        """The session with this id (:class:`NotFound` if none)."""
        info = SessionInfo.from_json(self._t.json("GET", f"{self._base}/{seg(session_id)}"))
        return Session(self._t, self._agent_id, info)


class AsyncSessions:
    """``agent.sessions`` of the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._agent_id = agent_id
        self._base = f"/agents/{seg(agent_id)}/sessions"

    async def create(
        self, harness: str | None = None, cwd: str | None = None, title: str | None = None
    ) -> AsyncSession:
        """See :meth:`Sessions.create`."""
        body = _create_body(harness, cwd, title)
        info = SessionInfo.from_json(await self._t.json("POST", self._base, json=body))
        return AsyncSession(self._t, self._agent_id, info)

    async def list(self) -> list[SessionInfo]:
        return [SessionInfo.from_json(s) for s in await self._t.json("GET", self._base)]

    async def get(self, session_id: str) -> AsyncSession:
        body = await self._t.json("GET", f"{self._base}/{seg(session_id)}")
        return AsyncSession(self._t, self._agent_id, SessionInfo.from_json(body))
