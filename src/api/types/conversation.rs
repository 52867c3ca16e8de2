//! The bodies of agent sessions (`/api/v1/agents/{id}/sessions…`: conversations with a harness
//! over the Agent Client Protocol) and of the approval queue (`/api/v1/approvals…`), and the
//! events both publish. The domain's own records live in [`crate::sessions`]; these are made
//! from them by the `From` conversions below.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::sessions as record;

/// `POST /api/v1/agents/{id}/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSession {
    /// A harness of the config's `harnesses`; by default the agent's preset's, else
    /// `sandbox.default_harness`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "claude")]
    pub harness: Option<String>,
    /// The absolute directory the harness runs in; `/home/agent` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "/home/agent/project")]
    pub cwd: Option<String>,
    /// At most 200 characters; "New session" by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `PATCH /api/v1/agents/{id}/sessions/{sid}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateSession {
    /// At most 200 characters.
    pub title: String,
}

/// Whether a turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    Idle,
    Running,
}

/// How the conversation was reopened the last time its harness started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Restore {
    /// `session/resume`: the harness took the conversation up where it was.
    Resume,
    /// `session/load`: the harness replayed it (the replay is not added to the transcript).
    Load,
    /// Neither was possible: a new ACP session, announced by a `context_reset` notice.
    New,
}

/// A conversation with a harness running in the agent's sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    pub agent_id: String,
    /// The harness (a key of the config's `harnesses`).
    pub harness: String,
    pub title: String,
    /// The directory the harness runs in.
    pub cwd: String,
    pub state: SessionState,
    /// The harness's own id for the conversation; null until its first start.
    pub acp_session_id: Option<String>,
    /// Null until the harness had to reopen the conversation.
    pub restore: Option<Restore>,
    /// The background process running the harness (its stderr is the harness's log:
    /// `GET …/processes/{processId}/output`); null until it first started.
    pub process_id: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
    /// Turns started so far (the number of the last one).
    pub turns: u64,
    /// The sequence number of the transcript's last event (0 for none): follow
    /// `…/events?after=lastSeq` to see only what comes next.
    pub last_seq: u64,
}

/// `POST …/sessions/{sid}/prompt`: either `prompt` (ACP content blocks) or `text`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptBody {
    /// ACP `ContentBlock`s, sent to the harness as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>, example = json!([{"type": "text", "text": "Hello"}]))]
    pub prompt: Option<Vec<Value>>,
    /// Shorthand for one text block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "Add a README")]
    pub text: Option<String>,
}

/// `202` to a prompt: the turn it started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PromptAccepted {
    pub turn: u64,
}

/// The name of a transcript event (the SSE `event:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionEventKind {
    /// `{"turn", "prompt": [content blocks]}`.
    Prompt,
    /// The ACP `session/update` notification's `update` object, verbatim.
    Update,
    /// A [`TurnEvent`].
    Turn,
    /// A [`Notice`].
    Notice,
    /// An [`Approval`] the harness asked for.
    Permission,
    /// A [`PermissionResolved`].
    PermissionResolved,
}

/// One event of a session's transcript (`GET …/events?format=json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TranscriptEvent {
    /// Increases by one per event of the session, from 1; the SSE `id:`.
    pub seq: u64,
    pub event: SessionEventKind,
    #[schema(value_type = Value)]
    pub data: Value,
    /// RFC 3339.
    pub at: String,
}

/// Whether a turn started or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TurnState {
    Started,
    Ended,
}

/// A `turn` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnEvent {
    pub turn: u64,
    pub state: TurnState,
    /// When it ended: ACP's `end_turn`, `max_tokens`, `max_turn_requests`, `refusal`,
    /// `cancelled`, or `error` when the harness died, could not be reached or answered with
    /// an error (a `notice` says which).
    pub stop_reason: Option<String>,
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// The prompt woke the agent: its sandbox is starting.
    Waking,
    /// The harness could not reopen the conversation: it starts from nothing.
    ContextReset,
    /// The harness's process ended (crashed, was killed, or went with its sandbox).
    HarnessExited,
    /// Older events were dropped to keep the transcript within `sessions.transcript_max_mb`,
    /// or the harness's output was lost.
    Gap,
    /// The harness misbehaved or could not be started (the text says how).
    Error,
}

