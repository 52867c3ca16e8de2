"""``client.agents`` and the agent handle: create, find, change and drive agents.

The server addresses agents by id; people name them. Every call here takes either, and the
handle it returns always talks to the agent by id, so a rename does not lose it. Lifecycle
calls (``create``, ``start``, ``stop``, ``rebuild``, ``destroy``) wait by default for the
state they lead to, following the server's events up to ``timeout`` seconds, so that the next
call finds the agent settled (a create the server answers ``running``, from a warm pool, has
nothing to wait for); ``wait=False`` returns as soon as the server took the operation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, cast

import httpx

from ._http import AsyncTransport, SyncTransport, seg
from ._wait import AT_REST, Deadline, wait_async, wait_sync
from .code import (
    AsyncCode,
    AsyncResultCallback,
    AsyncTextCallback,
    Code,
    ResultCallback,
    TextCallback,
)
from .commands import AsyncCommands, Commands
from .errors import Conflict, NotFound
from .files import AsyncFiles, Files
from .members import AsyncMembers, Members
from .models import (
    TRANSIENT_STATES,
    AgentAccess,
    AgentInfo,
    AgentState,
    CodeContext,
    EgressLogEntry,
    EgressRules,
    Execution,
    ListeningPort,
    Preset,
    PullProgress,
    SetupStatus,
)
from .previews import AsyncPreviews, Previews, async_host_of, host_of
from .sessions import AsyncSessions, Sessions
from .terminals import AsyncTerminals, Terminals

__all__ = [
    "Agents",
    "AsyncAgents",
    "Agent",
    "AsyncAgent",
    "Presets",
    "AsyncPresets",
    "Egress",
    "AgentEgress",
    "AsyncAgentEgress",
    "DEFAULT_WAIT",
]

#: Seconds a lifecycle call waits for its state by default: an image pull can take minutes.
DEFAULT_WAIT = 600.0

Egress = EgressRules | Mapping[str, Sequence[str]]

#: How long a ``start`` request may take: the server waits for a stop under way to end (at
#: most its ``server.wake_timeout``, 60 s by default) before it answers.
START_REQUEST_TIMEOUT = httpx.Timeout(150.0, connect=15.0)


def _egress(value: Egress) -> dict[str, list[str]]:
    if isinstance(value, EgressRules):
        return value.to_json()
    unknown = set(value) - {"allow", "deny"}
    if unknown:
        raise ValueError(f"egress takes allow and deny, not {', '.join(sorted(unknown))}")
    return {k: list(v) for k, v in value.items()}


def _egress_change(
    rules: EgressRules | None,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    remove: Sequence[str] = (),
) -> dict[str, list[str]]:
    """The lists a change touches, as ``agenthold egress --allow/--deny/--remove`` computes
    them: removals first, then additions (each once). Only the lists that change are sent, and
    a ``PATCH`` keeps the lists it does not name."""
    rules = rules or EgressRules()
    change: dict[str, list[str]] = {}
    for key, old, add in (("allow", rules.allow, allow), ("deny", rules.deny, deny)):
        new = [r for r in old if r not in remove]
        for r in add:
            if r not in new:
                new.append(r)
        if new != list(old):
            change[key] = new
    return change


def _settings(**fields: Any) -> dict[str, Any]:
    """The request body: the fields given, in the API's camelCase."""
    names = {
        "memory_mb": "memoryMb",
        "disk_mb": "diskMb",
        "idle_minutes": "idleMinutes",
        "deep_sleep_minutes": "deepSleepMinutes",
        "ttl_minutes": "ttlMinutes",
        "allow_root": "allowRoot",
    }
    body: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if key == "egress":
            value = _egress(value)
        elif key in ("env", "labels"):
            value = dict(value)
        elif key == "secrets":
            value = list(value)
        body[names.get(key, key)] = value
    return body


