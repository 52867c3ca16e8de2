"""The API's bodies as typed, immutable values.

Each class reads its JSON with ``from_json``, which is lenient on purpose: a field a newer or
older server lacks takes its empty value and an unknown field is ignored, so one client works
across server versions. Times become aware ``datetime`` objects (UTC). Each field is its wire
field's snake_case name (``memory_mb`` for ``memoryMb``); the tests hold every class to the
schema it reads, as generated from the OpenAPI document into ``_wire.py``.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from ._decode import decode, read

__all__ = [
    "AgentState",
    "EgressRules",
    "PullProgress",
    "AgentInfo",
    "SetupStatus",
    "Preset",
    "Health",
    "Limits",
    "CommandResult",
    "Process",
    "OutputChunk",
    "OutputGap",
    "DirEntry",
    "TerminalSession",
    "AgentEvent",
    "DeletedEvent",
    "PullEvent",
    "EgressEvent",
    "ProcessEvent",
    "UnknownEvent",
    "Event",
]

AgentState = Literal[
    "creating", "starting", "running", "stopping", "sleeping", "rebuilding", "destroying", "error"
]
#: States an operation is under way in: a wait goes on through them.
TRANSIENT_STATES = frozenset({"creating", "starting", "stopping", "rebuilding", "destroying"})


@dataclass(frozen=True)
class EgressRules:
    """What a sandbox may reach through the egress proxy: host names, ``*.wildcards``, CIDRs,
    ``*``, each optionally ``:PORT``. Deny wins over allow; no rule allows nothing."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> EgressRules:
        return decode(cls, d)

    def to_json(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow), "deny": list(self.deny)}


@dataclass(frozen=True)
class PullProgress:
    """An image pull under way (``status`` ``pulling``, ``done`` or ``failed``)."""

    image: str
    status: str
    layers_done: int = 0
    layers_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    #: An estimate for display, 0 to 100, that never goes down.
    percent: int = 0
    error: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> PullProgress:
        return decode(cls, d)


@dataclass(frozen=True)
class SetupStatus:
    """The preset's setup script's last run: a background process tagged ``setup`` (its
    output: ``agent.commands.process("setup")``)."""

    #: ``running``, ``done`` or ``failed``.
    state: str
    exit_code: int | None = None
    process_id: str | None = None
    #: Why it failed, when the server says.
    error: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> SetupStatus:
        return decode(cls, d)


@dataclass(frozen=True)
class Preset:
    """A preset from ``GET /api/v1/presets``, with the server's defaults filled in."""

    name: str
    description: str | None
    image: str
    cpus: float
    memory_mb: int
    disk_mb: int | None
    idle_minutes: int
    env: dict[str, str]
    egress: EgressRules | None
    setup: str | None
    setup_on_rebuild: bool
    runtime: str | None
    #: The preset a create that names none gets.
    default: bool

    @classmethod
    def from_json(cls, d: Any) -> Preset:
        return decode(cls, d)


@dataclass(frozen=True)
class AgentInfo:
    """An agent as the server last described it (``GET /api/v1/agents/{id}``)."""

    id: str
    name: str
    state: str
    image: str = ""
    cpus: float = 0.0
    memory_mb: int = 0
    #: The home's size limit in MiB; ``None`` when the home has no limit.
    disk_mb: int | None = None
    egress: EgressRules | None = None
    #: The container runtime: ``runc`` (Docker's own) or ``runsc`` (gVisor), say.
    runtime: str = ""
    #: Minutes without use before the agent sleeps; 0 = never.
    idle_minutes: int = 0
    #: The last failure's message while ``state`` is ``error``.
    error: str | None = None
    needs_rebuild: bool = False
    created_at: datetime | None = None
    last_activity_at: datetime | None = None
    sleeps_at: datetime | None = None
    pull: PullProgress | None = None
    #: The preset the agent was made from.
    preset: str | None = None
    #: Variables every process of the agent starts with.
    env: dict[str, str] = field(default_factory=dict)
    #: The setup script's last run; ``None`` when it has none or it has not run yet.
    setup: SetupStatus | None = None

    @classmethod
    def from_json(cls, d: Any) -> AgentInfo:
        return decode(cls, d)


@dataclass(frozen=True)
class Health:
    """``GET /api/v1/health``: answered without a token."""

    status: str
    version: str
    driver: str

    @classmethod
    def from_json(cls, d: Any) -> Health:
        return decode(cls, d)


@dataclass(frozen=True)
class Limits:
    """``GET /api/v1/limits``: what the server allows, to check input before sending it."""

    default_image: str
    default_cpus: float
    default_memory_mb: int
    default_idle_minutes: int
    max_cpus: float
    max_memory_mb: int
    default_disk_mb: int | None
    max_disk_mb: int | None
    tmp_mb: int | None
    rootfs_mb: int | None
    max_idle_minutes: int
    max_file_mb: int
    exec_output_cap_kb: int
    exec_default_timeout_ms: int
    exec_max_timeout_ms: int
    #: The container runtimes an agent may ask for, the default first.
    runtimes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> Limits:
        return decode(cls, d)