/// A `notice` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Notice {
    pub kind: NoticeKind,
    pub text: String,
}

/// What an approval asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A harness's `session/request_permission`.
    Permission,
    /// An exec, background process or terminal open that waits before it runs (the agent's
    /// `approvals.commands`); its options are `allow` (`allow_once`) and `reject`
    /// (`reject_once`).
    Command,
}

/// Whether an approval waits for an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalState {
    Pending,
    Resolved,
}

/// How an approval was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalOutcome {
    /// Someone chose `optionId`.
    Selected,
    /// The turn was cancelled, or its harness went, first.
    Cancelled,
    /// Nobody answered within `sessions.approval_timeout`: the offered `reject_once` option was
    /// chosen (`optionId`), else the request was answered `cancelled`.
    Expired,
}

/// One option of an approval, as the harness offered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalOption {
    pub option_id: String,
    pub name: String,
    /// ACP's `allow_once`, `allow_always`, `reject_once`, `reject_always` (or what the harness
    /// sent).
    pub kind: String,
}

/// A question waiting for a person (or answered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub id: String,
    pub agent_id: String,
    /// The session whose harness asks; null for a command.
    #[schema(required = true)]
    pub session_id: Option<String>,
    pub kind: ApprovalKind,
    /// A command's line, as one string (its arguments quoted as a POSIX shell would need);
    /// null for a permission.
    #[serde(default)]
    #[schema(required = true)]
    pub command: Option<String>,
    /// Who asked for the command: the user, and the token's name when one was used
    /// (`ann (token ci)`); null for a permission.
    #[serde(default)]
    #[schema(required = true)]
    pub requester: Option<String>,
    /// The ACP tool call the permission is for, verbatim; null for a command.
    #[schema(value_type = Value)]
    pub tool_call: Value,
    pub options: Vec<ApprovalOption>,
    pub state: ApprovalState,
    pub created_at: String,
    /// When it expires unanswered.
    pub expires_at: String,
    pub outcome: Option<ApprovalOutcome>,
    pub option_id: Option<String>,
    /// Who decided: the user (and token) who answered, `timeout`, `cancel` (the turn ended,
    /// or a command's request went away), or `restart` (a command's approval pending when the
    /// server stopped).
    pub decided_by: Option<String>,
}

/// `POST /api/v1/approvals/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerApproval {
    /// One of the approval's `options`.
    pub option_id: String,
}

/// A `permission_resolved` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionResolved {
    /// The approval's id.
    pub id: String,
    pub outcome: ApprovalOutcome,
    pub option_id: Option<String>,
    pub by: String,
}

impl From<record::SessionRecord> for Session {
    fn from(s: record::SessionRecord) -> Self {
        Session {
            id: s.id,
            agent_id: s.agent_id,
            harness: s.harness,
            title: s.title,
            cwd: s.cwd,
            state: if s.running {
                SessionState::Running
            } else {
                SessionState::Idle
            },
            acp_session_id: s.acp_session_id,
            restore: s.restore.map(Restore::from),
            process_id: s.process_id,
            created_at: s.created_at,
            updated_at: s.updated_at,
            turns: s.turns,
            last_seq: s.last_seq,
        }
    }
}

impl From<record::Restore> for Restore {
    fn from(r: record::Restore) -> Self {
        match r {
            record::Restore::Resume => Restore::Resume,
            record::Restore::Load => Restore::Load,
            record::Restore::New => Restore::New,
        }
    }
}

