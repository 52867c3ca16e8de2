//! Users and their API tokens, and what each may do: a user's role and a token's scopes.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A permission a route needs and a token may carry.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
pub enum Scope {
    /// See agents, their settings, logs and events.
    #[serde(rename = "agents:read")]
    AgentsRead,
    /// Create, change, start, stop, rebuild and destroy agents.
    #[serde(rename = "agents:write")]
    AgentsWrite,
    /// Work inside agents: terminals, exec, processes, files, sessions, previews.
    #[serde(rename = "agents:use")]
    AgentsUse,
    /// Answer approvals.
    #[serde(rename = "approvals:answer")]
    ApprovalsAnswer,
    /// Users, every token, config reload, metrics.
    #[serde(rename = "admin")]
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::AgentsRead,
        Scope::AgentsWrite,
        Scope::AgentsUse,
        Scope::ApprovalsAnswer,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::AgentsRead => "agents:read",
            Scope::AgentsWrite => "agents:write",
            Scope::AgentsUse => "agents:use",
            Scope::ApprovalsAnswer => "approvals:answer",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A user's role: admins may do everything; members everything but administration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }

    /// Whether a user of this role has `scope`; a token of the user has at most these.
    pub fn grants(self, scope: Scope) -> bool {
        match self {
            Role::Admin => true,
            Role::Member => scope != Scope::Admin,
        }
    }

    /// Every scope the role grants.
    pub fn scopes(self) -> BTreeSet<Scope> {
        Scope::ALL.into_iter().filter(|s| self.grants(*s)).collect()
    }
}

/// The user `server.admin_token` acts as; it always exists and is always an admin.
pub const BUILT_IN_ADMIN: &str = "admin";

/// A person (or a program's owner) who signs in and holds tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// Whether the user can sign in with a password (the built-in admin has none until set).
    pub has_password: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl User {
    pub fn is_built_in(&self) -> bool {
        self.id == BUILT_IN_ADMIN
    }
}

/// An API token as kept: never the token itself, only its SHA-256.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiToken {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub token_hash: String,
    pub scopes: BTreeSet<Scope>,
    /// The agents (ids) it is limited to; `None` for every agent its user may see.
    pub agents: Option<BTreeSet<String>>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Its commands wait for approval as anyone's but the owner's would, even its user's.
    pub supervised: bool,
    /// What its commands that would wait for approval get.
    pub approvals: TokenApprovals,
}

impl ApiToken {
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|end| end <= now)
    }
}

/// Which commands (exec, background processes, terminal opens) of an agent wait for a person's
/// approval when someone other than its owner or an admin, or a supervised token, makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommandApprovals {
    /// None.
    #[default]
    Never,
    /// Those matching one of `approvals.dangerous_patterns`.
    Dangerous,
    /// Every one.
    Always,
}

impl CommandApprovals {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandApprovals::Never => "never",
            CommandApprovals::Dangerous => "dangerous",
            CommandApprovals::Always => "always",
        }
    }

    pub fn parse(s: &str) -> Option<CommandApprovals> {
        [
            CommandApprovals::Never,
            CommandApprovals::Dangerous,
            CommandApprovals::Always,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// An agent's approval settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentApprovals {
    pub commands: CommandApprovals,
}

/// What a token's command that would wait for approval gets instead: refused at once (`deny`,
/// a subagent's mode), a person's answer (`ask`), or run (`allow`, a batch job's).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TokenApprovals {
    Deny,
    #[default]
    Ask,
    Allow,
}

impl TokenApprovals {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenApprovals::Deny => "deny",
            TokenApprovals::Ask => "ask",
            TokenApprovals::Allow => "allow",
        }
    }

    pub fn parse(s: &str) -> Option<TokenApprovals> {
        [
            TokenApprovals::Deny,
            TokenApprovals::Ask,
            TokenApprovals::Allow,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// Who may see and use an agent besides its owner, admins and its members.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentAccess {
    /// Only the owner, admins and members the owner or an admin added; everyone else gets
    /// `404`, and the agent is in no list of theirs.
    #[default]
    Private,
    /// As `private`, but anyone signed in who presents the agent's access token (`POST
    /// …/join`) becomes a `user` member.
    Protected,
    /// Anyone signed in may read and use it (as a `user` member may).
    Public,
}

impl AgentAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentAccess::Private => "private",
            AgentAccess::Protected => "protected",
            AgentAccess::Public => "public",
        }
    }

    pub fn parse(s: &str) -> Option<AgentAccess> {
        [
            AgentAccess::Private,
            AgentAccess::Protected,
            AgentAccess::Public,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

/// What a member of an agent may do there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemberRole {
    /// Read and use: terminals, exec, processes, files, code, sessions, previews.
    User,
    /// A user's rights, and start, stop, rebuild, setup and changing the settings.
    Operator,
}

impl MemberRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::User => "user",
            MemberRole::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<MemberRole> {
        match s {
            "user" => Some(MemberRole::User),
            "operator" => Some(MemberRole::Operator),
            _ => None,
        }
    }
}

/// What deciding access to an agent needs to know of it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFacts {
    pub owner_id: String,
    pub access: AgentAccess,
    /// By user id.
    pub members: std::collections::BTreeMap<String, MemberRole>,
}

/// A member of an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub user_id: String,
    pub user_name: String,
    pub role: MemberRole,
    pub added_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_read_back_as_written() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
        }
        assert_eq!(Scope::parse("agents"), None);
    }

    #[test]
    fn members_have_everything_but_admin() {
        assert!(Role::Admin.grants(Scope::Admin));
        assert!(!Role::Member.grants(Scope::Admin));
        assert_eq!(Role::Member.scopes().len(), Scope::ALL.len() - 1);
    }
}
