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
from urllib.parse import urlsplit

from . import _wire
from ._decode import decode, parse_time, read

__all__ = [
    "AgentAccess",
    "AgentMember",
    "AgentOwner",
    "MemberRole",
    "AgentState",
    "ProcessState",
    "RunUser",
    "ProcessResult",
    "EgressRules",
    "PullProgress",
    "AgentInfo",
    "SetupStatus",
    "Preset",
    "PoolStatus",
    "Health",
    "Limits",
    "CommandResult",
    "CodeError",
    "Result",
    "Execution",
    "CodeContext",
    "Process",
    "OutputChunk",
    "OutputGap",
    "DirEntry",
    "FileType",
    "FileInfo",
    "FileEventType",
    "FileEvent",
    "FileWritten",
    "TerminalSession",
    "ListeningPort",
    "PreviewAccess",
    "Preview",
    "SessionState",
    "SessionInfo",
    "ApprovalState",
    "ApprovalOutcome",
    "ApprovalOption",
    "Approval",
    "AgentEvent",
    "DeletedEvent",
    "PullEvent",
    "EgressEvent",
    "ExpiringEvent",
    "ProcessEvent",
    "SessionEvent",
    "SessionDeletedEvent",
    "ApprovalEvent",
    "UnknownEvent",
    "Event",
    "NoticeKind",
    "PromptEvent",
    "UpdateEvent",
    "TurnEvent",
    "NoticeEvent",
    "PermissionEvent",
    "PermissionResolvedEvent",
    "UnknownConversationEvent",
    "ConversationEvent",
    "PromptResult",
]

