//! What the server keeps of agent sessions, their transcripts and approvals (the store's rows), and
//! the data of the transcript events it writes. The API's types are made from these
//! (`api::types::conversation`); a test there checks that the event data written here reads as
//! the API documents it.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// How the conversation was reopened when its harness last started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    Resume,
    Load,
    New,
}

impl Restore {
    pub fn as_str(self) -> &'static str {
        match self {
            Restore::Resume => "resume",
            Restore::Load => "load",
            Restore::New => "new",
        }
    }

    pub fn parse(s: &str) -> Option<Restore> {
        match s {
            "resume" => Some(Restore::Resume),
            "load" => Some(Restore::Load),
            "new" => Some(Restore::New),
            _ => None,
        }
    }
}

/// A session as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub agent_id: String,
    pub harness: String,
    pub title: String,
    pub cwd: String,
    /// A turn runs.
    pub running: bool,
    pub acp_session_id: Option<String>,
    pub restore: Option<Restore>,
    /// The sandboxd process running the harness, once started.
    pub process_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub turns: u64,
    /// How far the harness's output has been read (both streams, as sandboxd counts).
    pub output_offset: u64,
    /// The JSON-RPC id of the `session/prompt` the running turn waits for.
    pub prompt_rpc: Option<i64>,
    /// The next JSON-RPC id the server sends the harness.
    pub next_rpc: i64,
    /// The sequence number of the session's last event.
    pub last_seq: u64,
}

/// The name of a transcript event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Prompt,
    Update,
    Turn,
    Notice,
    Permission,
    PermissionResolved,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Prompt => "prompt",
            EventKind::Update => "update",
            EventKind::Turn => "turn",
            EventKind::Notice => "notice",
            EventKind::Permission => "permission",
            EventKind::PermissionResolved => "permission_resolved",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        [
            EventKind::Prompt,
            EventKind::Update,
            EventKind::Turn,
            EventKind::Notice,
            EventKind::Permission,
            EventKind::PermissionResolved,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// An event to append: its data already JSON.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: EventKind,
    pub data: Box<RawValue>,
}

impl NewEvent {
    /// `data` serialized; a value that cannot be (none of ours) becomes `null`.
    pub fn of<T: Serialize>(kind: EventKind, data: &T) -> NewEvent {
        let data = serde_json::value::to_raw_value(data)
            .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null is JSON"));
        NewEvent { kind, data }
    }

    pub fn raw(kind: EventKind, data: Box<RawValue>) -> NewEvent {
        NewEvent { kind, data }
    }

    pub fn notice(kind: NoticeKind, text: impl Into<String>) -> NewEvent {
        NewEvent::of(
            EventKind::Notice,
            &NoticeData {
                kind,
                text: text.into(),
            },
        )
    }

    /// The size it takes in the transcript.
    pub fn size(&self) -> usize {
        self.data.get().len() + 32
    }
}

/// A stored event.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: u64,
    pub kind: EventKind,
    pub data: Box<RawValue>,
    pub at: String,
}

/// A `prompt` event's data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PromptData {
    pub turn: u64,
    pub prompt: Vec<Value>,
}

/// A `turn` event's data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnData {
    pub turn: u64,
    /// `started` or `ended`.
    pub state: &'static str,
    pub stop_reason: Option<String>,
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    Waking,
    ContextReset,
    HarnessExited,
    Gap,
    Error,
}

/// A `notice` event's data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NoticeData {
    pub kind: NoticeKind,
    pub text: String,
}

/// How an approval was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Selected,
    Cancelled,
    Expired,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Selected => "selected",
            Outcome::Cancelled => "cancelled",
            Outcome::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "selected" => Some(Outcome::Selected),
            "cancelled" => Some(Outcome::Cancelled),
            "expired" => Some(Outcome::Expired),
            _ => None,
        }
    }
}

/// A `permission_resolved` event's data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedData {
    pub id: String,
    pub outcome: Outcome,
    pub option_id: Option<String>,
    pub by: String,
}

/// One offered option of a permission request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionRecord {
    pub option_id: String,
    pub name: String,
    pub kind: String,
}

/// What an approval asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A session's harness asks (`session/request_permission`).
    Permission,
    /// An exec, background process or terminal waits before it runs.
    Command,
}

impl ApprovalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalKind::Permission => "permission",
            ApprovalKind::Command => "command",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalKind> {
        match s {
            "permission" => Some(ApprovalKind::Permission),
            "command" => Some(ApprovalKind::Command),
            _ => None,
        }
    }
}

/// An approval as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    pub id: String,
    pub agent_id: String,
    pub kind: ApprovalKind,
    /// The session whose harness asks; `None` for a command.
    pub session_id: Option<String>,
    /// A command's line, as one string; `None` for a permission.
    pub command: Option<String>,
    /// Who asked for the command (as [`crate::teams::Principal::actor`] names them).
    pub requester: Option<String>,
    /// `null` for a command.
    pub tool_call: Value,
    pub options: Vec<OptionRecord>,
    pub created_at: String,
    pub expires_at: String,
    /// Set once resolved.
    pub outcome: Option<Outcome>,
    pub option_id: Option<String>,
    pub decided_by: Option<String>,
    /// The JSON-RPC id of the harness's request, as it sent it (a number or a string).
    pub rpc_id: Value,
}

/// The `permission` event's data: the approval as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalData<'a> {
    pub id: &'a str,
    pub agent_id: &'a str,
    pub session_id: Option<&'a str>,
    pub kind: ApprovalKind,
    pub command: Option<&'a str>,
    pub requester: Option<&'a str>,
    pub tool_call: &'a Value,
    pub options: &'a [OptionRecord],
    pub state: &'static str,
    pub created_at: &'a str,
    pub expires_at: &'a str,
    pub outcome: Option<Outcome>,
    pub option_id: Option<&'a str>,
    pub decided_by: Option<&'a str>,
}

impl ApprovalRecord {
    pub fn data(&self) -> ApprovalData<'_> {
        ApprovalData {
            id: &self.id,
            agent_id: &self.agent_id,
            session_id: self.session_id.as_deref(),
            kind: self.kind,
            command: self.command.as_deref(),
            requester: self.requester.as_deref(),
            tool_call: &self.tool_call,
            options: &self.options,
            state: if self.outcome.is_some() {
                "resolved"
            } else {
                "pending"
            },
            created_at: &self.created_at,
            expires_at: &self.expires_at,
            outcome: self.outcome,
            option_id: self.option_id.as_deref(),
            decided_by: self.decided_by.as_deref(),
        }
    }
}
