//! The audit log's entries: who did what to which agent, from where, and how it ended.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

macro_rules! actions {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// What an entry records: a fixed vocabulary, one word per kind of change.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
        #[schema(as = AuditAction)]
        pub enum Action {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)*
        }

        impl Action {
            pub const ALL: &[Action] = &[$(Action::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Action::$variant => $name,)*
                }
            }
        }
    };
}

actions! {
    AgentCreate = "agent.create",
    AgentUpdate = "agent.update",
    AgentDestroy = "agent.destroy",
    AgentStart = "agent.start",
    AgentStop = "agent.stop",
    AgentRebuild = "agent.rebuild",
    AgentSetup = "agent.setup",
    /// Detail: the command line.
    Exec = "exec",
    /// Detail: the language.
    CodeRun = "code.run",
    CodeContextCreate = "code.context.create",
    CodeContextRemove = "code.context.remove",
    CodeContextRestart = "code.context.restart",
    /// Detail: the command line.
    ProcessStart = "process.start",
    ProcessSignal = "process.signal",
    ProcessRemove = "process.remove",
    /// Detail: the command line (empty for the login shell).
    TerminalOpen = "terminal.open",
    TerminalKill = "terminal.kill",
    /// Detail: the path (several, one a line, for `fs/write-files`).
    FsWrite = "fs.write",
    /// Detail: the path.
    FsMkdir = "fs.mkdir",
    /// Detail: the path.
    FsRemove = "fs.remove",
    /// Detail: `from -> to`.
    FsRename = "fs.rename",
    SessionCreate = "session.create",
    SessionUpdate = "session.update",
    SessionDelete = "session.delete",
    /// Detail: the prompt's first 200 characters.
    SessionPrompt = "session.prompt",
    SessionCancel = "session.cancel",
    /// Detail: the port.
    PreviewCreate = "preview.create",
    PreviewDelete = "preview.delete",
    /// Detail: the option chosen.
    ApprovalAnswer = "approval.answer",
    /// Detail: the token's name and scopes.
    TokenCreate = "token.create",
    TokenRevoke = "token.revoke",
    /// Detail: the user's name and role.
    UserCreate = "user.create",
    /// Detail: which fields changed (never a password).
    UserUpdate = "user.update",
    UserDelete = "user.delete",
    ConfigReload = "config.reload",
    /// A password or admin-token sign-in to the web UI, made or refused.
    SignIn = "sign_in",
    SignOut = "sign_out",
}

impl Action {
    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.iter().copied().find(|a| a.as_str() == s)
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the audit log, as it is kept and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Grows with time: newer entries have larger ids (the `before` cursor pages by it).
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The user who acted; `null` for a refused sign-in (see `userName`).
    pub user_id: Option<String>,
    /// The user's name; for a refused sign-in, the name tried.
    pub user_name: String,
    /// The API token's name, when the request came with one.
    pub token_name: Option<String>,
    pub action: Action,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    /// What was done, where the action has it (see `action`); never a token, password, env
    /// value or file contents.
    pub detail: Option<String>,
    /// The client's IP address.
    pub address: String,
    /// The answer's HTTP status (for a stream: the status it started with).
    pub status: u16,
}

impl AuditEntry {
    /// Who acted, as records name it: `ann` or `ann (token ci)`.
    pub fn actor(&self) -> String {
        match &self.token_name {
            Some(t) => format!("{} (token {t})", self.user_name),
            None => self.user_name.clone(),
        }
    }
}

/// An entry about to be recorded (its id and time are the log's to give).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub user_id: Option<String>,
    pub user_name: String,
    pub token_name: Option<String>,
    pub action: Action,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub detail: Option<String>,
    pub address: std::net::IpAddr,
    pub status: u16,
}

/// Which entries a reader may see at all (see `audit::visible_to`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Visible {
    /// Every entry.
    All,
    /// Only the entries of the user with this id's own actions.
    Actor(String),
    /// Nothing (a query not yet narrowed to its reader).
    #[default]
    Nothing,
}

/// A page of entries, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditQuery {
    /// An agent's id or name.
    pub agent: Option<String>,
    /// A user's id or name.
    pub user: Option<String>,
    pub action: Option<Action>,
    /// At or after.
    pub since: Option<DateTime<Utc>>,
    /// At or before.
    pub until: Option<DateTime<Utc>>,
    /// Only entries older than the one with this id: the cursor of the next page.
    pub before: Option<i64>,
    pub limit: u32,
    /// Set by `audit::Audit::query` from the reader.
    pub visible: Visible,
}