#: A label filter: ``"key=value"`` or ``"key"`` (any value), several of them, or a mapping
#: (a ``None`` value matches any).
LabelFilter = str | Sequence[str] | Mapping[str, str | None]


def _filters(
    label: LabelFilter | None, state: str | None, preset: str | None, name: str | None = None
) -> dict[str, Any]:
    """The query of ``GET /api/v1/agents``: every filter given must hold."""
    labels: list[str] = []
    if isinstance(label, str):
        labels = [label]
    elif isinstance(label, Mapping):
        labels = [k if v is None else f"{k}={v}" for k, v in label.items()]
    elif label is not None:
        labels = list(label)
    params: dict[str, Any] = {}
    if labels:
        params["label"] = labels
    for key, value in (("state", state), ("preset", preset), ("name", name)):
        if value is not None:
            params[key] = value
    return params


def _pick(agents: list[AgentInfo], name_or_id: str) -> AgentInfo:
    """The agent with this id, else the one with this name (not one being destroyed, which
    may share its name with a newer agent)."""
    for a in agents:
        if a.id == name_or_id:
            return a
    named = [a for a in agents if a.name == name_or_id]
    named.sort(key=lambda a: a.state == "destroying")
    if named:
        return named[0]
    raise NotFound(f"no agent named or with id {name_or_id!r}", code="not_found", status=404)


#: Every state the server may name (a header naming another is ignored).
AGENT_STATES = frozenset(typing.get_args(AgentState))


def _busy(agent: AgentInfo) -> bool:
    """An operation is under way: a destroy must wait for it (or is one)."""
    return agent.state in TRANSIENT_STATES


class _AgentView:
    """The agent's fields, read from the last :class:`AgentInfo` the server sent."""

    info: AgentInfo

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def state(self) -> str:
        return self.info.state

    @property
    def image(self) -> str:
        return self.info.image

    @property
    def cpus(self) -> float:
        return self.info.cpus

    @property
    def memory_mb(self) -> int:
        return self.info.memory_mb

    @property
    def disk_mb(self) -> int | None:
        return self.info.disk_mb

    @property
    def runtime(self) -> str:
        return self.info.runtime

    @property
    def idle_minutes(self) -> int:
        return self.info.idle_minutes

    @property
    def error(self) -> str | None:
        return self.info.error

    @property
    def needs_rebuild(self) -> bool:
        return self.info.needs_rebuild

    @property
    def created_at(self) -> datetime | None:
        return self.info.created_at

    @property
    def last_activity_at(self) -> datetime | None:
        return self.info.last_activity_at

    @property
    def sleeps_at(self) -> datetime | None:
        return self.info.sleeps_at

    @property
    def pull(self) -> PullProgress | None:
        return self.info.pull

    @property
    def preset(self) -> str | None:
        return self.info.preset

    @property
    def env(self) -> dict[str, str]:
        return self.info.env

    @property
    def secrets(self) -> tuple[str, ...]:
        """The names of the secrets granted to the agent (never values)."""
        return self.info.secrets

    @property
    def setup(self) -> SetupStatus | None:
        return self.info.setup

    @property
    def ttl_minutes(self) -> int | None:
        return self.info.ttl_minutes

    @property
    def expires_at(self) -> datetime | None:
        return self.info.expires_at

    @property
    def labels(self) -> dict[str, str]:
        return self.info.labels

    @property
    def _path(self) -> str:
        return f"/agents/{seg(self.info.id)}"

    def state_heard(self, state: str) -> None:
        """The server said the agent is in ``state`` after a request of its (one that woke it,
        say): the handle follows, without a :meth:`refresh`."""
        if state in AGENT_STATES and state != self.info.state:
            self.info = dataclasses.replace(self.info, state=cast(AgentState, state))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.info.name} ({self.info.id}) {self.info.state}>"


class _EgressView:
    """An agent's egress rules as last seen, and what a change sends."""

    _agent: _AgentView

    @property
    def rules(self) -> EgressRules | None:
        """The rules as last seen (``None`` only from a server older than egress rules)."""
        return self._agent.info.egress

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.rules!r}>"


