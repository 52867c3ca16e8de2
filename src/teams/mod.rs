//! Teams: users, their API tokens, who a credential is ([`Principal`]), and who may do what on
//! an agent ([`access`], [`membership`]). The rules of who may create, change and revoke what
//! live here; the API's handlers only translate.

pub mod access;
pub mod command_rules;
pub mod directory;
pub mod membership;
pub mod password;
pub mod principal;
pub mod stream_ends;
pub mod throttle;

pub use directory::{Directory, NewToken, NewUser, UserUpdate};
pub use principal::{Principal, TokenGrant};
pub use stream_ends::StreamEnds;

use crate::store::StoreError;

/// Why a users or tokens operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum TeamsError {
    #[error("there is no user with id {0}")]
    UserNotFound(String),
    #[error("the name {0:?} is already used by another user")]
    NameTaken(String),
    #[error("this is the last admin: make another user an admin first")]
    LastAdmin,
    #[error("the built-in user admin (whom server.admin_token acts as) cannot be {0}")]
    BuiltIn(&'static str),
    #[error("there is no token with id {0}")]
    TokenNotFound(String),
    /// A token's `agents` names one the caller does not see (or none at all).
    #[error("there is no agent {0:?}")]
    AgentNotFound(String),
    /// A field breaks its rule; `field` is its camelCase name.
    #[error("{why}")]
    Invalid { field: &'static str, why: String },
    /// A token may not do more than the credential that creates it.
    #[error("{0}")]
    Beyond(String),
    #[error("{user} is not a member of agent {agent}")]
    NotMember { agent: String, user: String },
    #[error(
        "agent {agent} is {access}: only a protected agent has an access token (PATCH its access \
         to protected first)"
    )]
    NotProtected { agent: String, access: &'static str },
    #[error("that is not the access token of agent {0}")]
    WrongAccessToken(String),
    #[error(transparent)]
    Password(#[from] password::PasswordError),
    #[error("the users could not be kept: {0}")]
    Store(StoreError),
}

impl From<StoreError> for TeamsError {
    fn from(e: StoreError) -> TeamsError {
        match e {
            StoreError::UserNotFound(id) => TeamsError::UserNotFound(id),
            StoreError::UserNameTaken(name) => TeamsError::NameTaken(name),
            StoreError::LastAdmin => TeamsError::LastAdmin,
            StoreError::NotFound(id) => TeamsError::AgentNotFound(id),
            other => TeamsError::Store(other),
        }
    }
}

impl TeamsError {
    pub fn invalid(field: &'static str, why: impl Into<String>) -> TeamsError {
        TeamsError::Invalid {
            field,
            why: why.into(),
        }
    }
}