#: An agent's states, as the server's OpenAPI document lists them.
AgentState = _wire.AgentState
#: A background process's states: ``running``, ``exited``, ``killed``, ``lost``.
ProcessState = _wire.ProcessState
#: Who a command runs as: ``"agent"`` (the sandbox's account) or ``"root"`` (needs the agent's
#: ``allowRoot``).
RunUser = _wire.RunUser
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
    output: ``agent.commands.get("setup").output()``)."""

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
    #: The harness its agents' new sessions run (``None``: the server's default).
    harness: str | None = None
    #: The lifetime of its agents in minutes; ``None``: none.
    ttl_minutes: int | None = None
    #: Labels its agents get, under a create's own.
    labels: dict[str, str] = field(default_factory=dict)
    #: Secrets (names) granted to its agents unless a create says otherwise.
    secrets: tuple[str, ...] = ()
    #: Its agents may become root (``sudo``, ``user="root"``) unless a create says otherwise.
    allow_root: bool = False
    #: Its agents' approval settings: ``{"commands": "never" | "dangerous" | "always"}``.
    approvals: dict[str, str] = field(default_factory=dict)
    #: Minutes its idle agents stay paused before they are stopped; 0: stopped straight away.
    deep_sleep_minutes: int = 0
    #: The access policy its agents get unless a create says otherwise.
    access: AgentAccess = "private"

    @classmethod
    def from_json(cls, d: Any) -> Preset:
        return decode(cls, d)


@dataclass(frozen=True)
class PoolStatus:
    """A preset's warm pool from ``GET /api/v1/pool`` (``client.pool()``): sandboxes made and
    started ahead of need, one of which a create from the preset claims (its agent answers
    ``running`` at once, with ``warm`` true)."""

    preset: str
    #: How many the pool keeps (the preset's ``warm``; 0 for a pool being emptied); all pools
    #: together stay within the server's ``sandbox.warm_max``.
    target: int = 0
    #: Entries a create can claim now.
    ready: int = 0
    #: Entries being made and started.
    starting: int = 0

    @classmethod
    def from_json(cls, d: Any) -> PoolStatus:
        return decode(cls, d)


#: ``private``: only the owner, admins and members (everyone else gets ``NotFound``);
#: ``protected``: as private, and whoever presents its access token joins (``client.join``);
#: ``public``: anyone signed in may read and use it.
AgentAccess = Literal["private", "protected", "public"]
#: ``user``: read and use; ``operator``: also start, stop, rebuild and change settings.
MemberRole = Literal["user", "operator"]


@dataclass(frozen=True)
class AgentOwner:
    """The user who owns an agent."""

    id: str
    name: str

    @classmethod
    def from_json(cls, d: Any) -> AgentOwner:
        return decode(cls, d)


@dataclass(frozen=True)
class AgentMember:
    """A member of an agent (``agent.members``)."""

    user_id: str
    user_name: str
    role: MemberRole
    added_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Any) -> AgentMember:
        return decode(cls, d)


@dataclass(frozen=True)
class AgentInfo:
    """An agent as the server last described it (``GET /api/v1/agents/{id}``)."""

    id: str
    name: str
    state: AgentState
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
    #: Minutes an idle agent stays ``paused`` (processes and memory kept) before it is
    #: stopped; 0 = it is stopped straight away.
    deep_sleep_minutes: int = 0
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
    #: The names of the secrets granted to it (never values).
    secrets: tuple[str, ...] = ()
    #: The setup script's last run; ``None`` when it has none or it has not run yet.
    setup: SetupStatus | None = None
    #: The agent's lifetime in minutes from its creation or last keep-alive; ``None``: none.
    ttl_minutes: int | None = None
    #: When the agent will be destroyed, whatever its state; ``None`` without a TTL.
    expires_at: datetime | None = None
    #: The caller's ``key: value`` labels.
    labels: dict[str, str] = field(default_factory=dict)
    #: The agent may become root in its sandbox (``sudo``; ``user="root"`` on commands).
    allow_root: bool = False
    #: Which commands of others than its owner and admins (or of supervised tokens) wait for
    #: approval: ``{"commands": "never" | "dangerous" | "always"}``.
    approvals: dict[str, str] = field(default_factory=dict)
    #: The user who made it (``admin`` for agents from before users existed).
    owner: AgentOwner | None = None
    #: Who besides the owner, admins and members may see and use it.
    access: AgentAccess = "private"
    #: Its sandbox came from its preset's warm pool (the create claimed one started ahead).
    warm: bool = False

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
class HarnessInfo:
    """A harness (a coding agent speaking ACP) that sessions can run."""

    name: str
    description: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> HarnessInfo:
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
    #: The harnesses sessions can run.
    harnesses: tuple[HarnessInfo, ...] = ()
    #: The harness of a session whose agent's preset names none.
    default_harness: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> Limits:
        return decode(cls, d)


@dataclass(frozen=True)
class EgressDenied:
    """A destination the egress proxy refused while a command or process ran. ``rule`` is the
    deny rule that refused it, ``None`` when no allow rule matched."""

    host: str
    port: int
    rule: str | None = None


@dataclass(frozen=True)
class EgressLogEntry:
    """One of an agent's recent egress decisions (``agent.egress.log()``); ``bytes_up`` and
    ``bytes_down`` are ``None`` until an allowed connection closes; ``secret`` names the secret
    a decision was about (swapped in, or what got the request refused), never its value."""

    host: str
    port: int
    allowed: bool
    at: datetime | None = None
    rule: str | None = None
    reason: str | None = None
    bytes_up: int | None = None
    bytes_down: int | None = None
    secret: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> EgressLogEntry:
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
    #: What the egress proxy refused while it ran (each host and port once, at most 32): a
    #: download that failed with a tool's own message may have failed for this.
    egress_denied: tuple[EgressDenied, ...] = ()

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
class CodeError:
    """The exception that ended a run of code (``agent.run_code``), or why the kernel could not
    finish it: ``name`` is the exception's class (``ZeroDivisionError``), ``KernelOutOfMemory``
    or ``KernelDied`` when the kernel died (its variables are gone) and ``TimeoutError`` past
    the run's timeout. ``traceback`` is as Python prints it, without colours."""

    name: str
    value: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class Result:
    """One thing a run of code displayed, or its last expression's value: its representations
    keyed by MIME type in ``data`` (binary ones, such as ``image/png``, as base64 text, as
    E2B's are)."""

    data: dict[str, Any] = field(default_factory=dict)

    def _text(self, mime: str) -> str | None:
        value = self.data.get(mime)
        return value if isinstance(value, str) else None

    @property
    def text(self) -> str | None:
        """The ``text/plain`` representation (``"42"`` for ``41 + 1``)."""
        return self._text("text/plain")

    @property
    def html(self) -> str | None:
        return self._text("text/html")

    @property
    def markdown(self) -> str | None:
        return self._text("text/markdown")

    @property
    def png(self) -> str | None:
        """The ``image/png`` representation as base64 text (E2B's form); see :meth:`bytes`."""
        return self._text("image/png")

    @property
    def jpeg(self) -> str | None:
        return self._text("image/jpeg")

    @property
    def json(self) -> Any:
        return self.data.get("application/json")

    @property
    def formats(self) -> tuple[str, ...]:
        """The MIME types it has, in the kernel's order."""
        return tuple(self.data)

    def bytes(self, mime: str = "image/png") -> bytes | None:
        """A binary representation decoded from its base64 (``None`` when it has none)."""
        value = self._text(mime)
        return None if value is None else base64.b64decode(value)


