//! The audit log's entries: who did what to which agent, from where, and how it ended.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What an entry records: a fixed vocabulary, one word per kind of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[schema(as = AuditAction)]
pub enum Action {
    #[serde(rename = "agent.create")]
    AgentCreate,
    #[serde(rename = "agent.update")]
    AgentUpdate,
    #[serde(rename = "agent.destroy")]
    AgentDestroy,
    #[serde(rename = "agent.start")]
    AgentStart,
    #[serde(rename = "agent.stop")]
    AgentStop,
    #[serde(rename = "agent.pause")]
    AgentPause,
    #[serde(rename = "agent.rebuild")]
    AgentRebuild,
    #[serde(rename = "agent.setup")]
    AgentSetup,
    /// Detail: the command line.
    #[serde(rename = "exec")]
    Exec,
    /// Detail: the language.
    #[serde(rename = "code.run")]
    CodeRun,
    #[serde(rename = "code.context.create")]
    CodeContextCreate,
    #[serde(rename = "code.context.remove")]
    CodeContextRemove,
    #[serde(rename = "code.context.restart")]
    CodeContextRestart,
    /// Detail: the command line.
    #[serde(rename = "process.start")]
    ProcessStart,
    #[serde(rename = "process.signal")]
    ProcessSignal,
    #[serde(rename = "process.remove")]
    ProcessRemove,
    /// Detail: the command line (empty for the login shell).
    #[serde(rename = "terminal.open")]
    TerminalOpen,
    #[serde(rename = "terminal.kill")]
    TerminalKill,
    /// Detail: the path (several, one a line, for `fs/write-files`).
    #[serde(rename = "fs.write")]
    FsWrite,
    /// Detail: the path.
    #[serde(rename = "fs.mkdir")]
    FsMkdir,
    /// Detail: the path.
    #[serde(rename = "fs.remove")]
    FsRemove,
    /// Detail: `from -> to`.
    #[serde(rename = "fs.rename")]
    FsRename,
    #[serde(rename = "session.create")]
    SessionCreate,
    #[serde(rename = "session.update")]
    SessionUpdate,
    #[serde(rename = "session.delete")]
    SessionDelete,
    /// Detail: the prompt's first 200 characters.
    #[serde(rename = "session.prompt")]
    SessionPrompt,
    #[serde(rename = "session.cancel")]
    SessionCancel,
    /// Detail: the port.
    #[serde(rename = "preview.create")]
    PreviewCreate,
    #[serde(rename = "preview.delete")]
    PreviewDelete,
    /// Detail: the option chosen.
    #[serde(rename = "approval.answer")]
    ApprovalAnswer,
    /// Detail: the token's name and scopes.
    #[serde(rename = "token.create")]
    TokenCreate,
    #[serde(rename = "token.revoke")]
    TokenRevoke,
    /// Detail: the user's name and role.
    #[serde(rename = "user.create")]
    UserCreate,
    /// Detail: which fields changed (never a password).
    #[serde(rename = "user.update")]
    UserUpdate,
    #[serde(rename = "user.delete")]
    UserDelete,
    /// Detail: the member and their role.
    #[serde(rename = "member.add")]
    MemberAdd,
    /// Detail: the member.
    #[serde(rename = "member.remove")]
    MemberRemove,
    /// A protected agent's access token made anew (never the token).
    #[serde(rename = "access_token.rotate")]
    AccessTokenRotate,
    /// The caller joined a protected agent.
    #[serde(rename = "agent.join")]
    AgentJoin,
    /// Detail: the secret's name and hosts (never its value).
    #[serde(rename = "secret.set")]
    SecretSet,
    /// Detail: the secret's name.
    #[serde(rename = "secret.delete")]
    SecretDelete,
    #[serde(rename = "config.reload")]
    ConfigReload,
    /// A password or admin-token sign-in to the web UI, made or refused.
    #[serde(rename = "sign_in")]
    SignIn,
    #[serde(rename = "sign_out")]
    SignOut,
}

