//! Users and API tokens: `/api/v1/users`, `/api/v1/tokens` and `/api/v1/me`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::teams::{ApiToken, TokenApprovals, User as UserRecord};
pub use crate::model::teams::{Role, Scope};
use crate::teams::Principal;

/// A user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[schema(example = "q8x2m1k3f9ab")]
    pub id: String,
    /// Lowercase letters, digits and `-`, like an agent's name. The built-in `admin` is who
    /// `server.admin_token` acts as.
    #[schema(example = "ann")]
    pub name: String,
    pub role: Role,
    /// Whether the user can sign in with a password.
    pub has_password: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<UserRecord> for User {
    fn from(u: UserRecord) -> User {
        User {
            id: u.id,
            name: u.name,
            role: u.role,
            has_password: u.has_password,
            created_at: u.created_at,
            updated_at: u.updated_at,
        }
    }
}

/// `POST /api/v1/users`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateUser {
    /// Lowercase letters, digits and `-` (not at either end), at most 63 characters.
    #[schema(
        example = "ann",
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    pub name: String,
    pub role: Role,
    /// 8 to 1024 characters; absent, the user cannot sign in with a password until a `PATCH`
    /// sets one.
    #[serde(default)]
    #[schema(min_length = 8, max_length = 1024)]
    pub password: Option<String>,
}

/// `PATCH /api/v1/users/{id}`: what is absent stays as it is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateUser {
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    pub name: Option<String>,
    /// The last admin cannot be made a member (`409`).
    #[serde(default)]
    pub role: Option<Role>,
    #[serde(default)]
    #[schema(min_length = 8, max_length = 1024)]
    pub password: Option<String>,
}

/// An API token, without the token itself (shown once, when it is made).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Token {
    #[schema(example = "t3k9x2m1q8ab")]
    pub id: String,
    #[schema(example = "ci-deploy")]
    pub name: String,
    /// The id of the user it acts for; it can do at most what that user can.
    pub user_id: String,
    pub scopes: Vec<Scope>,
    /// The ids of the agents it is limited to; absent for every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    /// When it stops working; absent for never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Its commands wait for approval wherever the agent's `approvals.commands` holds them,
    /// even its owner's or an admin's.
    #[serde(default)]
    pub supervised: bool,
    /// What its commands that would wait for approval get: `deny` (refused at once, `403
    /// approval_rejected`), `ask` (a person answers) or `allow` (they run).
    #[serde(default)]
    pub approvals: TokenApprovals,
}

impl From<ApiToken> for Token {
    fn from(t: ApiToken) -> Token {
        Token {
            id: t.id,
            name: t.name,
            user_id: t.user_id,
            scopes: t.scopes.into_iter().collect(),
            agents: t.agents.map(|a| a.into_iter().collect()),
            created_at: t.created_at,
            expires_at: t.expires_at,
            supervised: t.supervised,
            approvals: t.approvals,
        }
    }
}

/// `POST /api/v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateToken {
    /// 1 to 64 characters, for people to tell tokens apart; no control characters.
    #[schema(
        example = "ci-deploy",
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// At least one; each one the caller has.
    #[schema(min_items = 1, example = json!(["agents:read", "agents:use"]))]
    pub scopes: Vec<Scope>,
    /// Agents by id or name (at most 256) the token is limited to: every other agent does not
    /// exist for it. Absent: every agent the caller sees.
    #[serde(default)]
    #[schema(max_items = 256)]
    pub agents: Option<Vec<String>>,
    /// The token stops working this many days (1 to 3650) after now; absent, never (but no
    /// later than the token that makes it, when a token makes it).
    #[serde(default, deserialize_with = "super::whole::option")]
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<u32>,
    /// Its commands wait for approval wherever the agent's `approvals.commands` holds them, even
    /// when its user owns the agent or is an admin (unless its `approvals` is `allow`, which
    /// answers them in advance there, audited). A token made with a supervised token must be
    /// supervised (else `403`). Absent: false.
    #[serde(default)]
    pub supervised: bool,
    /// What its commands that would wait for approval get: `deny` (refused at once: a
    /// subagent's), `ask` (a person answers; the default) or `allow` (they run: a batch job's).
    /// Not laxer than the token that makes it (else `403`). `allow` answers in advance only what
    /// its user could answer (agents they own, any as an admin); elsewhere its commands wait.
    #[serde(default)]
    pub approvals: Option<TokenApprovals>,
}

/// `POST /api/v1/tokens`'s answer: the token, shown this once, and what it is.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    /// Send it as `Authorization: Bearer <token>`. Only its hash is kept: it cannot be shown
    /// again.
    #[schema(example = "aht_9f2c…")]
    pub token: String,
    #[serde(flatten)]
    pub info: Token,
}

/// `GET /api/v1/me`: who the credential is, and what it may do.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Me {
    pub user: User,
    /// The scopes in effect: the user's role's, narrowed by the token's.
    pub scopes: Vec<Scope>,
    /// The token the request came with; absent for the admin token and a web session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Token>,
}

impl Me {
    pub fn new(p: &Principal, user: UserRecord, token: Option<ApiToken>) -> Me {
        Me {
            user: user.into(),
            scopes: p.scopes().into_iter().collect(),
            token: token.map(Into::into),
        }
    }
}

/// A member of an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentMember {
    /// The user's id.
    #[schema(example = "q8x2m1k3f9ab")]
    pub user_id: String,
    #[schema(example = "ann")]
    pub user_name: String,
    pub role: crate::model::teams::MemberRole,
    pub added_at: DateTime<Utc>,
}

impl From<crate::model::teams::Member> for AgentMember {
    fn from(m: crate::model::teams::Member) -> AgentMember {
        AgentMember {
            user_id: m.user_id,
            user_name: m.user_name,
            role: m.role,
            added_at: m.added_at,
        }
    }
}

/// `POST /api/v1/agents/{id}/members`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddMember {
    /// The user's id or name.
    #[schema(example = "ann", min_length = 1, max_length = 128)]
    pub user: String,
    /// `user` (read and use) or `operator` (also start, stop, rebuild, setup and settings);
    /// a member already there gets this role.
    pub role: crate::model::teams::MemberRole,
}

/// `POST /api/v1/agents/{id}/join`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinAgent {
    /// The agent's access token, from its owner.
    #[schema(example = "ahj_5d1c…", min_length = 1, max_length = 256)]
    pub access_token: String,
}

/// The answer of `POST /api/v1/agents/{id}/access-token`: shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessToken {
    #[schema(example = "ahj_5d1c…")]
    pub access_token: String,
}
