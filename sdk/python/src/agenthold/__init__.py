"""agenthold: the Python client of an agenthold server (self-hosted sandboxes for AI agents).

    from agenthold import Client

    ah = Client()                                  # AGENTHOLD_URL, AGENTHOLD_TOKEN
    with ah.agents.create("scratch") as agent:     # destroyed on leaving the block
        agent.files.write("hello.py", "print('hi')\n")
        print(agent.commands.run("python3 hello.py").stdout)

:class:`AsyncClient` has the same names, awaited.
"""

__version__ = "0.1.0"

from .agents import Agent, AsyncAgent
from .client import AsyncClient, Client
from .errors import (
    AgentFailed,
    AgentholdError,
    CommandExitError,
    CommandTimeout,
    Conflict,
    Forbidden,
    InvalidRequest,
    NetworkError,
    NoSpace,
    NotFound,
    RateLimited,
    ServerError,
    TooLarge,
    TurnTimeout,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from .files import AsyncFileStream, AsyncWatchHandle, FileStream, WatchHandle
from .models import (
    AgentEvent,
    AgentInfo,
    Approval,
    ApprovalEvent,
    ApprovalOption,
    CommandResult,
    ConversationEvent,
    DeletedEvent,
    DirEntry,
    EgressEvent,
    EgressRules,
    Event,
    FileEvent,
    FileInfo,
    FileWritten,
    Health,
    Limits,
    NoticeEvent,
    OutputChunk,
    OutputGap,
    PermissionEvent,
    PermissionResolvedEvent,
    Preset,
    Process,
    ProcessEvent,
    PromptEvent,
    PromptResult,
    PullEvent,
    PullProgress,
    SessionDeletedEvent,
    SessionEvent,
    SessionInfo,
    SetupStatus,
    TerminalSession,
    TurnEvent,
    UnknownConversationEvent,
    UnknownEvent,
    UpdateEvent,
)
from .processes import AsyncProcessHandle, ProcessHandle
from .sessions import AsyncSession, AsyncSessionEventStream, Session, SessionEventStream
from .terminals import AsyncTerminal, Terminal

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "Agent",
    "AsyncAgent",
    "ProcessHandle",
    "AsyncProcessHandle",
    "Terminal",
    "AsyncTerminal",
    "Session",
    "AsyncSession",
    "SessionEventStream",
    "AsyncSessionEventStream",
    "FileStream",
    "AsyncFileStream",
    # values
    "AgentInfo",
    "Preset",
    "SetupStatus",
    "EgressRules",
    "PullProgress",
    "Health",
    "Limits",
    "CommandResult",
    "Process",
    "OutputChunk",
    "OutputGap",
    "DirEntry",
    "FileEvent",
    "FileInfo",
    "FileWritten",
    "WatchHandle",
    "AsyncWatchHandle",
    "TerminalSession",
    "SessionInfo",
    "Approval",
    "ApprovalOption",
    "PromptResult",
    # events
    "Event",
    "AgentEvent",
    "DeletedEvent",
    "PullEvent",
    "EgressEvent",
    "ProcessEvent",
    "SessionEvent",
    "SessionDeletedEvent",
    "ApprovalEvent",
    "UnknownEvent",
    # a session's events
    "ConversationEvent",
    "PromptEvent",
    "UpdateEvent",
    "TurnEvent",
    "NoticeEvent",
    "PermissionEvent",
    "PermissionResolvedEvent",
    "UnknownConversationEvent",
    # errors
    "AgentholdError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "TooLarge",
    "RateLimited",
    "NoSpace",
    "Unavailable",
    "ServerError",
    "NetworkError",
    "AgentFailed",
    "WaitTimeout",
    "CommandExitError",
    "CommandTimeout",
    "TurnTimeout",
]