@dataclass(frozen=True)
class CommandResult:
    """A finished command (``POST …/exec``). ``exit_code`` is 128 + N when signal N ended it."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    #: The server killed it at its timeout (``exit_code`` is then 137).
    timed_out: bool = False
    duration_ms: int = 0
    #: Output beyond the server's cap (``exec_output_cap_kb``) was cut; never with callbacks.
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def from_json(
        cls, d: Any, stdout: str | None = None, stderr: str | None = None
    ) -> CommandResult:
        """The JSON answer, or a streamed exit line with the output gathered from its lines."""
        result = decode(cls, d)
        return dataclasses.replace(
            result,
            stdout=result.stdout if stdout is None else stdout,
            stderr=result.stderr if stderr is None else stderr,
        )


@dataclass(frozen=True)
class Process:
    """A background process as the server described it.

    ``state`` is ``running``, ``exited`` (see ``exit_code``), ``killed`` (see ``signal``) or
    ``lost`` (its sandbox stopped under it). ``output_bytes`` is the offset of the next output
    byte, ``output_start`` the oldest offset still kept.
    """

    id: str
    state: str
    command: tuple[str, ...] = ()
    tag: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    started_at: datetime | None = None
    ended_at: datetime | None = None
    output_bytes: int = 0
    output_start: int = 0
    keep_awake: bool = False
    stdin_open: bool = False

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, d: Any) -> Process:
        return decode(cls, d)


@dataclass(frozen=True)
class OutputChunk:
    """Bytes of a background process's output, from ``offset`` (counted over both streams)."""

    offset: int
    stream: Literal["stdout", "stderr"]
    data: bytes

    @property
    def end(self) -> int:
        """The offset after this chunk: where to resume reading."""
        return self.offset + len(self.data)

    @property
    def text(self) -> str:
        """The bytes as text (invalid UTF-8 replaced)."""
        return self.data.decode("utf-8", errors="replace")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OutputChunk:
        """A ``{offset, stream, data}`` (text) or ``{offset, stream, data64}`` (base64) line."""
        if "data64" in d:
            data = base64.b64decode(read(str, d.get("data64")))
        else:
            data = read(str, d.get("data")).encode("utf-8")
        stream: Literal["stdout", "stderr"] = "stderr" if d.get("stream") == "stderr" else "stdout"
        return cls(offset=read(int, d.get("offset")), stream=stream, data=data)


@dataclass(frozen=True)
class OutputGap:
    """Output from ``start`` to ``end`` left the server's buffer before it was read."""

    start: int
    end: int


@dataclass(frozen=True)
class DirEntry:
    """One entry of ``files.list``; ``type`` is ``file``, ``dir``, ``symlink`` or ``other``."""

    name: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: datetime | None = None

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @classmethod
    def from_json(cls, d: Any) -> DirEntry:
        return decode(cls, d)


@dataclass(frozen=True)
class TerminalSession:
    """A terminal session living in the sandbox (``GET …/terminals``)."""

    id: str
    command: str = ""
    cols: int = 0
    rows: int = 0
    created_at: datetime | None = None
    last_input_at: datetime | None = None
    viewers: int = 0
    #: Output so far in bytes: the offset of the next byte.
    offset: int = 0
    exit_code: int | None = None

    @classmethod
    def from_json(cls, d: Any) -> TerminalSession:
        return decode(cls, d)


# The events of GET /api/v1/events. Each has a fixed ``kind`` (the SSE event name) except
# UnknownEvent, which carries whatever a newer server sends so that nothing is dropped.


@dataclass(frozen=True)
class AgentEvent:
    """An agent changed (or is in the snapshot sent when the stream opens)."""

    kind: ClassVar[str] = "agent"
    agent: AgentInfo

    @property
    def id(self) -> str:
        return self.agent.id


@dataclass(frozen=True)
class DeletedEvent:
    """Agent ``id`` is gone for good."""

    kind: ClassVar[str] = "deleted"
    id: str


@dataclass(frozen=True)
class PullEvent:
    """Progress of agent ``id``'s image pull."""

    kind: ClassVar[str] = "pull"
    id: str
    progress: PullProgress


@dataclass(frozen=True)
class EgressEvent:
    """A decision of the egress proxy for agent ``id`` (and one more when a connection closes)."""

    kind: ClassVar[str] = "egress"
    id: str
    host: str
    port: int
    allowed: bool
    rule: str | None = None
    reason: str | None = None
    closed: bool = False
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass(frozen=True)
class ProcessEvent:
    """A background process of agent ``id`` started or ended."""

    kind: ClassVar[str] = "process"
    id: str
    process: Process


@dataclass(frozen=True)
class UnknownEvent:
    """An event this client does not know (from a newer server), passed through as it came."""

    kind: str
    data: Any = field(default=None)


Event = AgentEvent | DeletedEvent | PullEvent | EgressEvent | ProcessEvent | UnknownEvent


def parse_event(kind: str, data: Any) -> Event:
    """The typed event for an SSE event name and its decoded JSON data."""
    d = data if isinstance(data, dict) else {}
    if kind == "agent" and d:
        return AgentEvent(AgentInfo.from_json(d))
    if kind == "deleted" and d:
        return decode(DeletedEvent, d)
    if kind == "pull" and d:
        # The progress's fields stand beside the agent's id.
        return PullEvent(read(str, d.get("id")), PullProgress.from_json(d))
    if kind == "egress" and d:
        return decode(EgressEvent, d)
    if kind == "process" and d:
        return decode(ProcessEvent, d)
    return UnknownEvent(kind, data)