class AgentEgress(_EgressView):
    """``agent.egress``: what the sandbox may reach, changed a list at a time as
    ``agenthold egress AGENT --allow/--deny/--remove`` does. Each call reads the agent's
    rules afresh and sends only the list it changes, so the other stays as the server has it.
    """

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def _change(
        self, allow: Sequence[str] = (), deny: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> EgressRules:
        agent = self._agent
        assert isinstance(agent, Agent)
        change = _egress_change(agent.refresh().info.egress, allow, deny, remove)
        if change:
            agent.update(egress=change)
        return agent.info.egress or EgressRules()

    def allow(self, *rules: str) -> EgressRules:
        """Adds ``rules`` to the allow list (each once); returns the rules now."""
        return self._change(allow=rules)

    def deny(self, *rules: str) -> EgressRules:
        """Adds ``rules`` to the deny list (each once); returns the rules now."""
        return self._change(deny=rules)

    def remove(self, *rules: str) -> EgressRules:
        """Removes ``rules`` from both lists; returns the rules now."""
        return self._change(remove=rules)

    def log(self) -> list[EgressLogEntry]:
        """The agent's last 200 egress decisions, oldest first (kept in the server's memory:
        empty after it restarts)."""
        agent = self._agent
        assert isinstance(agent, Agent)
        got = agent._t.json("GET", f"{agent._path}/egress/log")
        return [EgressLogEntry.from_json(e) for e in got]


class AsyncAgentEgress(_EgressView):
    """:class:`AgentEgress` for the async client."""

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent

    async def _change(
        self, allow: Sequence[str] = (), deny: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> EgressRules:
        agent = self._agent
        assert isinstance(agent, AsyncAgent)
        change = _egress_change((await agent.refresh()).info.egress, allow, deny, remove)
        if change:
            await agent.update(egress=change)
        return agent.info.egress or EgressRules()

    async def allow(self, *rules: str) -> EgressRules:
        """Adds ``rules`` to the allow list (each once); returns the rules now."""
        return await self._change(allow=rules)

    async def deny(self, *rules: str) -> EgressRules:
        """Adds ``rules`` to the deny list (each once); returns the rules now."""
        return await self._change(deny=rules)

    async def remove(self, *rules: str) -> EgressRules:
        """Removes ``rules`` from both lists; returns the rules now."""
        return await self._change(remove=rules)

    async def log(self) -> list[EgressLogEntry]:
        """The agent's last 200 egress decisions, oldest first."""
        agent = self._agent
        assert isinstance(agent, AsyncAgent)
        got = await agent._t.json("GET", f"{agent._path}/egress/log")
        return [EgressLogEntry.from_json(e) for e in got]


class Agent(_AgentView):
    """One agent: its settings (as last seen), lifecycle, commands, code (Python that keeps
    its variables between runs), files, terminals, sessions (conversations with a harness)
    and previews (URLs of its ports).

    As a context manager it destroys the agent on leaving the block.
    """

    def __init__(self, transport: SyncTransport, info: AgentInfo) -> None:
        self._t = transport
        self.info = info
        transport.follow_state(info.id, self)
        self.commands = Commands(transport, info.id)
        self.code = Code(transport, info.id)
        self.files = Files(transport, info.id)
        self.terminals = Terminals(transport, info.id)
        self.sessions = Sessions(transport, info.id)
        self.previews = Previews(transport, info.id)
        self.members = Members(transport, info.id)
        self.egress = AgentEgress(self)

    def _set(self, body: Any) -> Agent:
        self.info = AgentInfo.from_json(body)
        return self

    def run_code(
        self,
        code: str,
        *,
        context: str | CodeContext | None = None,
        timeout: float | None = None,
        on_stdout: TextCallback | None = None,
        on_stderr: TextCallback | None = None,
        on_result: ResultCallback | None = None,
    ) -> Execution:
        """Runs Python in a kernel that keeps its variables between runs (E2B's
        ``run_code``): see :meth:`Code.run`. The exception the code raised is in the
        result's ``error``, not raised."""
        return self.code.run(
            code,
            context=context,
            timeout=timeout,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_result=on_result,
        )

    def ports(self) -> list[ListeningPort]:
        """The TCP ports listening in the sandbox, by port. Empty while the agent sleeps: a
        listing never wakes it."""
        return [ListeningPort.from_json(p) for p in self._t.json("GET", f"{self._path}/ports")]

    def get_host(self, port: int) -> str:
        """The host of ``port``'s preview, ``"5173-builder.localhost:8081"`` (no scheme, no
        slash), making a ``private`` preview when the port has none (E2B's ``get_host``).

        An existing preview is used whatever its access: a ``token`` one needs its token, a
        ``private`` one the admin token as ``Authorization: Bearer`` (or a person signed in to
        the web UI). ``previews.create`` chooses the access.
        """
        return host_of(self.previews, port)

    def refresh(self) -> Agent:
        """Reads the agent again."""
        return self._set(self._t.json("GET", self._path))

    def wait_for(self, state: str, timeout: float | None = DEFAULT_WAIT) -> Agent:
        """Waits until the agent is in ``state``; raises :class:`AgentFailed` when it ends in
        ``error`` (with its message) or rests in another state, :class:`WaitTimeout` when
        ``timeout`` seconds pass first."""
        got = wait_sync(self._t, self.info.id, state, timeout)
        if got is not None:
            self.info = got
        return self

    def update(
        self,
        *,
        name: str | None = None,
        image: str | None = None,
        cpus: float | None = None,
        memory_mb: int | None = None,
        disk_mb: int | None = None,
        idle_minutes: int | None = None,
        deep_sleep_minutes: int | None = None,
        egress: Egress | None = None,
        env: Mapping[str, str] | None = None,
        runtime: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_minutes: int | None = None,
        allow_root: bool | None = None,
    ) -> Agent:
        """Changes settings (``PATCH``); those left ``None`` stay. A new image, ``cpus``,
        ``memory_mb`` or ``runtime`` sets ``needs_rebuild``; new ``egress`` rules apply at
        once, each list given replacing the agent's and one left out staying
        (``egress={"allow": [...]}`` keeps ``deny``; see also ``agent.egress.allow``); a new
        ``env`` replaces the whole map, for processes started from now on, and so do new
        ``labels``. A ``ttl_minutes`` starts a new lifetime from now; 0 takes it away. A new
        ``allow_root`` gates ``user="root"`` at once and sets ``needs_rebuild``: ``sudo``
        follows at the next rebuild."""
        body = _settings(
            name=name,
            image=image,
            cpus=cpus,
            memory_mb=memory_mb,
            disk_mb=disk_mb,
            idle_minutes=idle_minutes,
            deep_sleep_minutes=deep_sleep_minutes,
            egress=egress,
            env=env,
            runtime=runtime,
            labels=labels,
            ttl_minutes=ttl_minutes,
            allow_root=allow_root,
        )
        return self._set(self._t.json("PATCH", self._path, json=body))

    def set_access(self, access: AgentAccess) -> Agent:
        """Sets who besides the owner, admins and members may see and use the agent:
        ``private``, ``protected`` or ``public``; the owner's and admins' to do
        (:class:`Forbidden` for an operator). A change ends the agent's access token."""
        return self._set(self._t.json("PATCH", self._path, json={"access": access}))

    def new_access_token(self) -> str:
        """A new access token for the ``protected`` agent, shown this once; the one before
        stops working. Others join with it (``client.join``). :class:`Conflict` when the
        agent is not protected."""
        body = self._t.json("POST", f"{self._path}/access-token")
        return cast(str, body["accessToken"])

    def keep_alive(self, ttl_minutes: int | None = None) -> Agent:
        """Restarts the agent's lifetime from now: ``ttl_minutes`` (1 to 525600), or its own
        again when ``None``; ``expires_at`` moves (E2B's ``set_timeout``)."""
        body = {} if ttl_minutes is None else {"ttlMinutes": ttl_minutes}
        return self._set(self._t.json("POST", f"{self._path}/keep-alive", json=body))

    def start(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> Agent:
        """Starts a sleeping (or failed) agent; with ``wait`` (the default), until it runs.

        One that is stopping is started once its stop is over: the server waits for that (an
        older server's ``Conflict`` is waited out here), so ``stop()`` then ``start()`` works
        whether or not the stop was waited for.
        """
        deadline = Deadline(timeout)
        while True:
            try:
                self._set(
                    self._t.json("POST", f"{self._path}/start", timeout=START_REQUEST_TIMEOUT)
                )
                break
            except Conflict:
                if self.refresh().state != "stopping":
                    raise
                wait_sync(self._t, self.info.id, AT_REST, deadline.remaining())
        return self.wait_for("running", deadline.remaining()) if wait else self

    def stop(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> Agent:
        """Puts the agent to sleep (its processes end, its files stay); with ``wait`` (the
        default), until it sleeps."""
        self._set(self._t.json("POST", f"{self._path}/stop"))
        return self.wait_for("sleeping", timeout) if wait else self

    def pause(self) -> Agent:
        """Pauses a running agent now: its sandbox is frozen, its processes, memory and
        terminal sessions kept; any use (or ``start()``) thaws it at once."""
        return self._set(self._t.json("POST", f"{self._path}/pause"))

    def rebuild(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> Agent:
        """Makes the sandbox anew from the current image and resources, keeping the home."""
        self._set(self._t.json("POST", f"{self._path}/rebuild"))
        return self.wait_for("running", timeout) if wait else self

    def rerun_setup(self) -> Agent:
        """Runs the preset's setup script again now (``Conflict`` when the agent has none, or
        it runs already); ``setup`` then says how it stands."""
        return self._set(self._t.json("POST", f"{self._path}/setup"))

    def destroy(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> None:
        """Destroys the agent: its sandbox, home and network; with ``wait`` (the default), until
        it is gone.

        The server destroys only an agent at rest, so one in the middle of an operation (still
        creating, starting…) is waited for first, up to ``timeout``; one already being
        destroyed is left to it.
        """
        deadline = Deadline(timeout)
        while True:
            try:
                self._set(self._t.json("DELETE", self._path))
                break
            except Conflict:
                if not _busy(self.refresh().info):
                    raise
                if self.state == "destroying":
                    break
                wait_sync(self._t, self.info.id, AT_REST, deadline.remaining())
        if wait:
            wait_sync(self._t, self.info.id, None, deadline.remaining())

    def __enter__(self) -> Agent:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Leaving the block need not wait for the destroy to finish.
        with contextlib.suppress(NotFound):
            self.destroy(wait=False)


class AsyncAgent(_AgentView):
    """:class:`Agent` for the async client (``async with`` destroys it on leaving)."""

    def __init__(self, transport: AsyncTransport, info: AgentInfo) -> None:
        self._t = transport
        self.info = info
        transport.follow_state(info.id, self)
        self.commands = AsyncCommands(transport, info.id)
        self.code = AsyncCode(transport, info.id)
        self.files = AsyncFiles(transport, info.id)
        self.terminals = AsyncTerminals(transport, info.id)
        self.sessions = AsyncSessions(transport, info.id)
        self.previews = AsyncPreviews(transport, info.id)
        self.members = AsyncMembers(transport, info.id)
        self.egress = AsyncAgentEgress(self)

    def _set(self, body: Any) -> AsyncAgent:
        self.info = AgentInfo.from_json(body)
        return self

    async def run_code(
        self,
        code: str,
        *,
        context: str | CodeContext | None = None,
        timeout: float | None = None,
        on_stdout: AsyncTextCallback | None = None,
        on_stderr: AsyncTextCallback | None = None,
        on_result: AsyncResultCallback | None = None,
    ) -> Execution:
        """See :meth:`Agent.run_code`."""
        return await self.code.run(
            code,
            context=context,
            timeout=timeout,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_result=on_result,
        )

    async def ports(self) -> list[ListeningPort]:
        """See :meth:`Agent.ports`."""
        body = await self._t.json("GET", f"{self._path}/ports")
        return [ListeningPort.from_json(p) for p in body]

    async def get_host(self, port: int) -> str:
        """See :meth:`Agent.get_host`."""
        return await async_host_of(self.previews, port)

    async def refresh(self) -> AsyncAgent:
        return self._set(await self._t.json("GET", self._path))

    async def wait_for(self, state: str, timeout: float | None = DEFAULT_WAIT) -> AsyncAgent:
        got = await wait_async(self._t, self.info.id, state, timeout)
        if got is not None:
            self.info = got
        return self

    async def update(
        self,
        *,
        name: str | None = None,
        image: str | None = None,
        cpus: float | None = None,
        memory_mb: int | None = None,
        disk_mb: int | None = None,
        idle_minutes: int | None = None,
        deep_sleep_minutes: int | None = None,
        egress: Egress | None = None,
        env: Mapping[str, str] | None = None,
        runtime: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_minutes: int | None = None,
        allow_root: bool | None = None,
    ) -> AsyncAgent:
        body = _settings(
            name=name,
            image=image,
            cpus=cpus,
            memory_mb=memory_mb,
            disk_mb=disk_mb,
            idle_minutes=idle_minutes,
            deep_sleep_minutes=deep_sleep_minutes,
            egress=egress,
            env=env,
            runtime=runtime,
            labels=labels,
            ttl_minutes=ttl_minutes,
            allow_root=allow_root,
        )
        return self._set(await self._t.json("PATCH", self._path, json=body))

    async def set_access(self, access: AgentAccess) -> AsyncAgent:
        """See :meth:`Agent.set_access`."""
        return self._set(await self._t.json("PATCH", self._path, json={"access": access}))

    async def new_access_token(self) -> str:
        """See :meth:`Agent.new_access_token`."""
        body = await self._t.json("POST", f"{self._path}/access-token")
        return cast(str, body["accessToken"])

    async def keep_alive(self, ttl_minutes: int | None = None) -> AsyncAgent:
        """See :meth:`Agent.keep_alive`."""
        body = {} if ttl_minutes is None else {"ttlMinutes": ttl_minutes}
        return self._set(await self._t.json("POST", f"{self._path}/keep-alive", json=body))

    async def start(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> AsyncAgent:
        """See :meth:`Agent.start`."""
        deadline = Deadline(timeout)
        while True:
            try:
                self._set(
                    await self._t.json("POST", f"{self._path}/start", timeout=START_REQUEST_TIMEOUT)
                )
                break
            except Conflict:
                if (await self.refresh()).state != "stopping":
                    raise
                await wait_async(self._t, self.info.id, AT_REST, deadline.remaining())
        return await self.wait_for("running", deadline.remaining()) if wait else self

    async def stop(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> AsyncAgent:
        self._set(await self._t.json("POST", f"{self._path}/stop"))
        return await self.wait_for("sleeping", timeout) if wait else self

    async def pause(self) -> AsyncAgent:
        """See :meth:`Agent.pause`."""
        return self._set(await self._t.json("POST", f"{self._path}/pause"))

    async def rebuild(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> AsyncAgent:
        self._set(await self._t.json("POST", f"{self._path}/rebuild"))
        return await self.wait_for("running", timeout) if wait else self

    async def rerun_setup(self) -> AsyncAgent:
        """See :meth:`Agent.rerun_setup`."""
        return self._set(await self._t.json("POST", f"{self._path}/setup"))

    async def destroy(self, wait: bool = True, timeout: float | None = DEFAULT_WAIT) -> None:
        """See :meth:`Agent.destroy`."""
        deadline = Deadline(timeout)
        while True:
            try:
                self._set(await self._t.json("DELETE", self._path))
                break
            except Conflict:
                if not _busy((await self.refresh()).info):
                    raise
                if self.state == "destroying":
                    break
                await wait_async(self._t, self.info.id, AT_REST, deadline.remaining())
        if wait:
            await wait_async(self._t, self.info.id, None, deadline.remaining())

    async def __aenter__(self) -> AsyncAgent:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(NotFound):
            await self.destroy(wait=False)


class Agents:
    """``client.agents``."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport

    def list(
        self,
        *,
        label: LabelFilter | None = None,
        state: str | None = None,
        preset: str | None = None,
    ) -> list[AgentInfo]:
        """The agents, oldest first; the filters given all hold: ``label`` (``"team=ml"``,
        ``"gpu"`` for any value, several, or ``{"team": "ml"}``), ``state``, ``preset``."""
        params = _filters(label, state, preset)
        return [AgentInfo.from_json(a) for a in self._t.json("GET", "/agents", params=params)]

    def join(self, agent_id: str, access_token: str) -> Agent:
        """Joins the ``protected`` agent ``agent_id`` as a ``user`` member with its access
        token (from its owner): :class:`Forbidden` for a wrong one, :class:`NotFound` for a
        private agent. The agent is found by id: it is in no list of the caller's before."""
        body = {"accessToken": access_token}
        info = self._t.json("POST", f"/agents/{seg(agent_id)}/join", json=body)
        return Agent(self._t, AgentInfo.from_json(info))

    def get(self, name_or_id: str) -> Agent:
        """The agent with this id or name (``NotFound`` if none): ``GET /agents/{id}``, then
        the agents of that name."""
        try:
            info = self._t.json("GET", f"/agents/{seg(name_or_id)}")
            return Agent(self._t, AgentInfo.from_json(info))
        except NotFound:
            named = self._t.json("GET", "/agents", params=_filters(None, None, None, name_or_id))
        return Agent(self._t, _pick([AgentInfo.from_json(a) for a in named], name_or_id))

    def create(
        self,
        name: str,
        *,
        preset: str | None = None,
        env: Mapping[str, str] | None = None,
        secrets: Sequence[str] | None = None,
        image: str | None = None,
        cpus: float | None = None,
        memory_mb: int | None = None,
        disk_mb: int | None = None,
        idle_minutes: int | None = None,
        deep_sleep_minutes: int | None = None,
        egress: Egress | None = None,
        runtime: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_minutes: int | None = None,
        allow_root: bool | None = None,
        access: AgentAccess | None = None,
        wait: bool = True,
        timeout: float | None = DEFAULT_WAIT,
    ) -> Agent:
        """Creates an agent; settings left ``None`` take the preset's (``preset``, else the
        server's default preset), else the server's defaults; ``env`` is merged over the
        preset's; ``secrets`` names secrets (``client.secrets``) granted to the agent, each seen
        in its sandbox as a variable holding a placeholder the egress proxy swaps for the value
        on the way to the secret's hosts (it replaces the preset's list); ``runtime`` is one
        of ``client.limits().runtimes``, e.g. ``"runsc"`` for
        gVisor; ``labels`` are merged over the preset's; ``ttl_minutes`` (1 to 525600) destroys
        the agent that long after its creation (see :meth:`Agent.keep_alive`);
        ``allow_root=True`` lets it become root in its sandbox (``sudo``, and
        ``commands.run(..., user="root")``; the ``dev`` preset's default). With ``wait``
        it returns once the agent runs (raising :class:`AgentFailed` with the reason if it ends
        in ``error``, e.g. a missing image; the agent stays, see ``AgentFailed.agent``);
        without, at once, in ``creating``. A create that claims a sandbox of the preset's warm
        pool (``client.pool()``) is answered ``running`` with ``warm`` true, and returns
        at once either way: no events are followed and the agent is not read again."""
        body = _settings(
            name=name,
            preset=preset,
            env=env,
            secrets=secrets,
            image=image,
            cpus=cpus,
            memory_mb=memory_mb,
            disk_mb=disk_mb,
            idle_minutes=idle_minutes,
            deep_sleep_minutes=deep_sleep_minutes,
            egress=egress,
            runtime=runtime,
            labels=labels,
            ttl_minutes=ttl_minutes,
            allow_root=allow_root,
            access=access,
        )
        agent = Agent(self._t, AgentInfo.from_json(self._t.json("POST", "/agents", json=body)))
        # A claim from the preset's warm pool answers `running` already: nothing to wait for.
        if not wait or agent.state == "running":
            return agent
        return agent.wait_for("running", timeout)


class AsyncAgents:
    """``client.agents`` of the async client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(
        self,
        *,
        label: LabelFilter | None = None,
        state: str | None = None,
        preset: str | None = None,
    ) -> list[AgentInfo]:
        """See :meth:`Agents.list`."""
        params = _filters(label, state, preset)
        return [AgentInfo.from_json(a) for a in await self._t.json("GET", "/agents", params=params)]

    async def join(self, agent_id: str, access_token: str) -> AsyncAgent:
        """See :meth:`Agents.join`."""
        body = {"accessToken": access_token}
        info = await self._t.json("POST", f"/agents/{seg(agent_id)}/join", json=body)
        return AsyncAgent(self._t, AgentInfo.from_json(info))

    async def get(self, name_or_id: str) -> AsyncAgent:
        """See :meth:`Agents.get`."""
        try:
            info = await self._t.json("GET", f"/agents/{seg(name_or_id)}")
            return AsyncAgent(self._t, AgentInfo.from_json(info))
        except NotFound:
            named = await self._t.json(
                "GET", "/agents", params=_filters(None, None, None, name_or_id)
            )
        return AsyncAgent(self._t, _pick([AgentInfo.from_json(a) for a in named], name_or_id))

    async def create(
        self,
        name: str,
        *,
        preset: str | None = None,
        env: Mapping[str, str] | None = None,
        secrets: Sequence[str] | None = None,
        image: str | None = None,
        cpus: float | None = None,
        memory_mb: int | None = None,
        disk_mb: int | None = None,
        idle_minutes: int | None = None,
        deep_sleep_minutes: int | None = None,
        egress: Egress | None = None,
        runtime: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_minutes: int | None = None,
        allow_root: bool | None = None,
        access: AgentAccess | None = None,
        wait: bool = True,
        timeout: float | None = DEFAULT_WAIT,
    ) -> AsyncAgent:
        """See :meth:`Agents.create`."""
        body = _settings(
            name=name,
            preset=preset,
            env=env,
            secrets=secrets,
            image=image,
            cpus=cpus,
            memory_mb=memory_mb,
            disk_mb=disk_mb,
            idle_minutes=idle_minutes,
            deep_sleep_minutes=deep_sleep_minutes,
            egress=egress,
            runtime=runtime,
            labels=labels,
            ttl_minutes=ttl_minutes,
            allow_root=allow_root,
            access=access,
        )
        info = AgentInfo.from_json(await self._t.json("POST", "/agents", json=body))
        agent = AsyncAgent(self._t, info)
        if not wait or agent.state == "running":
            return agent
        return await agent.wait_for("running", timeout)


class Presets:
    """``client.presets``: the templates agents can be created from."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport

    def list(self) -> list[Preset]:
        """Every preset, sorted by name."""
        return [Preset.from_json(p) for p in self._t.json("GET", "/presets")]


class AsyncPresets:
    """``client.presets`` of the async client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self) -> list[Preset]:
        return [Preset.from_json(p) for p in await self._t.json("GET", "/presets")]
