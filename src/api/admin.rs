//! `/api/v1/admin`: running the server itself. The work is the config's business
//! ([`crate::config::reload`]); the handler hands it on and answers.

use axum::extract::State;
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::types::ConfigReload;
use super::AppState;
use crate::config::reload::{ReloadError, Reloaded};
use crate::config::ConfigError;

/// Reads the config file again, as `SIGHUP` does: puts in force what can change at runtime
/// and names what needs a restart; a file that is not a valid config changes nothing.
#[utoipa::path(post, path = "/api/v1/admin/reload", tag = "admin", operation_id = "reloadConfig",
    responses((status = 200, body = ConfigReload, description = "Read and checked; `applied` is in force, `needsRestart` waits for a restart"),
        (status = 400, body = ErrorBody, description = "The file is not a valid config; the message names the file and the key. The server keeps its config"),
        (status = 409, body = ErrorBody, description = "The server was started without a config file, or cannot read it now")))]
pub async fn reload(State(st): State<AppState>) -> Result<Json<ConfigReload>, ApiError> {
    let Reloaded {
        applied,
        needs_restart,
    } = st.reloader.reload().await?;
    Ok(Json(ConfigReload {
        applied,
        needs_restart,
    }))
}

impl From<ReloadError> for ApiError {
    fn from(e: ReloadError) -> ApiError {
        let message = e.to_string();
        match e {
            ReloadError::NoFile | ReloadError::Invalid(ConfigError::Read { .. }) => {
                ApiError::conflict(message)
            }
            ReloadError::Invalid(ConfigError::Parse { .. } | ConfigError::Invalid { .. }) => {
                ApiError::invalid(message)
            }
        }
    }
}
