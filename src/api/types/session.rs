//! The bodies of signing in to the web UI (`/api/v1/session`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// The admin token.
    pub token: String,
}

#[derive(Serialize, ToSchema)]
pub struct SessionStatus {
    pub authenticated: bool,
}