@dataclass(frozen=True)
class Execution:
    """A finished run of code (``agent.run_code``): what it displayed and its last
    expression's value in ``results``, its output, and the exception that ended it, if any
    (which the call returns rather than raises, as E2B's does)."""

    results: tuple[Result, ...] = ()
    stdout: str = ""
    stderr: str = ""
    error: CodeError | None = None
    #: The kernel's count for this run; ``None`` when the kernel died before it counted it.
    execution_count: int | None = None
    #: Output past the server's cap (8 MiB for stdout, stderr, results and error together)
    #: was dropped.
    truncated: bool = False

    @property
    def text(self) -> str | None:
        """The text of the last expression's value (the last result's ``text/plain``)."""
        for r in reversed(self.results):
            if r.text is not None:
                return r.text
        return None

    @classmethod
    def from_json(cls, d: Any) -> Execution:
        obj = d if isinstance(d, dict) else {}
        raw = obj.get("results")
        results = (
            tuple(Result(dict(r)) for r in raw if isinstance(r, dict))
            if isinstance(raw, list)
            else ()
        )
        return dataclasses.replace(decode(cls, {**obj, "results": []}), results=results)


@dataclass(frozen=True)
class CodeContext:
    """A code context: one kernel with its own variables (``agent.code.contexts``)."""

    id: str
    language: str = "python"
    created_at: datetime | None = None
    #: Runs so far in its kernel (0 after a start or a restart).
    execution_count: int = 0
    #: Code runs in it now.
    busy: bool = False

    @classmethod
    def from_json(cls, d: Any) -> CodeContext:
        return decode(cls, d)


@dataclass(frozen=True)
class Process:
    """A background process as the server described it.

    ``state`` is ``running``, ``exited`` (see ``exit_code``), ``killed`` (see ``signal``) or
    ``lost`` (its sandbox stopped under it). ``output_bytes`` is the offset of the next output
    byte, ``output_start`` the oldest offset still kept.
    """

    id: str
    state: ProcessState
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
    #: What the egress proxy refused while it ran (kept by the server for processes it
    #: started, until it restarts).
    egress_denied: tuple[EgressDenied, ...] = ()
    #: Who it runs as: ``"agent"`` (the sandbox's account) or ``"root"``.
    user: RunUser = "agent"

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, d: Any) -> Process:
        return decode(cls, d)


