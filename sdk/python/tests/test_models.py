"""The models against the OpenAPI document: each model reads exactly the fields of the schema it
stands for, as ``scripts/gen-models.sh`` generates them into ``_wire.py``. A field or a schema the
server adds, renames or drops fails here until the client follows (regenerate, then change
``models.py``)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from typing_extensions import is_typeddict

from agenthold import _wire, models
from agenthold._decode import wire_name

# Each model, and the schema it is read from.
READ: list[tuple[type[Any], Any]] = [
    (models.AgentInfo, _wire.Agent),
    (models.EgressRules, _wire.EgressRules),
    (models.User, _wire.User),
    (models.Token, _wire.Token),
    (models.CreatedToken, _wire.CreatedToken),
    (models.AuditEntry, _wire.AuditEntry),
    (models.Me, _wire.Me),
    (models.Secret, _wire.Secret),
    (models.AgentOwner, _wire.AgentOwner),
    (models.AgentMember, _wire.AgentMember),
    (models.EgressDenied, _wire.EgressDenied),
    (models.EgressLogEntry, _wire.EgressLogEntry),
    (models.PullProgress, _wire.PullProgress),
    (models.SetupStatus, _wire.SetupStatus),
    (models.Preset, _wire.PresetInfo),
    (models.PoolStatus, _wire.PoolInfo),
    (models.Health, _wire.Health),
    (models.Limits, _wire.Limits),
    (models.HarnessInfo, _wire.HarnessInfo),
    (models.CommandResult, _wire.ExecResult),
    (models.Execution, _wire.Execution),
    (models.CodeError, _wire.CodeError),
    (models.CodeContext, _wire.CodeContext),
    (models.Process, _wire.Process),
    (models.DirEntry, _wire.DirEntry),
    (models.FileInfo, _wire.FileInfo),
    (models.FileEvent, _wire.FileEvent),
    (models.FileWritten, _wire.FileWritten),
    (models.TerminalSession, _wire.TerminalSession),
    (models.ListeningPort, _wire.ListeningPort),
    (models.Preview, _wire.Preview),
    (models.EgressEvent, _wire.EgressEvent),
    (models.ProcessEvent, _wire.ProcessEvent),
    (models.ExpiringEvent, _wire.ExpiringEvent),
    (models.SessionInfo, _wire.Session),
    (models.Approval, _wire.Approval),
    (models.ApprovalOption, _wire.ApprovalOption),
    # A transcript event as it stands in the JSON form, kept whole when its name is unknown.
    (models.UnknownConversationEvent, _wire.TranscriptEvent),
]

# A session's events: each has its schema's fields (the event's data) and the transcript
# entry's ``seq`` and ``at``. (``prompt`` and ``update`` data have no schema: an ACP object.)
ENVELOPE = {"seq", "at"}
EVENTS: list[tuple[type[Any], Any]] = [
    (models.TurnEvent, _wire.TurnEvent),
    (models.NoticeEvent, _wire.Notice),
    (models.PermissionResolvedEvent, _wire.PermissionResolved),
]

# The schemas no model reads, and why.
NOT_READ = {
    # Request bodies: the calls build them from their keyword arguments.
    "CreateAgent",
    "UpdateAgent",
    "EgressChange",
    "KeepAlive",
    "ExecBody",
    "StartProcess",
    "SignalBody",
    "CreateSession",
    "UpdateSession",
    "PromptBody",
    "AnswerApproval",
    "RenameBody",
    "CreatePreview",
    "RunCode",
    # Read as what they hold: a bool (files.exists) and a list (files.write_files).
    "PathExists",
    "FilesWritten",
    # Read where they are met: errors.error_for, and the output and stdin calls.
    "ErrorBody",
    "ErrorDetail",
    "Gap",
    "StdinWritten",
    "PromptAccepted",
    # The web UI's sign-in (`SignIn`, one of these two), which a client with a token has no
    # use for.
    "TokenSignIn",
    "PasswordSignIn",
    "SessionStatus",
    # The operator's config reload (`POST /api/v1/admin/reload`), which the client does not wrap.
    "ConfigReload",
    # Request bodies of users and tokens, built from the calls' keyword arguments.
    "CreateUser",
    "UpdateUser",
    "CreateToken",
    # A secret's value goes in (built from `secrets.set`'s arguments) and never comes back.
    "PutSecret",
    # An agent's and a preset's `approvals`, read as the dict it is.
    "AgentApprovals",
    # Request bodies of an agent's members and joining, built from the calls' arguments.
    "AddMember",
    "JoinAgent",
    # Read where it is met: agent.new_access_token returns the token itself.
    "AccessToken",
}


def _keys(schema: Any) -> set[str]:
    return set(schema.__required_keys__ | schema.__optional_keys__)


@pytest.mark.parametrize(("model", "schema"), READ, ids=[m.__name__ for m, _ in READ])
def test_each_model_has_the_fields_of_its_schema(model: type[Any], schema: Any) -> None:
    fields = {wire_name(f.name) for f in dataclasses.fields(model)}
    assert fields == _keys(schema)


@pytest.mark.parametrize(("model", "schema"), EVENTS, ids=[m.__name__ for m, _ in EVENTS])
def test_each_session_event_has_the_fields_of_its_data(model: type[Any], schema: Any) -> None:
    fields = {wire_name(f.name) for f in dataclasses.fields(model)}
    assert _keys(_wire.TranscriptEvent) >= ENVELOPE
    assert fields == _keys(schema) | ENVELOPE


def test_every_schema_is_read_by_a_model_or_known_not_to_be() -> None:
    schemas = {name for name, value in vars(_wire).items() if is_typeddict(value)}
    read = {schema.__name__ for _, schema in READ + EVENTS}
    assert schemas == read | NOT_READ


def test_the_agent_states_are_the_servers() -> None:
    assert typing.get_args(models.AgentState) == typing.get_args(_wire.AgentState)
    assert set(typing.get_args(models.AgentState)) >= models.TRANSIENT_STATES


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (models.SessionState, _wire.SessionState),
        (models.ApprovalState, _wire.ApprovalState),
        (models.ApprovalOutcome, _wire.ApprovalOutcome),
        (models.NoticeKind, _wire.NoticeKind),
        (models.PreviewAccess, _wire.PreviewAccess),
    ],
)
def test_the_words_are_the_servers(ours: Any, theirs: Any) -> None:
    assert typing.get_args(ours) == typing.get_args(theirs)


def test_each_session_event_name_has_its_class() -> None:
    names = {cls.event for cls in typing.get_args(models.ConversationEvent) if "event" in vars(cls)}
    assert names == set(typing.get_args(_wire.SessionEventKind))


def test_states_and_types_are_literals() -> None:
    # The states from the server's document; a path's type (a string there) as the docs say.
    hints = {
        (models.AgentInfo, "state"): _wire.AgentState,
        (models.Process, "state"): _wire.ProcessState,
        (models.Process, "user"): _wire.RunUser,
        (models.DirEntry, "type"): models.FileType,
        (models.FileInfo, "type"): models.FileType,
    }
    for (model, name), want in hints.items():
        hint = typing.get_type_hints(model)[name]
        assert typing.get_origin(hint) is typing.Literal, (model, name)
        assert typing.get_args(hint) == typing.get_args(want), (model, name)
    assert set(typing.get_args(models.FileType)) == {"file", "dir", "symlink", "other"}
