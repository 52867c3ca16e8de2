//! The bodies of signing in to the web UI (`/api/v1/session`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Either `token` alone, or `name` and `password`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// The admin token (API tokens do not open web sessions: a session has its user's whole
    /// role, which may be more than a token's).
    #[serde(default)]
    pub token: Option<String>,
    /// A user's name, with `password`.
    #[serde(default)]
    #[schema(max_length = 63)]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(max_length = 1024)]
    pub password: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct SessionStatus {
    pub authenticated: bool,
}