@dataclass(frozen=True)
class ProcessResult:
    """An ended background process with its output: ``handle.wait(with_output=True)``.

    ``stdout`` and ``stderr`` are the output the server still kept (invalid UTF-8 replaced);
    ``incomplete`` says some had left its buffer first (``server.process_output_kb``).
    """

    process: Process
    stdout: str = ""
    stderr: str = ""
    incomplete: bool = False

    @property
    def exit_code(self) -> int | None:
        """The exit code; ``None`` when a signal ended it (``process.signal``)."""
        return self.process.exit_code

    @property
    def ok(self) -> bool:
        return self.process.state == "exited" and self.process.exit_code == 0

    @property
    def egress_denied(self) -> tuple[EgressDenied, ...]:
        """What the egress proxy refused while it ran, as for a command's result: a download
        that failed with a tool's own message may have failed for this."""
        return self.process.egress_denied


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


#: What a path is (``files.list``'s ``DirEntry.type``, ``files.stat``'s ``FileInfo.type``).
FileType = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True)
class DirEntry:
    """One entry of ``files.list``; ``type`` is ``file``, ``dir``, ``symlink`` or ``other``."""

    name: str
    type: FileType
    size: int = 0
    mode: int = 0
    mtime: datetime | None = None

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @classmethod
    def from_json(cls, d: Any) -> DirEntry:
        return decode(cls, d)


FileEventType = Literal["create", "write", "remove", "rename", "gap"]


@dataclass(frozen=True)
class FileInfo:
    """What ``files.stat`` says of a path (a symbolic link itself, not what it points to)."""

    path: str
    type: FileType
    size: int = 0
    #: The permission bits in octal, as a string: ``"0644"``.
    mode: str = ""
    mtime: datetime | None = None
    #: The owner's user name in the sandbox, or its uid when it has none.
    owner: str = ""

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @classmethod
    def from_json(cls, d: Any) -> FileInfo:
        return decode(cls, d)


@dataclass(frozen=True)
class FileEvent:
    """One change ``files.watch_dir`` reports. A rename is ``rename`` of the old path, then
    ``create`` of the new one if it is in view; ``gap`` means events were lost (read the
    directory again), ``path`` then being the directory concerned."""

    type: FileEventType
    path: str

    @classmethod
    def from_json(cls, d: Any) -> FileEvent:
        return decode(cls, d)


@dataclass(frozen=True)
class FileWritten:
    """One file of ``files.write_files``: ``error`` is ``None`` when it was written whole."""

    path: str
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_json(cls, d: Any) -> FileWritten:
        from .errors import error_for

        d = d if isinstance(d, dict) else {}
        err = d.get("error")
        return cls(
            path=str(d.get("path") or ""),
            error=error_for(None, {"error": err}) if isinstance(err, dict) else None,
        )


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


@dataclass(frozen=True)
class ListeningPort:
    """A TCP port something listens on in the sandbox (``agent.ports()``)."""

    port: int
    #: ``0.0.0.0``, ``127.0.0.1``, ``::``…: a preview reaches loopback and wildcard listeners.
    address: str = ""
    #: The command name of the process that listens, when the sandbox lets it be seen.
    process: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> ListeningPort:
        return decode(cls, d)


#: Who may open a preview: ``private`` (people signed in to the web UI, and the admin token as
#: ``Authorization: Bearer``), ``token`` (whoever has the preview's own token), ``public``.
PreviewAccess = Literal["private", "token", "public"]


@dataclass(frozen=True)
class Preview:
    """A URL, on an origin of its own (``{port}-{agent name}.{domain}``), that opens a port of
    the agent's sandbox from a browser (``agent.previews``)."""

    id: str
    port: int
    access: PreviewAccess = "private"
    #: ``http://5173-builder.localhost:8081/``.
    url: str = ""
    #: A ``token`` preview's token: set in the answer to ``previews.create`` only (the server
    #: keeps its hash). Open the preview with ``url?token=…`` once (a cookie for that host
    #: follows) or ``Authorization: Bearer …``.
    token: str | None = None
    created_at: datetime | None = None
    #: When it stops working; ``None`` when it lasts until deleted.
    expires_at: datetime | None = None

    @property
    def host(self) -> str:
        """The URL's host and port, without scheme or slash: ``5173-builder.localhost:8081``."""
        return urlsplit(self.url).netloc

    @classmethod
    def from_json(cls, d: Any) -> Preview:
        return decode(cls, d)


