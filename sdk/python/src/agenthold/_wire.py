# Generated from the OpenAPI document by sdk/python/scripts/gen-models.sh.
# Do not edit: change the server, then regenerate.

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from typing_extensions import NotRequired, TypedDict


class AccessToken(TypedDict):
    """
    The answer of `POST /api/v1/agents/{id}/access-token`: shown this once.
    """

    accessToken: str


AgentAccess: TypeAlias = Literal["private", "protected", "public"]
"""
Who may see and use an agent besides its owner, admins and its members.
"""


class AgentOwner(TypedDict):
    """
    An agent's owner.
    """

    id: str
    """
    The user's id.
    """
    name: str


AgentState: TypeAlias = Literal[
    "creating",
    "starting",
    "running",
    "paused",
    "stopping",
    "sleeping",
    "rebuilding",
    "destroying",
    "error",
]
"""
Where an agent's sandbox is in its life.
"""


class AnswerApproval(TypedDict, closed=True):
    """
    `POST /api/v1/approvals/{id}`.
    """

    optionId: str
    """
    One of the approval's `options`.
    """


ApprovalKind: TypeAlias = Literal["permission", "command"]
"""
What an approval asks about.
"""


class ApprovalOption(TypedDict):
    """
    One option of an approval, as the harness offered it.
    """

    kind: str
    """
    ACP's `allow_once`, `allow_always`, `reject_once`, `reject_always` (or what the harness
    sent).
    """
    name: str
    optionId: str


ApprovalOutcome: TypeAlias = Literal["selected", "cancelled", "expired"]
"""
How an approval was resolved.
"""


ApprovalState: TypeAlias = Literal["pending", "resolved"]
"""
Whether an approval waits for an answer.
"""


AuditAction: TypeAlias = Literal[
    "agent.create",
    "agent.update",
    "agent.destroy",
    "agent.start",
    "agent.stop",
    "agent.pause",
    "agent.rebuild",
    "agent.setup",
    "exec",
    "code.run",
    "code.context.create",
    "code.context.remove",
    "code.context.restart",
    "process.start",
    "process.signal",
    "process.remove",
    "terminal.open",
    "terminal.kill",
    "fs.write",
    "fs.mkdir",
    "fs.remove",
    "fs.rename",
    "session.create",
    "session.update",
    "session.delete",
    "session.prompt",
    "session.cancel",
    "preview.create",
    "preview.delete",
    "approval.answer",
    "token.create",
    "token.revoke",
    "user.create",
    "user.update",
    "user.delete",
    "member.add",
    "member.remove",
    "access_token.rotate",
    "agent.join",
    "secret.set",
    "secret.delete",
    "config.reload",
    "sign_in",
    "sign_out",
]
"""
What an entry records: a fixed vocabulary, one word per kind of change.
"""


class AuditEntry(TypedDict):
    """
    One entry of the audit log, as it is kept and shown.
    """

    action: AuditAction
    address: str
    """
    The client's IP address.
    """
    agentId: NotRequired[str | None]
    agentName: NotRequired[str | None]
    at: str
    detail: NotRequired[str | None]
    """
    What was done, where the action has it (see `action`); never a token, password, env
    value or file contents.
    """
    id: int
    """
    Grows with time: newer entries have larger ids (the `before` cursor pages by it).
    """
    status: int
    """
    The answer's HTTP status (for a stream: the status it started with).
    """
    tokenName: NotRequired[str | None]
    """
    The API token's name, when the request came with one.
    """
    userId: NotRequired[str | None]
    """
    The user who acted; `null` for a refused sign-in (see `userName`).
    """
    userName: str
    """
    The user's name; for a refused sign-in, the name tried.
    """


class CodeContext(TypedDict):
    """
    One code context: a kernel with its own variables.
    """

    busy: bool
    """
    Code runs in it now.
    """
    createdAt: str
    """
    RFC 3339.
    """
    executionCount: int
    """
    Runs so far in its kernel (0 after a start or restart).
    """
    id: str
    language: str


class CodeError(TypedDict):
    """
    The exception that ended a run, or why the kernel could not finish it.
    """

    name: str
    """
    The exception's class (`ZeroDivisionError`); `KernelOutOfMemory` when the kernel was
    killed for memory, `KernelDied` when it died otherwise (both: its variables are gone,
    and the next run starts a new kernel), `TimeoutError` past `timeoutMs`.
    """
    traceback: str
    """
    As Python prints it, without colours.
    """
    value: str


CommandApprovals: TypeAlias = Literal["never", "dangerous", "always"]
"""
Which commands (exec, background processes, terminal opens) of an agent wait for a person's
approval when someone other than its owner or an admin, or a supervised token, makes them.
"""


class ConfigReload(TypedDict):
    """
    `POST /api/v1/admin/reload`: what reading the config file again changed, by dotted key as
    the file writes them. Both lists empty: the file says what the server runs on.
    """

    applied: list[str]
    """
    Keys whose new values are in force now: new agents, requests and the egress proxy's
    decisions from now on follow them; running agents keep what they were made with.
    """
    needsRestart: list[str]
    """
    Keys the file changed that only a restart puts in force (listeners, `server.data_dir`,
    the driver and its settings, …); the server keeps their running values until then.
    """


