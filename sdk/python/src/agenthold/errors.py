"""The exceptions this client raises.

Every one is an :class:`AgentholdError`, so a caller can catch the whole family at once.
Server errors keep the server's own ``code``, ``message`` and ``field`` (the request field the
error is about), because that is what a program should branch on and what a person should
read; the HTTP status is kept too. Client-side failures (a wait that ran out, a command that
exited non-zero) are told apart by their class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import AgentInfo, CommandResult, Process, PromptResult

__all__ = [
    "AgentholdError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "ApprovalRejected",
    "ApprovalExpired",
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
    "error_for",
]


class AgentholdError(Exception):
    """Anything that went wrong talking to an agenthold server."""

    #: The server's machine word (``not_found``, ``conflict``, …) or the client's own.
    code: str
    message: str
    #: The camelCase request field the error is about (``name``, ``cpus``, ``path``…), if any.
    field: str | None
    #: The HTTP status of the answer; ``None`` for errors the client found itself.
    status: int | None

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        field: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.status = status

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.message}{where} [{self.code}]"


class InvalidRequest(AgentholdError):
    """400 ``invalid``: the request is wrong; ``field`` names the culprit when known."""


class Unauthorized(AgentholdError):
    """401 ``unauthorized``: the token is missing or wrong."""


class Forbidden(AgentholdError):
    """403 ``forbidden``: the sandbox account may not do this, or the caller may not."""


class ApprovalRejected(Forbidden):
    """403 ``approval_rejected``: the command waited for approval (the agent's ``approvals``
    setting) and a person rejected it, or the token answers every approval no; nothing ran."""


class ApprovalExpired(Forbidden):
    """403 ``approval_expired``: the command waited for approval and nobody answered within the
    server's ``sessions.approval_timeout`` (or the server restarted); nothing ran."""


class NotFound(AgentholdError):
    """404 ``not_found``: no such agent, file or process (also: a name no agent has)."""


class Conflict(AgentholdError):
    """409 ``conflict``: the agent's state forbids it, a name or tag is taken, a path exists."""


class TooLarge(AgentholdError):
    """413 ``too_large``: a command line or a file over the server's limits."""


class RateLimited(AgentholdError):
    """429 ``too_many_requests``: the agent has too many channels open; try again later."""


class NoSpace(AgentholdError):
    """507 ``no_space``: the sandbox's disk is full; nothing was written."""


class Unavailable(AgentholdError):
    """503 ``unavailable``: the driver or the sandbox connection is down (or the server is full)."""


class ServerError(AgentholdError):
    """500 ``internal`` or any status the API does not document."""


class NetworkError(AgentholdError):
    """The server could not be reached, or the connection broke (the cause is chained)."""


class AgentFailed(AgentholdError):
    """An agent being waited for ended in ``error`` (or in a state other than the one wanted).

    ``message`` is the agent's own ``error`` when it has one, so the reason (a missing image, a
    failed start) reaches the caller unchanged.
    """

    agent: AgentInfo

    def __init__(self, message: str, agent: AgentInfo) -> None:
        super().__init__(message, code="agent_failed")
        self.agent = agent


class WaitTimeout(AgentholdError, TimeoutError):
    """A client-side wait (for an agent's state) ran out of time; the operation may go on."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="timeout")


class CommandExitError(AgentholdError):
    """``run(..., check=True)``: the command exited with a non-zero status."""

    result: CommandResult

    def __init__(self, result: CommandResult) -> None:
        tail = result.stderr.strip().splitlines()[-1:] or [""]
        super().__init__(
            f"the command exited with {result.exit_code}" + (f": {tail[0]}" if tail[0] else ""),
            code="command_exit",
        )
        self.result = result

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr


class CommandTimeout(AgentholdError, TimeoutError):
    """A command ran past its timeout (the server killed it), or a wait for a process ran out.

    ``result`` is the killed command's result (its output so far); ``process`` the background
    process as it was when the wait gave up (still running).
    """

    result: CommandResult | None
    process: Process | None

    def __init__(
        self,
        message: str,
        *,
        result: CommandResult | None = None,
        process: Process | None = None,
    ) -> None:
        super().__init__(message, code="timeout")
        self.result = result
        self.process = process


class TurnTimeout(WaitTimeout):
    """``session.prompt(..., timeout=)`` ran out before the turn ended. The turn goes on in
    the server (``session.cancel()`` stops it); ``result`` is what it had done so far
    (``stop_reason`` ``None``, its ``turn``, ``text`` and ``events``)."""

    result: PromptResult

    def __init__(self, message: str, result: PromptResult) -> None:
        super().__init__(message)
        self.result = result

    @property
    def turn(self) -> int:
        return self.result.turn


_BY_CODE: dict[str, type[AgentholdError]] = {
    "invalid": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "approval_rejected": ApprovalRejected,
    "approval_expired": ApprovalExpired,
    "not_found": NotFound,
    "conflict": Conflict,
    "too_large": TooLarge,
    "too_many_requests": RateLimited,
    "no_space": NoSpace,
    "unavailable": Unavailable,
    "internal": ServerError,
}

_CODE_BY_STATUS: dict[int, str] = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    429: "too_many_requests",
    507: "no_space",
    503: "unavailable",
    500: "internal",
}


def error_for(status: int | None, body: Any, fallback_text: str = "") -> AgentholdError:
    """The exception for an error answer: by the body's ``code`` first, else by the status.

    ``body`` is the decoded JSON (``{"error": {"code", "message", "field"?}}``) or anything
    else when the answer was not that shape (a proxy's page, the plain-text 503 of a full
    server); then ``fallback_text`` becomes the message.
    """
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        code = detail["code"]
        message = str(detail.get("message") or code)
        field = detail.get("field") if isinstance(detail.get("field"), str) else None
    else:
        code = _CODE_BY_STATUS.get(status or 0, "error")
        message = fallback_text.strip() or f"the server answered HTTP {status}"
        field = None
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _BY_CODE.get(_CODE_BY_STATUS.get(status or 0, ""), ServerError)
    return cls(message, code=code, field=field, status=status)