impl From<record::ApprovalRecord> for Approval {
    fn from(a: record::ApprovalRecord) -> Self {
        Approval {
            id: a.id,
            agent_id: a.agent_id,
            session_id: a.session_id,
            kind: match a.kind {
                record::ApprovalKind::Permission => ApprovalKind::Permission,
                record::ApprovalKind::Command => ApprovalKind::Command,
            },
            command: a.command,
            requester: a.requester,
            tool_call: a.tool_call,
            options: a
                .options
                .into_iter()
                .map(|o| ApprovalOption {
                    option_id: o.option_id,
                    name: o.name,
                    kind: o.kind,
                })
                .collect(),
            state: if a.outcome.is_some() {
                ApprovalState::Resolved
            } else {
                ApprovalState::Pending
            },
            created_at: a.created_at,
            expires_at: a.expires_at,
            outcome: a.outcome.map(ApprovalOutcome::from),
            option_id: a.option_id,
            decided_by: a.decided_by,
        }
    }
}

impl From<record::Outcome> for ApprovalOutcome {
    fn from(o: record::Outcome) -> Self {
        match o {
            record::Outcome::Selected => ApprovalOutcome::Selected,
            record::Outcome::Cancelled => ApprovalOutcome::Cancelled,
            record::Outcome::Expired => ApprovalOutcome::Expired,
        }
    }
}

impl From<record::EventKind> for SessionEventKind {
    fn from(k: record::EventKind) -> Self {
        match k {
            record::EventKind::Prompt => SessionEventKind::Prompt,
            record::EventKind::Update => SessionEventKind::Update,
            record::EventKind::Turn => SessionEventKind::Turn,
            record::EventKind::Notice => SessionEventKind::Notice,
            record::EventKind::Permission => SessionEventKind::Permission,
            record::EventKind::PermissionResolved => SessionEventKind::PermissionResolved,
        }
    }
}

impl From<record::StoredEvent> for TranscriptEvent {
    fn from(e: record::StoredEvent) -> Self {
        TranscriptEvent {
            seq: e.seq,
            event: e.kind.into(),
            data: serde_json::from_str(e.data.get()).unwrap_or(Value::Null),
            at: e.at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sessions as record;
    use serde_json::json;

    // The domain writes the transcript's event data with its own types; these must read as the
    // API documents them.
    #[test]
    fn event_data_written_by_the_domain_reads_as_the_api_documents_it() {
        let notice = serde_json::to_value(record::NoticeData {
            kind: record::NoticeKind::ContextReset,
            text: "reset".into(),
        })
        .unwrap();
        let read: Notice = serde_json::from_value(notice).unwrap();
        assert_eq!(read.kind, NoticeKind::ContextReset);

        let turn = serde_json::to_value(record::TurnData {
            turn: 3,
            state: "ended",
            stop_reason: Some("end_turn".into()),
        })
        .unwrap();
        let read: TurnEvent = serde_json::from_value(turn).unwrap();
        assert_eq!((read.turn, read.state), (3, TurnState::Ended));

        let resolved = serde_json::to_value(record::ResolvedData {
            id: "a".into(),
            outcome: record::Outcome::Expired,
            option_id: Some("c9".into()),
            by: "timeout".into(),
        })
        .unwrap();
        let read: PermissionResolved = serde_json::from_value(resolved).unwrap();
        assert_eq!(read.outcome, ApprovalOutcome::Expired);

        let approval = record::ApprovalRecord {
            id: "a".into(),
            agent_id: "g".into(),
            kind: record::ApprovalKind::Permission,
            session_id: Some("s".into()),
            command: None,
            requester: None,
            tool_call: json!({"toolCallId": "t"}),
            options: vec![record::OptionRecord {
                option_id: "o".into(),
                name: "Allow".into(),
                kind: "allow_once".into(),
            }],
            created_at: "2026-12-06T00:00:00Z".into(),
            expires_at: "2026-12-06T00:10:00Z".into(),
            outcome: None,
            option_id: None,
            decided_by: None,
            rpc_id: json!(1),
        };
        let written = serde_json::to_value(approval.data()).unwrap();
        let read: Approval = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(read, Approval::from(approval));
        assert_eq!(serde_json::to_value(&read).unwrap(), written);
    }
}
