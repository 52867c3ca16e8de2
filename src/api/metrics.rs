//! `GET /metrics`: the Prometheus scrape (see [`crate::metrics`]), on the API listener.

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;
use crate::metrics::Snapshot;
use crate::model::AgentState;
use crate::store::{hash_token, verify_token};

/// Whether the request carries `server.metrics_token`, which opens this route and nothing else.
pub fn is_scraper(st: &AppState, path: &str, headers: &HeaderMap) -> bool {
    if path != crate::metrics::PATH {
        return false;
    }
    let config = st.config();
    let Some(token) = config.server.metrics_token.as_deref() else {
        return false;
    };
    super::auth::bearer_token(headers).is_some_and(|t| verify_token(t, &hash_token(token)))
}

pub async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let agents = st
        .lc
        .list()
        .await
        .map_err(|e| ApiError::internal(format!("reading the agents: {e}")))?;
    let agents_by_state = AgentState::ALL
        .iter()
        .map(|s| {
            let n = agents.iter().filter(|a| a.state == *s).count();
            (*s, i64::try_from(n).unwrap_or(i64::MAX))
        })
        .collect();
    let tunnels = i64::try_from(st.lc.tunnels().connected_count()).unwrap_or(i64::MAX);
    let text = st
        .lc
        .metrics()
        .render(Snapshot {
            agents_by_state,
            tunnels,
        })
        .map_err(|e| ApiError::internal(format!("encoding the metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}