SessionState = Literal["idle", "running"]
ApprovalState = Literal["pending", "resolved"]
ApprovalOutcome = Literal["selected", "cancelled", "expired"]


@dataclass(frozen=True)
class SessionInfo:
    """An agent session (a conversation with a harness) as the server last described it.

    ``state`` is ``idle`` or ``running`` (a turn runs); ``restore`` says how the conversation
    was reopened the last time the harness had to start again (``resume``, ``load``, or ``new``
    when the context was reset), ``None`` until then.
    """

    id: str
    agent_id: str = ""
    #: The harness (a key of the server's ``harnesses``).
    harness: str = ""
    title: str = ""
    #: The directory the harness runs in.
    cwd: str = ""
    state: str = "idle"
    #: The harness's own id for the conversation; ``None`` until its first start.
    acp_session_id: str | None = None
    restore: str | None = None
    #: The background process running the harness (its stderr is the harness's log:
    #: ``agent.commands.get(process_id).output()``); ``None`` until it first started.
    process_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: Turns started so far (the number of the last one).
    turns: int = 0
    #: The sequence number of the transcript's last event (0 for none).
    last_seq: int = 0

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, d: Any) -> SessionInfo:
        return decode(cls, d)


@dataclass(frozen=True)
class ApprovalOption:
    """One answer a harness offers. ``kind`` is ACP's ``allow_once``, ``allow_always``,
    ``reject_once`` or ``reject_always``: choose by it or by ``option_id``, never by position."""

    option_id: str
    name: str = ""
    kind: str = ""


@dataclass(frozen=True)
class Approval:
    """A question for a person: a harness asking permission for a tool call, or a command
    (exec, background process, terminal) waiting before it runs (options ``allow`` and
    ``reject``).

    ``state`` is ``pending`` or ``resolved``; once resolved, ``outcome`` is ``selected`` (by
    ``decided_by`` ``admin``, an answer through the API), ``cancelled`` (the turn was
    cancelled: ``cancel``) or ``expired`` (nobody answered in time: ``timeout``, and
    ``option_id`` is the ``reject_once`` option chosen for it, if one was offered).
    """

    id: str
    agent_id: str = ""
    #: The session whose harness asks; ``None`` for a command.
    session_id: str | None = None
    #: ``permission`` (a harness asks) or ``command`` (an exec, process or terminal waits).
    kind: str = ""
    #: A command's line; ``None`` for a permission.
    command: str | None = None
    #: Who asked for the command (``ann (token ci)``); ``None`` for a permission.
    requester: str | None = None
    #: The ACP tool call the permission is for, verbatim (``title``, ``kind``, ``toolCallId``…);
    #: empty for a command.
    tool_call: dict[str, Any] = field(default_factory=dict)
    options: tuple[ApprovalOption, ...] = ()
    state: str = "pending"
    created_at: datetime | None = None
    #: When it expires unanswered (and is answered with its ``reject_once`` option).
    expires_at: datetime | None = None
    outcome: str | None = None
    option_id: str | None = None
    decided_by: str | None = None

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    @property
    def title(self) -> str:
        """The tool call's title, for a person to read (empty when the harness gave none)."""
        title = self.tool_call.get("title")
        return title if isinstance(title, str) else ""

    def option_for(self, *kinds: str) -> str | None:
        """The id of an offered option of the first of ``kinds`` that one has, else ``None``:
        ``approval.option_for("allow_once", "allow_always")``."""
        for kind in kinds:
            for option in self.options:
                if option.kind == kind:
                    return option.option_id
        return None

    @classmethod
    def from_json(cls, d: Any) -> Approval:
        return decode(cls, d)


@dataclass(frozen=True)
class User:
    """A user of the server: ``role`` ``admin`` or ``member``. The built-in ``admin`` is who
    the server's admin token acts as."""

    id: str
    name: str = ""
    role: str = ""
    #: Whether the user can sign in with a password.
    has_password: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Any) -> User:
        return decode(cls, d)


