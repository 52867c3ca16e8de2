//! `X-Agenthold-Agent-State` on every answer of a route under `/api/v1/agents/{id}`: the agent's
//! state once the request was handled, so that a client's handle follows a wake (or a stop, a
//! destroy) that an operation caused without asking again.

use axum::extract::{MatchedPath, OriginalUri, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;
use crate::model::AgentState;

/// The header's name, as the documents spell it.
pub const HEADER_NAME: &str = "X-Agenthold-Agent-State";
/// The same, as HTTP/2 and axum's maps want it.
const HEADER: &str = "x-agenthold-agent-state";

/// Adds [`HEADER`] to the answer of an agent's route; nothing for an agent that is gone or a
/// route that names none (`/api/v1/approvals/{id}` is an approval's).
pub async fn add(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>();
    let uri = req.extensions().get::<OriginalUri>();
    let id = route
        .zip(uri)
        .and_then(|(route, uri)| agent_of(route.as_str(), uri.0.path()));
    let mut response = next.run(req).await;
    if let Some(id) = id {
        if let Ok(agent) = st.lc.get(&id).await {
            // sandboxd's hello registers its tunnel a moment before the store says `running`:
            // an operation that woke the agent and used that tunnel tells what it found.
            let state = match agent.state {
                AgentState::Starting if st.lc.tunnels().get(&id).is_some() => AgentState::Running,
                other => other,
            };
            response
                .headers_mut()
                .insert(HEADER, HeaderValue::from_static(state.as_str()));
        }
    }
    response
}

/// The agent id in the path of a route under `/agents/{id}`: the segment where the route has
/// `{id}`, counted from the end (the route may be seen without the prefix it is nested under;
/// no segment after the id holds a `/`).
fn agent_of(route: &str, path: &str) -> Option<String> {
    let route: Vec<&str> = route.split('/').collect();
    let at = route.windows(2).position(|w| w == ["agents", "{id}"])? + 1;
    let after = route.len() - at - 1;
    let path: Vec<&str> = path.split('/').collect();
    let id = path.len().checked_sub(after + 1).map(|i| path[i])?;
    (!id.is_empty()).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_the_segment_of_its_id() {
        let of = agent_of;
        assert_eq!(
            of("/api/v1/agents/{id}/fs/read", "/api/v1/agents/a1/fs/read"),
            Some("a1".into())
        );
        assert_eq!(
            of("/api/v1/agents/{id}", "/api/v1/agents/a1"),
            Some("a1".into())
        );
        assert_eq!(of("/api/v1/approvals/{id}", "/api/v1/approvals/x"), None);
        assert_eq!(of("/api/v1/agents", "/api/v1/agents"), None);
        // Seen without the prefix it is nested under.
        assert_eq!(
            of("/agents/{id}/exec", "/api/v1/agents/a2/exec"),
            Some("a2".into())
        );
    }
}