impl Action {
    pub const ALL: &[Action] = &[
        Action::AgentCreate,
        Action::AgentUpdate,
        Action::AgentDestroy,
        Action::AgentStart,
        Action::AgentStop,
        Action::AgentPause,
        Action::AgentRebuild,
        Action::AgentSetup,
        Action::Exec,
        Action::CodeRun,
        Action::CodeContextCreate,
        Action::CodeContextRemove,
        Action::CodeContextRestart,
        Action::ProcessStart,
        Action::ProcessSignal,
        Action::ProcessRemove,
        Action::TerminalOpen,
        Action::TerminalKill,
        Action::FsWrite,
        Action::FsMkdir,
        Action::FsRemove,
        Action::FsRename,
        Action::SessionCreate,
        Action::SessionUpdate,
        Action::SessionDelete,
        Action::SessionPrompt,
        Action::SessionCancel,
        Action::PreviewCreate,
        Action::PreviewDelete,
        Action::ApprovalAnswer,
        Action::TokenCreate,
        Action::TokenRevoke,
        Action::UserCreate,
        Action::UserUpdate,
        Action::UserDelete,
        Action::MemberAdd,
        Action::MemberRemove,
        Action::AccessTokenRotate,
        Action::AgentJoin,
        Action::SecretSet,
        Action::SecretDelete,
        Action::ConfigReload,
        Action::SignIn,
        Action::SignOut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::AgentCreate => "agent.create",
            Action::AgentUpdate => "agent.update",
            Action::AgentDestroy => "agent.destroy",
            Action::AgentStart => "agent.start",
            Action::AgentStop => "agent.stop",
            Action::AgentPause => "agent.pause",
            Action::AgentRebuild => "agent.rebuild",
            Action::AgentSetup => "agent.setup",
            Action::Exec => "exec",
            Action::CodeRun => "code.run",
            Action::CodeContextCreate => "code.context.create",
            Action::CodeContextRemove => "code.context.remove",
            Action::CodeContextRestart => "code.context.restart",
            Action::ProcessStart => "process.start",
            Action::ProcessSignal => "process.signal",
            Action::ProcessRemove => "process.remove",
            Action::TerminalOpen => "terminal.open",
            Action::TerminalKill => "terminal.kill",
            Action::FsWrite => "fs.write",
            Action::FsMkdir => "fs.mkdir",
            Action::FsRemove => "fs.remove",
            Action::FsRename => "fs.rename",
            Action::SessionCreate => "session.create",
            Action::SessionUpdate => "session.update",
            Action::SessionDelete => "session.delete",
            Action::SessionPrompt => "session.prompt",
            Action::SessionCancel => "session.cancel",
            Action::PreviewCreate => "preview.create",
            Action::PreviewDelete => "preview.delete",
            Action::ApprovalAnswer => "approval.answer",
            Action::TokenCreate => "token.create",
            Action::TokenRevoke => "token.revoke",
            Action::UserCreate => "user.create",
            Action::UserUpdate => "user.update",
            Action::UserDelete => "user.delete",
            Action::MemberAdd => "member.add",
            Action::MemberRemove => "member.remove",
            Action::AccessTokenRotate => "access_token.rotate",
            Action::AgentJoin => "agent.join",
            Action::SecretSet => "secret.set",
            Action::SecretDelete => "secret.delete",
            Action::ConfigReload => "config.reload",
            Action::SignIn => "sign_in",
            Action::SignOut => "sign_out",
        }
    }
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
    /// The entries of the actions of the user with this id, and those on the agents they own.
    Mine(String),
    /// As `Mine`, and only entries of these agents (a token limited to some agents).
    MineOf(String, Vec<String>),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the API reads and writes are the ones filters are checked against.
    #[test]
    fn every_action_is_named_alike_on_the_wire_and_in_filters() {
        for a in Action::ALL {
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
            assert_eq!(Action::parse(a.as_str()), Some(*a));
        }
    }
}