class CreateSession(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/sessions`.
    """

    cwd: NotRequired[str | None]
    """
    The absolute directory the harness runs in; `/home/agent` by default.
    """
    harness: NotRequired[str | None]
    """
    A harness of the config's `harnesses`; by default the agent's preset's, else
    `sandbox.default_harness`.
    """
    title: NotRequired[str | None]
    """
    At most 200 characters; "New session" by default.
    """


class DirEntry(TypedDict):
    mode: int
    """
    The permission bits (and the file type's, as `st_mode` has them).
    """
    mtime: str
    """
    RFC 3339.
    """
    name: str
    size: int
    type: str
    """
    file, dir, symlink or other
    """


AllowItem: TypeAlias = str


DenyItem: TypeAlias = str


class EgressChange(TypedDict, closed=True):
    """
    A `PATCH`'s `egress`: each list it names replaces the agent's, and a list it leaves out (or
    gives as null) stays as it is.
    """

    allow: NotRequired[list[AllowItem] | None]
    """
    The new allow list, replacing the agent's; absent or null: the agent's stays.
    """
    deny: NotRequired[list[DenyItem] | None]
    """
    The new deny list, replacing the agent's; absent or null: the agent's stays.
    """


class EgressDenied(TypedDict):
    """
    A destination the egress proxy refused while a command or process ran.
    """

    host: str
    """
    As the sandbox named it (a host name or an address).
    """
    port: int
    rule: NotRequired[str | None]
    """
    The deny rule that refused it, or null when no allow rule matched it.
    """


class EgressEvent(TypedDict):
    allowed: bool
    bytesDown: int
    """
    Bytes sent from the destination to the sandbox.
    """
    bytesUp: int
    """
    Bytes sent from the sandbox to the destination.
    """
    closed: bool
    """
    True on the event sent when an allowed connection closes; the byte counts are then final.
    """
    host: str
    """
    The destination as the sandbox named it (a host name or an address).
    """
    id: str
    """
    The agent.
    """
    port: int
    reason: NotRequired[str | None]
    """
    Why it was refused (or could not be reached), for a person to read.
    """
    rule: NotRequired[str | None]
    """
    The rule that decided, or null when no rule matched (so it was refused).
    """
    secret: NotRequired[str | None]
    """
    The secret this event is about (never its value): swapped into a request to the
    destination when `allowed`, or what got the request refused when not. Absent otherwise.
    """


class EgressLogEntry(TypedDict):
    """
    One of an agent's recent egress decisions (`GET /api/v1/agents/{id}/egress/log`).
    """

    allowed: bool
    at: str
    """
    When the proxy decided.
    """
    bytesDown: NotRequired[int | None]
    """
    Bytes sent to the sandbox, once an allowed connection has closed; null before.
    """
    bytesUp: NotRequired[int | None]
    """
    Bytes sent from the sandbox, once an allowed connection has closed; null before.
    """
    host: str
    """
    The destination as the sandbox named it (a host name or an address).
    """
    port: int
    reason: NotRequired[str | None]
    """
    Why it was refused or could not be reached, or why an allowed connection was closed.
    """
    rule: NotRequired[str | None]
    """
    The rule that decided, or null when no rule matched (so it was refused).
    """
    secret: NotRequired[str | None]
    """
    The secret the decision was about (never its value): swapped into a request when
    `allowed`, or what got the request refused when not. Absent otherwise.
    """


class EgressRules(TypedDict, closed=True):
    """
    An agent's `egress`: what its sandbox may reach through the server.
    """

    allow: NotRequired[list[AllowItem]]
    """
    Destinations the sandbox may reach: `pypi.org`, `*.pythonhosted.org`, `203.0.113.0/24`,
    `*` (any public destination), each optionally ending in `:PORT`.
    """
    deny: NotRequired[list[DenyItem]]
    """
    Destinations refused even when an allow rule matches them; same forms.
    """


class ErrorDetail(TypedDict):
    code: Literal[
        "invalid",
        "unauthorized",
        "forbidden",
        "not_found",
        "conflict",
        "too_large",
        "too_many_requests",
        "no_space",
        "unavailable",
        "internal",
        "approval_rejected",
        "approval_expired",
    ]
    """
    A machine word: invalid, unauthorized, forbidden, not_found, conflict, too_large,
    too_many_requests, no_space, unavailable, internal; approval_rejected and
    approval_expired (both `403`) for a command that waited for approval and did not get it.
    """
    field: NotRequired[str | None]
    """
    The camelCase request field the error is about, so a form can show it there.
    """
    message: str
    """
    A sentence for a person.
    """


class ExecResult(TypedDict):
    """
    The answer to an exec, once the command has ended.
    """

    durationMs: int
    egressDenied: NotRequired[list[EgressDenied]]
    """
    The destinations the egress proxy refused for the agent while the command ran (each host
    and port once, at most 32); a download that failed with a tool's own message may have
    failed for this.
    """
    exitCode: int
    """
    The command's exit status; 128 + N when signal N ended it (a timeout kills with SIGKILL).
    """
    stderr: str
    stdout: str
    timedOut: bool
    truncated: bool
    """
    Output beyond the server's cap (server.exec_output_cap_kb) was cut.
    """


class Execution(TypedDict):
    """
    The answer to a run, once it has ended.
    """

    error: NotRequired[CodeError | None]
    executionCount: NotRequired[int | None]
    """
    The kernel's count for this run; null when the kernel died before it counted it.
    """
    results: list[dict[str, Any]]
    """
    What the code displayed and the last expression's value, in order: each its
    representations keyed by MIME type (`text/plain`; `image/png` and other binary types
    as base64).
    """
    stderr: str
    stdout: str
    truncated: bool
    """
    Output past 8 MiB (stdout, stderr, results and the error together) was dropped.
    """


class ExpiringEvent(TypedDict):
    """
    The `expiring` event on `/api/v1/events`: the agent will be destroyed at `expiresAt`.
    """

    expiresAt: str
    id: str
    """
    The agent's id.
    """


FileEventKind: TypeAlias = Literal["create", "write", "remove", "rename", "gap"]
"""
What happened, in an event of `fs/watch`.
"""


class FileInfo(TypedDict):
    """
    `fs/stat`'s answer: the path itself (a symbolic link is not followed).
    """

    mode: str
    """
    The permission bits, in octal.
    """
    mtime: str
    """
    RFC 3339.
    """
    owner: str
    """
    The owner's user name in the sandbox, or its uid when it has none.
    """
    path: str
    """
    Absolute.
    """
    size: int
    type: str


class FileWritten(TypedDict):
    """
    One file of `fs/write-files`: written whole, or the error that stopped it.
    """

    error: NotRequired[ErrorDetail | None]
    path: str
    """
    As the request named it.
    """


class FilesWritten(TypedDict):
    """
    `fs/write-files`'s answer: one result per part, in the request's order.
    """

    files: list[FileWritten]


Gap = TypedDict(
    "Gap",
    {
        "from": int,
        "to": int,
    },
)


class HarnessInfo(TypedDict):
    """
    A harness sessions can run.
    """

    description: NotRequired[str | None]
    name: str


class Health(TypedDict):
    """
    `GET /api/v1/health`.
    """

    driver: NotRequired[str]
    status: NotRequired[str]
    version: NotRequired[str]


class JoinAgent(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/join`.
    """

    accessToken: str
    """
    The agent's access token, from its owner.
    """


class KeepAlive(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/keep-alive`.
    """

    ttlMinutes: NotRequired[int | None]
    """
    The new lifetime in minutes from now, 1 to 525600; absent or null: the agent's own
    `ttlMinutes` again.
    """


class Limits(TypedDict):
    """
    `GET /api/v1/limits`: what the server allows and assumes, so a client can check input
    before sending it.
    """

    defaultCpus: float
    defaultDiskMb: NotRequired[int | None]
    """
    The home size of an agent that asks for none; null when such agents get no limit.
    """
    defaultHarness: NotRequired[str | None]
    """
    The harness of a session whose agent's preset names none (`sandbox.default_harness`).
    """
    defaultIdleMinutes: int
    defaultImage: str
    defaultMemoryMb: int
    execDefaultTimeoutMs: int
    execMaxTimeoutMs: int
    execOutputCapKb: int
    harnesses: list[HarnessInfo]
    """
    The harnesses sessions can run (the config's `harnesses`), sorted by name.
    """
    maxCpus: float
    maxDiskMb: NotRequired[int | None]
    """
    The largest home one may ask for; null when this server cannot limit homes.
    """
    maxFileMb: int
    """
    The largest file `fs/write` accepts.
    """
    maxIdleMinutes: int
    maxMemoryMb: int
    rootfsMb: NotRequired[int | None]
    """
    What each sandbox may write outside its home and `/tmp` (its container's writable
    layer); null when nothing limits it on this server.
    """
    runtimes: list[str]
    """
    The container runtimes an agent may ask for (`runtime`), the default first.
    """
    tmpMb: NotRequired[int | None]
    """
    The size of each sandbox's in-memory `/tmp` and `/var/tmp`; null when they are on the
    container's own layer.
    """


class ListeningPort(TypedDict):
    """
    A TCP port something listens on inside the sandbox.
    """

    address: str
    """
    The address it listens on (`0.0.0.0`, `127.0.0.1`, `::`…). A preview reaches the
    loopback: a server listening on another address alone cannot be previewed.
    """
    port: int
    process: NotRequired[str | None]
    """
    The command name of the process that listens, when the sandbox lets it be seen.
    """


MemberRole: TypeAlias = Literal["user", "operator"]
"""
What a member of an agent may do there.
"""


NoticeKind: TypeAlias = Literal[
    "waking", "context_reset", "harness_exited", "gap", "error"
]
"""
What a notice is about.
"""


class PasswordSignIn(TypedDict, closed=True):
    name: str
    """
    A user's name.
    """
    password: str


class PathExists(TypedDict):
    """
    `fs/exists`'s answer.
    """

    exists: bool


class PermissionResolved(TypedDict):
    """
    A `permission_resolved` event.
    """

    by: str
    id: str
    """
    The approval's id.
    """
    optionId: NotRequired[str | None]
    outcome: ApprovalOutcome


class PoolInfo(TypedDict):
    """
    `GET /api/v1/pool`: one preset's warm pool, sandboxes started ahead of need that a create
    from the preset claims (answering with `warm: true`).
    """

    preset: str
    ready: int
    """
    Entries a create can claim now.
    """
    starting: int
    """
    Entries being made and started.
    """
    target: int
    """
    How many the pool keeps (the preset's `warm`; 0 for a pool being emptied); all pools
    together stay within `sandbox.warm_max`.
    """


PreviewAccess: TypeAlias = Literal["private", "token", "public"]
"""
Who may open a preview.
"""


ProcessState: TypeAlias = Literal["running", "exited", "killed", "lost"]
"""
How a process stands.
"""


class PromptAccepted(TypedDict):
    """
    `202` to a prompt: the turn it started.
    """

    turn: int


class PromptBody(TypedDict, closed=True):
    """
    `POST …/sessions/{sid}/prompt`: either `prompt` (ACP content blocks) or `text`.
    """

    prompt: NotRequired[list[dict[str, Any]] | None]
    """
    ACP `ContentBlock`s, sent to the harness as they are.
    """
    text: NotRequired[str | None]
    """
    Shorthand for one text block.
    """


PullStatus: TypeAlias = Literal["pulling", "done", "failed"]
"""
Where a pull is.
"""


Host: TypeAlias = str


class PutSecret(TypedDict, closed=True):
    """
    `PUT /api/v1/secrets/{name}`: a new secret, or a new value and description for one.
    """

    format: NotRequired[str | None]
    """
    The header's value, `{value}` (exactly once) standing for the secret; absent:
    `Bearer {value}`.
    """
    header: NotRequired[str | None]
    """
    The request header the value goes in; absent: `Authorization`.
    """
    hosts: list[Host]
    """
    The destinations the value may be sent to, as egress rules (not `*`): 1 to 32.
    """
    inBody: NotRequired[bool]
    """
    Whether a placeholder in a form or JSON request body is replaced too (default false).
    """
    value: str
    """
    The value: 1 to 16384 bytes without control characters. Kept sealed; never shown again.
    """


RenameBody = TypedDict(
    "RenameBody",
    {
        "from": str,
        "overwrite": NotRequired[bool],
        "to": str,
    },
    closed=True,
)


Restore: TypeAlias = Literal["resume", "load", "new"]
"""
How the conversation was reopened the last time its harness started again.
"""


Role: TypeAlias = Literal["admin", "member"]
"""
A user's role: admins may do everything; members everything but administration.
"""


class RunCode(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/code`.
    """

    code: str
    """
    The code; at most 1 MiB (`413` beyond). The last expression's value is a result.
    """
    context: NotRequired[str | None]
    """
    The context to run in: an id from `POST …/code/contexts`, or `default` (when absent):
    the agent's own, made on first use.
    """
    language: NotRequired[str | None]
    """
    `python`, the only language (and the default).
    """
    timeoutMs: NotRequired[int | None]
    """
    The code is interrupted after this long (1 to `server.exec_max_timeout`) and the run
    ends with a `TimeoutError`; the server's exec default applies when absent.
    """


RunUser: TypeAlias = Literal["agent", "root"]
"""
Who a command runs as.
"""


Scope: TypeAlias = Literal[
    "agents:read", "agents:write", "agents:use", "approvals:answer", "admin"
]
"""
A permission a route needs and a token may carry.
"""


class Secret(TypedDict):
    """
    A secret, as the API shows it: everything but its value.
    """

    createdAt: str
    format: str
    header: str
    hosts: list[str]
    inBody: bool
    name: str
    """
    Also the env variable granted agents see it as (holding a placeholder).
    """
    updatedAt: str
    """
    When the value or description last changed.
    """


SessionEventKind: TypeAlias = Literal[
    "prompt", "update", "turn", "notice", "permission", "permission_resolved"
]
"""
The name of a transcript event (the SSE `event:`).
"""


SessionState: TypeAlias = Literal["idle", "running"]
"""
Whether a turn runs.
"""


class SessionStatus(TypedDict):
    authenticated: bool


SetupState: TypeAlias = Literal["running", "done", "failed"]
"""
Where a setup script's run is.
"""


class SetupStatus(TypedDict):
    """
    The setup script's last run: a background process with the tag `setup`, whose output
    `GET /api/v1/agents/{id}/processes/setup/output` gives.
    """

    error: NotRequired[str | None]
    """
    Why it could not be started, or how it ended when it failed.
    """
    exitCode: NotRequired[int | None]
    """
    The script's exit status once it has ended; null while it runs or when it could not be
    started.
    """
    processId: NotRequired[str | None]
    """
    The background process's id; null when it could not be started.
    """
    state: SetupState


class SignalBody(TypedDict, closed=True):
    """
    `POST …/processes/{pid}/signal`.
    """

    signal: str
    """
    A name (`TERM`, `SIGINT`, `kill`: any case, with or without `SIG`) or a number, of the
    signals Linux numbers 1 to 31 but 16.
    """


class StartProcess(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/processes`.
    """

    command: list[str]
    """
    The program and its arguments, as `exec` takes them (no shell unless you name one; the
    same size limits, `413` beyond).
    """
    cwd: NotRequired[str | None]
    """
    Working directory; /home/agent by default.
    """
    env: NotRequired[dict[str, str]]
    """
    As `exec`'s `env`: the names an agent's `env` takes, within exec's size limits.
    """
    keepAwake: NotRequired[bool]
    """
    While it runs, the agent does not fall asleep (a quiet process otherwise lets it).
    """
    stdin: NotRequired[bool]
    """
    Keep a pipe to the process's stdin for `…/stdin`; without it, stdin is `/dev/null`.
    """
    tag: NotRequired[str | None]
    """
    A name of your own (1 to 64 of letters, digits, `.`, `_`, `-`, starting with a letter or
    digit), usable wherever an id is; two running processes of an agent cannot share one.
    """
    timeoutMs: NotRequired[int | None]
    """
    Kills the whole tree after this long (at most 30 days); none by default.
    """
    user: NotRequired[RunUser | None]


class StdinWritten(TypedDict):
    """
    The answer to `POST …/processes/{pid}/stdin`.
    """

    written: int
    """
    Bytes written to the process's stdin.
    """


class TerminalSession(TypedDict):
    cols: int
    command: str
    """
    The shell, or the command line it runs.
    """
    createdAt: str
    exitCode: NotRequired[int | None]
    """
    Set once the shell has exited; the session stays until a viewer has seen its end.
    """
    id: str
    """
    Attach with `GET …/terminal?session=ID`.
    """
    lastInputAt: str
    """
    When a viewer last typed (the creation time if nobody has).
    """
    offset: int
    """
    Output produced so far, in bytes: the offset of the next byte.
    """
    rows: int
    viewers: int
    """
    WebSockets attached right now.
    """


TokenApprovals: TypeAlias = Literal["deny", "ask", "allow"]
"""
What a token's command that would wait for approval gets instead: refused at once (`deny`,
a subagent's mode), a person's answer (`ask`), or run (`allow`, a batch job's).
"""


class TokenSignIn(TypedDict, closed=True):
    token: str
    """
    The admin token (API tokens do not open web sessions: a session has its user's whole
    role, which may be more than a token's).
    """


class TranscriptEvent(TypedDict):
    """
    One event of a session's transcript (`GET …/events?format=json`).
    """

    at: str
    """
    RFC 3339.
    """
    data: Any
    event: SessionEventKind
    seq: int
    """
    Increases by one per event of the session, from 1; the SSE `id:`.
    """


TurnState: TypeAlias = Literal["started", "ended"]
"""
Whether a turn started or ended.
"""


class UpdateSession(TypedDict, closed=True):
    """
    `PATCH /api/v1/agents/{id}/sessions/{sid}`.
    """

    title: str
    """
    At most 200 characters.
    """


class UpdateUser(TypedDict, closed=True):
    """
    `PATCH /api/v1/users/{id}`: what is absent stays as it is.
    """

    name: NotRequired[str | None]
    password: NotRequired[str | None]
    role: NotRequired[Role | None]


class User(TypedDict):
    """
    A user.
    """

    createdAt: str
    hasPassword: bool
    """
    Whether the user can sign in with a password.
    """
    id: str
    name: str
    """
    Lowercase letters, digits and `-`, like an agent's name. The built-in `admin` is who
    `server.admin_token` acts as.
    """
    role: Role
    updatedAt: str


SecretName: TypeAlias = str
"""
A secret's name: the env variable granted agents see it as.
"""


class AddMember(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/members`.
    """

    role: MemberRole
    """
    `user` (read and use) or `operator` (also start, stop, rebuild, setup and settings);
    a member already there gets this role.
    """
    user: str
    """
    The user's id or name.
    """


class AgentApprovals(TypedDict, closed=True):
    """
    An agent's approval settings.
    """

    commands: NotRequired[CommandApprovals]


class AgentMember(TypedDict):
    """
    A member of an agent.
    """

    addedAt: str
    role: MemberRole
    userId: str
    """
    The user's id.
    """
    userName: str


class Approval(TypedDict):
    """
    A question waiting for a person (or answered).
    """

    agentId: str
    command: str | None
    """
    A command's line, as one string (its arguments quoted as a POSIX shell would need);
    null for a permission.
    """
    createdAt: str
    decidedBy: NotRequired[str | None]
    """
    Who decided: the user (and token) who answered, `timeout`, `cancel` (the turn ended,
    or a command's request went away), or `restart` (a command's approval pending when the
    server stopped).
    """
    expiresAt: str
    """
    When it expires unanswered.
    """
    id: str
    kind: ApprovalKind
    optionId: NotRequired[str | None]
    options: list[ApprovalOption]
    outcome: NotRequired[ApprovalOutcome | None]
    requester: str | None
    """
    Who asked for the command: the user, and the token's name when one was used
    (`ann (token ci)`); null for a permission.
    """
    sessionId: str | None
    """
    The session whose harness asks; null for a command.
    """
    state: ApprovalState
    toolCall: Any
    """
    The ACP tool call the permission is for, verbatim; null for a command.
    """


class CreateAgent(TypedDict, closed=True):
    """
    `POST /api/v1/agents`; fields left out take the server's defaults.
    """

    access: NotRequired[AgentAccess | None]
    allowRoot: NotRequired[bool | None]
    """
    The agent may become root in its sandbox: `sudo` works (its container is made
    without `no-new-privileges`), and exec and processes accept `"user": "root"`.
    Root stays inside the container: no extra capabilities, the same network and egress
    rules. Absent: the preset's (`true` for the default config's `dev`), else `false`.
    """
    approvals: NotRequired[AgentApprovals | None]
    cpus: NotRequired[float | None]
    """
    CPUs, above 0 and at most `sandbox.max_cpus` (`sandbox.default_cpus` when absent).
    """
    deepSleepMinutes: NotRequired[int | None]
    """
    Minutes an idle agent stays paused (processes and memory kept, no CPU) before it is
    stopped, at most 10080 (a week); 0 = never paused: stopped straight away (the preset's,
    else `sandbox.default_deep_sleep_minutes`, when absent).
    """
    diskMb: NotRequired[int | None]
    """
    The home's size in MiB, 64 to `sandbox.max_disk_mb` (`sandbox.default_disk_mb` when
    absent). Not accepted by a server that cannot limit disks (`maxDiskMb` null in
    `/limits`).
    """
    egress: NotRequired[EgressRules | None]
    env: NotRequired[dict[str, str]]
    """
    Variables every process of the agent starts with, merged over the preset's (these win).
    Names `[A-Za-z_][A-Za-z0-9_]*`, at most 128; values at most 4096 characters, no NUL; the
    proxy variables and `AGENTHOLD_*` are reserved.
    """
    idleMinutes: NotRequired[int | None]
    """
    Minutes without use before the agent sleeps, at most 10080 (a week); 0 = never.
    """
    image: NotRequired[str | None]
    """
    An image reference (`sandbox.default_image` when absent): printable ASCII without
    spaces, at most 255 characters.
    """
    labels: NotRequired[dict[str, str]]
    """
    Labels, merged over the preset's (these win): keys of `[a-z0-9._/-]`, 1 to 63
    characters; values at most 256 characters; at most 64. Otherwise `400` with
    `"field": "labels"`.
    """
    memoryMb: NotRequired[int | None]
    """
    Memory in MiB, 16 to `sandbox.max_memory_mb` (`sandbox.default_memory_mb` when absent).
    """
    name: str
    """
    Unique, DNS-safe: lowercase letters, digits and `-`, at most 63.
    """
    preset: NotRequired[str | None]
    """
    A preset from `GET /api/v1/presets` (`sandbox.default_preset` when absent): the fields
    it sets apply unless this request gives them too.
    """
    runtime: NotRequired[str | None]
    """
    The container runtime (`sandbox.runtime`, or the engine's default, when absent):
    one of `runtimes` in `/limits`, such as `runc` (Docker's own) or `runsc` (gVisor, a
    kernel of its own in user space: stronger isolation, slower system calls). Another is
    `400` with `"field": "runtime"`.
    """
    secrets: NotRequired[list[SecretName] | None]
    """
    Names of secrets (`GET /api/v1/secrets`) granted to the agent, at most 64, none
    twice; replaces the preset's list (`[]` for none). Each appears in the sandbox as a
    variable of that name holding a placeholder the egress proxy swaps for the value,
    only on the way to the secret's `hosts`; it wins over an `env` variable of the same
    name. A bad list is `400`, a name that is no secret `409`, both with
    `"field": "secrets"`.
    """
    ttlMinutes: NotRequired[int | None]
    """
    The agent's lifetime in minutes, 1 to 525600 (a year): it is destroyed that long
    after its creation, whatever its state, unless a `PATCH` or a keep-alive moves the
    deadline (`expiresAt`). Absent: the preset's; null: none.
    """


class CreatePreview(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/previews`.
    """

    access: NotRequired[PreviewAccess]
    """
    `private` when absent.
    """
    expiresInMinutes: NotRequired[int | None]
    """
    The preview stops working this long after its creation (1 to 525600, a year); absent,
    it lasts until it is deleted or its agent is destroyed.
    """
    port: int
    """
    The port inside the sandbox (on its loopback).
    """


class CreateToken(TypedDict, closed=True):
    """
    `POST /api/v1/tokens`.
    """

    agents: NotRequired[list[str] | None]
    """
    Agents by id or name (at most 256) the token is limited to: every other agent does not
    exist for it. Absent: every agent the caller sees.
    """
    approvals: NotRequired[TokenApprovals | None]
    expiresInDays: NotRequired[int | None]
    """
    The token stops working this many days (1 to 3650) after now; absent, never (but no
    later than the token that makes it, when a token makes it).
    """
    name: str
    """
    1 to 64 characters, for people to tell tokens apart; no control characters.
    """
    scopes: list[Scope]
    """
    At least one; each one the caller has.
    """
    supervised: NotRequired[bool]
    """
    Its commands wait for approval wherever the agent's `approvals.commands` holds them, even
    when its user owns the agent or is an admin (unless its `approvals` is `allow`, which
    answers them in advance there, audited). A token made with a supervised token must be
    supervised (else `403`). Absent: false.
    """


class CreateUser(TypedDict, closed=True):
    """
    `POST /api/v1/users`.
    """

    name: str
    """
    Lowercase letters, digits and `-` (not at either end), at most 63 characters.
    """
    password: NotRequired[str | None]
    """
    8 to 1024 characters; absent, the user cannot sign in with a password until a `PATCH`
    sets one.
    """
    role: Role


class ErrorBody(TypedDict):
    """
    An error answer: `{"error": {"code", "message", "field"?}}` with the status of its code.
    """

    error: ErrorDetail


class ExecBody(TypedDict, closed=True):
    """
    `POST /api/v1/agents/{id}/exec`.
    """

    command: list[str]
    """
    The program and its arguments; no shell unless you name one. With `env`, at most 1 MiB
    (each argument and each `KEY=VALUE` counted with a NUL), each argument at most 131071
    bytes (Linux's limit): send a longer script as `stdin` (`["sh"]`). Beyond: `413`.
    """
    cwd: NotRequired[str | None]
    """
    Working directory; /home/agent by default.
    """
    env: NotRequired[dict[str, str]]
    """
    Counted with `command` towards its 1 MiB; each `KEY=VALUE` at most 131071 bytes. Names
    as an agent's `env` takes them (the egress proxy's variables and `AGENTHOLD_*` are
    reserved: `400`, `field` `env`, the same message).
    """
    stdin: NotRequired[str | None]
    timeoutMs: NotRequired[int | None]
    """
    Kills the whole process group after this long (1 to `server.exec_max_timeout`); the
    server's default applies when absent.
    """
    user: NotRequired[RunUser | None]


class FileEvent(TypedDict):
    """
    One event of `fs/watch`.
    """

    path: str
    """
    Absolute.
    """
    type: FileEventKind


class Notice(TypedDict):
    """
    A `notice` event.
    """

    kind: NoticeKind
    text: str


class PresetInfo(TypedDict):
    """
    `GET /api/v1/presets`: a preset with the server's defaults filled in.
    """

    access: NotRequired[AgentAccess]
    """
    The access policy its agents get, unless a create says otherwise.
    """
    allowRoot: NotRequired[bool]
    """
    Its agents may become root (`sudo`, `"user": "root"`), unless a create says otherwise.
    """
    approvals: NotRequired[AgentApprovals]
    """
    The approval settings of its agents, unless a create says otherwise.
    """
    cpus: float
    deepSleepMinutes: NotRequired[int]
    """
    How long its idle agents stay paused before they are stopped, in minutes; 0: they are
    stopped straight away.
    """
    default: bool
    """
    Whether it is `sandbox.default_preset`, the one a create without `preset` gets.
    """
    description: NotRequired[str | None]
    diskMb: NotRequired[int | None]
    """
    The home's size in MiB; null for a home without a limit.
    """
    egress: NotRequired[EgressRules | None]
    env: dict[str, str]
    harness: NotRequired[str | None]
    """
    The harness new sessions of its agents run; null: the server's default
    (`defaultHarness` in `/limits`).
    """
    idleMinutes: int
    image: str
    labels: NotRequired[dict[str, str]]
    """
    Labels its agents get, under a create's own.
    """
    memoryMb: int
    name: str
    runtime: NotRequired[str | None]
    secrets: NotRequired[list[str]]
    """
    Secrets (names) granted to agents made from it.
    """
    setup: NotRequired[str | None]
    setupOnRebuild: bool
    ttlMinutes: int | None
    """
    The lifetime of its agents in minutes (a create's own `ttlMinutes`, even null, wins);
    null for none.
    """


class Preview(TypedDict):
    """
    A preview: a URL, on an origin of its own, that opens a port of the agent's sandbox.
    """

    access: PreviewAccess
    createdAt: str
    expiresAt: NotRequired[str | None]
    """
    When it stops working; absent when it lasts until deleted.
    """
    id: str
    port: int
    token: NotRequired[str | None]
    """
    A `token` preview's token: in the answer to its creation only (the server keeps its
    hash). Open the preview with `url?token=…` or `Authorization: Bearer …`.
    """
    url: str
    """
    `{scheme}://{port}-{agent name}.{domain}[:{port}]/`.
    """


class Process(TypedDict):
    """
    A background process.
    """

    command: list[str]
    """
    The command line (an argument past the first 8 KiB in all is cut and ends in `…`).
    """
    egressDenied: NotRequired[list[EgressDenied]]
    """
    The destinations the egress proxy refused for the agent while the process ran (each host
    and port once, at most 32). Kept in the server's memory for processes started through
    it: empty for others, and after a server restart.
    """
    endedAt: NotRequired[str | None]
    exitCode: NotRequired[int | None]
    """
    Set once it exited by itself; 127 when the program was not found, 126 when it could not
    be run.
    """
    id: str
    """
    Made by the agent's sandboxd; use it, or the tag, in the process's URLs.
    """
    keepAwake: bool
    outputBytes: int
    """
    Output so far, both streams together, in bytes: the offset of the next byte.
    """
    outputStart: int
    """
    The oldest offset still kept (`sandbox.process_output_kb`); reading from before it
    starts with a gap.
    """
    pid: NotRequired[int | None]
    """
    Its process id in the sandbox: the leader of its process group.
    """
    signal: NotRequired[str | None]
    """
    The signal that ended it, without `SIG` (`TERM`, `KILL`).
    """
    startedAt: str
    """
    RFC 3339.
    """
    state: ProcessState
    stdinOpen: bool
    """
    A pipe to its stdin is open.
    """
    tag: NotRequired[str | None]
    timedOut: bool
    """
    Ended by its `timeoutMs`.
    """
    user: NotRequired[RunUser]
    """
    Who it runs as (`agent`: the sandbox's account).
    """


class ProcessEvent(TypedDict):
    """
    The `process` event's data: agent `id`'s process started or ended.
    """

    id: str
    """
    The agent's id.
    """
    process: Process


class PullProgress(TypedDict):
    """
    How far an image pull has got. Byte counts cover the layers whose size the registry has
    announced so far (Docker learns a layer's size when its download starts); a layer that was
    already on the machine counts as done without bytes.
    """

    bytesDone: int
    bytesTotal: int
    error: NotRequired[str | None]
    """
    Why the pull failed, with `status: failed`.
    """
    image: str
    """
    The image reference being pulled (with the tag the pull uses).
    """
    layersDone: int
    """
    Layers downloaded and unpacked (or already present).
    """
    layersTotal: int
    percent: int
    """
    An estimate for display, 0–100: mostly the share of the (estimated) bytes downloaded,
    the rest the share of layers unpacked. It never goes down during a pull and is 100
    only when the pull is done.
    """
    status: PullStatus


class Session(TypedDict):
    """
    A conversation with a harness running in the agent's sandbox.
    """

    acpSessionId: NotRequired[str | None]
    """
    The harness's own id for the conversation; null until its first start.
    """
    agentId: str
    createdAt: str
    """
    RFC 3339.
    """
    cwd: str
    """
    The directory the harness runs in.
    """
    harness: str
    """
    The harness (a key of the config's `harnesses`).
    """
    id: str
    lastSeq: int
    """
    The sequence number of the transcript's last event (0 for none): follow
    `…/events?after=lastSeq` to see only what comes next.
    """
    processId: NotRequired[str | None]
    """
    The background process running the harness (its stderr is the harness's log:
    `GET …/processes/{processId}/output`); null until it first started.
    """
    restore: NotRequired[Restore | None]
    state: SessionState
    title: str
    turns: int
    """
    Turns started so far (the number of the last one).
    """
    updatedAt: str


SignIn: TypeAlias = TokenSignIn | PasswordSignIn
"""
Either `token` alone, or `name` and `password`.
"""


class Token(TypedDict):
    """
    An API token, without the token itself (shown once, when it is made).
    """

    agents: NotRequired[list[str] | None]
    """
    The ids of the agents it is limited to; absent for every agent.
    """
    approvals: NotRequired[TokenApprovals]
    """
    What its commands that would wait for approval get: `deny` (refused at once, `403
    approval_rejected`), `ask` (a person answers) or `allow` (they run).
    """
    createdAt: str
    expiresAt: NotRequired[str | None]
    """
    When it stops working; absent for never.
    """
    id: str
    name: str
    scopes: list[Scope]
    supervised: NotRequired[bool]
    """
    Its commands wait for approval wherever the agent's `approvals.commands` holds them,
    even its owner's or an admin's.
    """
    userId: str
    """
    The id of the user it acts for; it can do at most what that user can.
    """


class TurnEvent(TypedDict):
    """
    A `turn` event.
    """

    state: TurnState
    stopReason: NotRequired[str | None]
    """
    When it ended: ACP's `end_turn`, `max_tokens`, `max_turn_requests`, `refusal`,
    `cancelled`, or `error` when the harness died, could not be reached or answered with
    an error (a `notice` says which).
    """
    turn: int


class UpdateAgent(TypedDict, closed=True):
    """
    `PATCH /api/v1/agents/{id}`; fields left out stay as they are.
    """

    access: NotRequired[AgentAccess | None]
    allowRoot: NotRequired[bool | None]
    """
    Allows or takes away root. `"user": "root"` on exec and processes follows at once;
    `sudo` follows at the next rebuild (the container's security options are fixed when
    it is made), so a change sets `needsRebuild`.
    """
    approvals: NotRequired[AgentApprovals | None]
    cpus: NotRequired[float | None]
    """
    Above 0 and at most `sandbox.max_cpus`.
    """
    deepSleepMinutes: NotRequired[int | None]
    """
    At most 10080 (a week); 0 = never pause; counted from the pause.
    """
    diskMb: NotRequired[int | None]
    """
    A larger home in MiB (it never shrinks), applied at the agent's next start; at most
    `sandbox.max_disk_mb`. A smaller value, or any for an agent whose home has no limit, is
    `400` with `"field": "diskMb"`.
    """
    egress: NotRequired[EgressChange | None]
    env: NotRequired[dict[str, str]]
    """
    Replaces the whole `env`; processes started from now on get it (running ones keep
    theirs). Checked as on create.
    """
    idleMinutes: NotRequired[int | None]
    """
    At most 10080 (a week); 0 = never sleep.
    """
    image: NotRequired[str | None]
    labels: NotRequired[dict[str, str]]
    """
    Replaces the whole map of labels (`{}` removes them all); checked as on create.
    """
    memoryMb: NotRequired[int | None]
    """
    16 to `sandbox.max_memory_mb`.
    """
    name: NotRequired[str | None]
    """
    A new name: unique, DNS-safe, as at create.
    """
    runtime: NotRequired[str | None]
    """
    Another container runtime, one of `runtimes` in `/limits`; sets `needsRebuild` (a
    rebuild applies it, keeping the home).
    """
    secrets: NotRequired[list[SecretName] | None]
    """
    Replaces the whole list, checked as on create; processes started from now on get
    the placeholders (running ones keep theirs), and the proxy swaps only the granted
    secrets from its next request on.
    """
    ttlMinutes: NotRequired[int | None]
    """
    A new lifetime in minutes, counted from now (1 to 525600); 0 or null takes the
    lifetime away.
    """


class Agent(TypedDict):
    """
    An agent and its sandbox, as stored.
    """

    access: AgentAccess
    """
    Who besides the owner, admins and members may see and use it (see `docs/api.md`,
    "Teams and access").
    """
    allowRoot: NotRequired[bool]
    """
    The agent may become root in its sandbox (`sudo`, `"user": "root"` on exec and
    processes). A change by `PATCH` reaches `sudo` at the next rebuild (`needsRebuild`).
    """
    approvals: NotRequired[AgentApprovals]
    """
    Which commands (exec, background processes, terminal opens) of anyone but the agent's
    owner and admins, or of a supervised token, wait for a person's approval.
    """
    cpus: float
    createdAt: str
    deepSleepMinutes: NotRequired[int]
    """
    Minutes an idle agent stays `paused` before it is stopped; 0: it is never paused, but
    stopped straight away. Agents made before light sleep follow
    `sandbox.default_deep_sleep_minutes`, shown here.
    """
    diskMb: NotRequired[int | None]
    """
    The home's size limit in MiB (`df` in the sandbox shows it); null for a home without
    one, which shares the host's disk (agents made before disk limits, or on a server
    without them).
    """
    egress: NotRequired[EgressRules | None]
    env: NotRequired[dict[str, str]]
    """
    Variables every shell, exec, terminal and background process of the agent starts with.
    """
    error: NotRequired[str | None]
    """
    The last failure's message while `state` is `error`.
    """
    expiresAt: str | None
    """
    When the agent will be destroyed, whatever its state (an `expiring` event comes a
    minute before); null without a TTL. `POST /api/v1/agents/{id}/keep-alive` moves it.
    """
    id: str
    """
    Short, lowercase, DNS-safe; part of the container, volume and network names.
    """
    idleMinutes: int
    image: str
    labels: NotRequired[dict[str, str]]
    """
    The caller's `key: value` labels; `GET /api/v1/agents?label=key=value` finds agents by
    them.
    """
    lastActivityAt: NotRequired[str | None]
    """
    Filled in by the server from its activity tracker; not stored.
    """
    memoryMb: int
    name: str
    needsRebuild: bool
    """
    The image or resources changed since the container was made; a rebuild applies them.
    """
    owner: AgentOwner
    """
    The user who made it; agents made before users existed belong to `admin`, and a
    deleted user's agents to `admin`.
    """
    preset: NotRequired[str | None]
    """
    The preset the agent was made from; null for none.
    """
    pull: NotRequired[PullProgress | None]
    runtime: str
    """
    The container runtime the sandbox runs on: `runc` (Docker's own: namespaces on the
    host's kernel) or `runsc` (gVisor: a kernel of its own in user space). Agents made
    before agents had a runtime of their own run on the server's default, shown here.
    """
    secrets: NotRequired[list[str]]
    """
    The names of the secrets granted to the agent (never values): each is a variable in its
    sandbox holding a placeholder. Deleting a secret takes its name off every agent.
    """
    setup: NotRequired[SetupStatus | None]
    sleepsAt: NotRequired[str | None]
    """
    When the sleeper will put this agent to sleep if nothing happens: while running, when it
    pauses it (or stops it, with `deepSleepMinutes` 0); while paused, when it stops it. Null
    otherwise, and for an agent that never sleeps.
    """
    state: AgentState
    ttlMinutes: int | None
    """
    The agent's lifetime, in minutes from its creation or its last change of `ttlMinutes`
    (a `PATCH` or a keep-alive); null for an agent without one.
    """
    warm: NotRequired[bool]
    """
    Its sandbox came from its preset's warm pool: the create claimed a sandbox started
    ahead of need instead of making one (otherwise the agent is the same as a cold one's).
    """


class CreatedToken(Token):
    """
    `POST /api/v1/tokens`'s answer: the token, shown this once, and what it is.
    """

    token: str
    """
    Send it as `Authorization: Bearer <token>`. Only its hash is kept: it cannot be shown
    again.
    """


class Me(TypedDict):
    """
    `GET /api/v1/me`: who the credential is, and what it may do.
    """

    scopes: list[Scope]
    """
    The scopes in effect: the user's role's, narrowed by the token's.
    """
    token: NotRequired[Token | None]
    user: User
