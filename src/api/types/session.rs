//! The bodies of signing in to the web UI (`/api/v1/session`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Either `token` alone, or `name` and `password`.
#[derive(Deserialize, ToSchema)]
#[serde(untagged, try_from = "SignInBody")]
pub enum SignIn {
    Token(TokenSignIn),
    Password(PasswordSignIn),
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenSignIn {
    /// The admin token (API tokens do not open web sessions: a session has its user's whole
    /// role, which may be more than a token's).
    pub token: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordSignIn {
    /// A user's name.
    #[schema(max_length = 63)]
    pub name: String,
    #[schema(max_length = 1024)]
    pub password: String,
}

/// What the body may hold, read before it is told apart (so that a wrong mix is said plainly).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignInBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl TryFrom<SignInBody> for SignIn {
    type Error = &'static str;

    fn try_from(b: SignInBody) -> Result<SignIn, &'static str> {
        match b {
            SignInBody {
                token: Some(token),
                name: None,
                password: None,
            } => Ok(SignIn::Token(TokenSignIn { token })),
            SignInBody {
                token: None,
                name: Some(name),
                password: Some(password),
            } => Ok(SignIn::Password(PasswordSignIn { name, password })),
            _ => Err("send either {\"token\"} or {\"name\", \"password\"}"),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct SessionStatus {
    pub authenticated: bool,
}
