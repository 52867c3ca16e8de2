//! `GET /api/v1/agents/{id}/terminals` and `DELETE /api/v1/agents/{id}/terminals/{sid}`: the
//! agent's terminal sessions (the `terminal.list` / `terminal.kill` channels).
//!
//! Neither wakes an agent nor counts as use of it: a sleeping agent simply has no sessions, and
//! a page that polls the list must not keep its agent awake. A paused agent's sessions are kept
//! but not listed (its sandbox is frozen); ending one thaws it, as any use does.

use agenthold_proto::{self as proto, TerminalKill, TerminalList};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::terminal::SESSION_ENDED;
use super::types::TerminalSession;
use super::AppState;
use crate::model::AgentState;
use crate::tunnel::registry::Link;

/// How long a request waits for a running agent's sandboxd to reconnect.
const RECONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The agent's sandboxd, if the agent is running; `None` when it cannot have sessions.
async fn sandbox(st: &AppState, id: &str) -> Result<Option<Link>, ApiError> {
    let agent = st.lc.get(id).await?;
    if let Some(h) = st.lc.link(id) {
        return Ok(Some(h));
    }
    if matches!(agent.state, AgentState::Running | AgentState::Starting) {
        return Ok(Some(st.lc.tunnels().wait(id, RECONNECT_WAIT).await?));
    }
    Ok(None)
}

/// Lists the agent's terminal sessions (none while it sleeps).
#[utoipa::path(get, path = "/api/v1/agents/{id}/terminals", tag = "terminal", operation_id = "listTerminals",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [TerminalSession]), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The agent is running but its sandbox did not reconnect in time"), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds")))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<TerminalSession>>, ApiError> {
    let Some(handle) = sandbox(&st, &id).await? else {
        return Ok(Json(Vec::new()));
    };
    let mut stream = handle.open().await?;
    let sessions = proto::open(&mut stream, TerminalList {}).await?;
    Ok(Json(sessions.into_iter().map(Into::into).collect()))
}

/// Ends a terminal session: its shell gets SIGHUP (then SIGKILL); viewers get the exit.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/terminals/{sid}", tag = "terminal", operation_id = "killTerminal",
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id", pattern = "^[a-z0-9]{16}$")),
    responses((status = 204, description = "Ended"), (status = 404, body = ErrorBody, description = "No such agent, or no such session"),
        (status = 503, body = ErrorBody, description = "The agent is running but its sandbox did not reconnect in time"), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds")))]
pub async fn kill(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if !agenthold_proto::is_session_id(&sid) {
        return Err(ApiError::not_found("no such terminal session"));
    }
    st.lc.thaw_for_use(&id).await?;
    let Some(handle) = sandbox(&st, &id).await? else {
        return Err(ApiError::not_found(SESSION_ENDED));
    };
    let mut stream = handle.open().await?;
    proto::open(
        &mut stream,
        TerminalKill {
            session: sid.clone(),
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