@dataclass(frozen=True)
class Token:
    """An API token, without the token itself (shown once, by ``client.tokens.create``).
    ``agents`` is ``None`` for a token that may see every agent its user sees."""

    id: str
    name: str = ""
    user_id: str = ""
    scopes: tuple[str, ...] = ()
    agents: tuple[str, ...] | None = None
    created_at: datetime | None = None
    #: ``None``: it never expires.
    expires_at: datetime | None = None
    #: Its commands wait for approval even where its user's would not.
    supervised: bool = False
    #: What its held commands get: ``deny``, ``ask`` or ``allow``.
    approvals: str = "ask"

    @classmethod
    def from_json(cls, d: Any) -> Token:
        return decode(cls, d)


@dataclass(frozen=True)
class AuditEntry:
    """One entry of the audit log: who (``user_name``, and ``token_name`` when a token was
    used) did ``action`` (``exec``, ``fs.write``, ``sign_in``, …) to which agent, from which
    ``address``, with what outcome (``status``, the HTTP status). ``detail`` is the command
    line, the path, the prompt's start or the option chosen, where the action has one."""

    id: int
    at: datetime | None = None
    user_id: str | None = None
    user_name: str = ""
    token_name: str | None = None
    action: str = ""
    agent_id: str | None = None
    agent_name: str | None = None
    detail: str | None = None
    address: str = ""
    status: int = 0

    @classmethod
    def from_json(cls, d: Any) -> AuditEntry:
        return decode(cls, d)


@dataclass(frozen=True)
class CreatedToken:
    """A token just made: ``token`` is the secret (send it as ``Client(token=...)``), shown
    this once; the other fields are those of :class:`Token`."""

    token: str
    id: str = ""
    name: str = ""
    user_id: str = ""
    scopes: tuple[str, ...] = ()
    agents: tuple[str, ...] | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    supervised: bool = False
    approvals: str = "ask"

    @classmethod
    def from_json(cls, d: Any) -> CreatedToken:
        return decode(cls, d)


@dataclass(frozen=True)
class Secret:
    """A secret, without its value (which never leaves the server): ``hosts`` it may be sent
    to, the ``header`` it goes in and its ``format`` (``{value}`` standing for it)."""

    name: str
    hosts: tuple[str, ...] = ()
    header: str = ""
    format: str = ""
    in_body: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Any) -> Secret:
        return decode(cls, d)


@dataclass(frozen=True)
class Me:
    """Who the client's credential is (``client.me()``): the user, the scopes in effect and,
    for an API token, the token."""

    user: User
    scopes: tuple[str, ...] = ()
    token: Token | None = None

    @classmethod
    def from_json(cls, d: Any) -> Me:
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
    #: The secret a substitution or refusal is about (never its value); ``None`` otherwise.
    secret: str | None = None


@dataclass(frozen=True)
class ExpiringEvent:
    """Agent ``id``'s lifetime is nearly up: it will be destroyed at ``expires_at`` (a
    minute before; see :meth:`Agent.keep_alive`)."""

    kind: ClassVar[str] = "expiring"
    id: str
    expires_at: datetime | None = None


@dataclass(frozen=True)
class ProcessEvent:
    """A background process of agent ``id`` started or ended."""

    kind: ClassVar[str] = "process"
    id: str
    process: Process


@dataclass(frozen=True)
class SessionEvent:
    """An agent session was created or changed (a turn started or ended, a rename)."""

    kind: ClassVar[str] = "session"
    session: SessionInfo

    @property
    def id(self) -> str:
        return self.session.id


@dataclass(frozen=True)
class SessionDeletedEvent:
    """Session ``id`` of agent ``agent_id`` was deleted."""

    kind: ClassVar[str] = "session_deleted"
    id: str
    agent_id: str = ""


@dataclass(frozen=True)
class ApprovalEvent:
    """An approval was asked for, or resolved (see its ``state``)."""

    kind: ClassVar[str] = "approval"
    approval: Approval

    @property
    def id(self) -> str:
        return self.approval.id


@dataclass(frozen=True)
class UnknownEvent:
    """An event this client does not know (from a newer server), passed through as it came."""

    kind: str
    data: Any = field(default=None)


Event = (
    AgentEvent
    | DeletedEvent
    | PullEvent
    | EgressEvent
    | ProcessEvent
    | ExpiringEvent
    | SessionEvent
    | SessionDeletedEvent
    | ApprovalEvent
    | UnknownEvent
)


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
    if kind == "expiring" and d:
        return decode(ExpiringEvent, d)
    if kind == "session" and d:
        # The Session itself, or its deletion when it says so.
        if d.get("deleted") is True:
            return decode(SessionDeletedEvent, d)
        return SessionEvent(SessionInfo.from_json(d))
    if kind == "session_deleted" and d:
        return decode(SessionDeletedEvent, d)
    if kind == "approval" and d:
        return ApprovalEvent(Approval.from_json(d))
    return UnknownEvent(kind, data)


# The events of a session's transcript (GET …/sessions/{sid}/events). Each has the session's
# sequence number ``seq`` (1, 2, …: the SSE id) and ``at``, the time it was recorded (only in
# the transcript's JSON form; ``None`` as streamed). ``event`` is the event's name on the wire;
# their payload's fields stand beside them.

NoticeKind = Literal["waking", "context_reset", "harness_exited", "gap", "error"]
#: The message kinds of ``session/update`` whose ``content`` is the text of a message.
_CHUNKS = frozenset({"agent_message_chunk", "agent_thought_chunk", "user_message_chunk"})


def _block_text(block: Any) -> str | None:
    if isinstance(block, dict) and block.get("type") == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    return None


@dataclass(frozen=True)
class PromptEvent:
    """The user's prompt that started ``turn``: ACP content blocks, as sent."""

    event: ClassVar[str] = "prompt"
    seq: int
    turn: int
    prompt: tuple[dict[str, Any], ...] = ()
    at: datetime | None = None

    @property
    def text(self) -> str:
        """The text blocks, joined by newlines (as a harness reads them)."""
        return "\n".join(t for t in map(_block_text, self.prompt) if t is not None)


@dataclass(frozen=True)
class UpdateEvent:
    """An ACP ``session/update``: ``update`` is its ``update`` object, verbatim, whose
    ``sessionUpdate`` says what it is (``agent_message_chunk``, ``agent_thought_chunk``,
    ``tool_call``, ``tool_call_update``, ``plan``, …, or a kind newer than this client)."""

    event: ClassVar[str] = "update"
    seq: int
    update: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None

    @property
    def session_update(self) -> str:
        """The update's kind, ACP's ``sessionUpdate``."""
        kind = self.update.get("sessionUpdate")
        return kind if isinstance(kind, str) else ""

    @property
    def text(self) -> str | None:
        """The text of a message or thought chunk; ``None`` for other updates (and for
        chunks of images, audio, resources)."""
        if self.session_update not in _CHUNKS:
            return None
        return _block_text(self.update.get("content"))

    @property
    def tool_call_id(self) -> str | None:
        """The tool call a ``tool_call`` or ``tool_call_update`` is about."""
        v = self.update.get("toolCallId")
        return v if isinstance(v, str) else None

    @property
    def status(self) -> str | None:
        """A tool call's status: ``pending``, ``in_progress``, ``completed``, ``failed``."""
        v = self.update.get("status")
        return v if isinstance(v, str) else None


@dataclass(frozen=True)
class TurnEvent:
    """Turn ``turn`` ``started`` or ``ended``; when it ended, ``stop_reason`` is ACP's
    ``end_turn``, ``max_tokens``, ``max_turn_requests``, ``refusal``, ``cancelled``, or
    ``error`` (the harness died, could not be reached, or failed the prompt: a
    :class:`NoticeEvent` before it says which)."""

    event: ClassVar[str] = "turn"
    seq: int
    turn: int
    state: str
    stop_reason: str | None = None
    at: datetime | None = None

    @property
    def ended(self) -> bool:
        return self.state == "ended"


@dataclass(frozen=True)
class NoticeEvent:
    """Something a person should know, in ``text``; ``kind`` is ``waking`` (the prompt woke
    the agent), ``context_reset`` (the harness could not reopen the conversation),
    ``harness_exited``, ``gap`` (older events were dropped, or harness output was lost) or
    ``error`` (the harness misbehaved or could not start)."""

    event: ClassVar[str] = "notice"
    seq: int
    kind: str
    text: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class PermissionEvent:
    """The harness asks permission for a tool call: ``approval`` waits for an answer
    (``client.approvals.answer(approval.id, option_id)``, or ``prompt(on_permission=…)``)."""

    event: ClassVar[str] = "permission"
    seq: int
    approval: Approval
    at: datetime | None = None


@dataclass(frozen=True)
class PermissionResolvedEvent:
    """Approval ``id`` was resolved: ``outcome`` ``selected`` (``option_id``), ``cancelled``
    or ``expired``; ``by`` is ``admin``, ``cancel`` or ``timeout``."""

    event: ClassVar[str] = "permission_resolved"
    seq: int
    id: str
    outcome: str
    option_id: str | None = None
    by: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class UnknownConversationEvent:
    """A transcript event this client does not know (from a newer server), as it came."""

    seq: int
    event: str
    data: Any = None
    at: datetime | None = None


ConversationEvent = (
    PromptEvent
    | UpdateEvent
    | TurnEvent
    | NoticeEvent
    | PermissionEvent
    | PermissionResolvedEvent
    | UnknownConversationEvent
)

_CONVERSATION: dict[str, type[Any]] = {
    "prompt": PromptEvent,
    "turn": TurnEvent,
    "notice": NoticeEvent,
    "permission_resolved": PermissionResolvedEvent,
}


def parse_conversation_event(name: str, data: Any, seq: int, at: Any = None) -> ConversationEvent:
    """The typed transcript event for an event name, its decoded JSON data, its seq and (in
    the JSON form) its time."""
    if not isinstance(data, dict):
        return UnknownConversationEvent(seq, name, data, parse_time(at))
    if name == "update":
        return UpdateEvent(seq, dict(data), parse_time(at))
    if name == "permission":
        return PermissionEvent(seq, Approval.from_json(data), parse_time(at))
    cls = _CONVERSATION.get(name)
    if cls is None:
        return UnknownConversationEvent(seq, name, data, parse_time(at))
    event: ConversationEvent = decode(cls, {**data, "seq": seq, "at": at})
    return event


@dataclass(frozen=True)
class PromptResult:
    """The end of a turn that ``session.prompt`` started.

    ``text`` is what the agent said: the text of the turn's ``agent_message_chunk`` updates,
    joined. ``events`` are the turn's events, in order (what ``on_update`` was given).
    ``stop_reason`` is the :class:`TurnEvent`'s (``end_turn``, ``cancelled``, ``error``, …);
    it is ``None`` only in a :class:`~agenthold.errors.TurnTimeout`'s partial result.
    """

    turn: int
    stop_reason: str | None
    text: str = ""
    events: tuple[ConversationEvent, ...] = ()

    @property
    def ok(self) -> bool:
        """The agent ended its turn normally (``end_turn``)."""
        return self.stop_reason == "end_turn"

    @property
    def notices(self) -> tuple[NoticeEvent, ...]:
        """The turn's notices: why a turn ended ``error``, that the agent was woken, …"""
        return tuple(e for e in self.events if isinstance(e, NoticeEvent))

    @property
    def updates(self) -> tuple[UpdateEvent, ...]:
        return tuple(e for e in self.events if isinstance(e, UpdateEvent))
