//! `GET /api/v1/events`: Server-Sent Events, one `agent` event per change (and a snapshot of
//! every agent when the stream opens or after it fell behind), `deleted` when one is gone, and
//! `pull` events while an agent's image is being pulled, `egress` events for the egress proxy's
//! decisions, `process` events when a background process starts or ends, and `expiring` when an
//! agent's lifetime is nearly up. `?agent=ID` keeps to one agent's events.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use utoipa::IntoParams;

use super::access::sees_agent;
use super::error::{ApiError, ApiQuery};
use super::types::conversation::{Approval, Session};
use super::types::process::ProcessEvent;
use super::types::{Agent, EgressEvent, ExpiringEvent, PullProgress};
use super::AppState;
use crate::events::AgentEvent;
use crate::model;
use crate::teams::access::sees;
use crate::teams::Principal;

fn agent_event(agent: model::Agent) -> Event {
    Event::default()
        .event("agent")
        .json_data(Agent::from(agent))
        .unwrap_or_else(|_| Event::default().comment("unencodable agent"))
}

/// The `pull` event's data: the agent's id and its pull's progress.
#[derive(serde::Serialize)]
struct PullEvent<'a> {
    id: &'a str,
    #[serde(flatten)]
    progress: PullProgress,
}

fn pull_event(id: &str, progress: model::PullProgress) -> Event {
    Event::default()
        .event("pull")
        .json_data(PullEvent {
            id,
            progress: progress.into(),
        })
        .unwrap_or_else(|_| Event::default().comment("unencodable pull progress"))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only this agent's events (its id), and only it in the snapshot.
    #[serde(default)]
    #[param(example = "k3f9x2m1q8ab")]
    pub agent: Option<String>,
}

/// A stream of agent changes.
#[utoipa::path(get, path = "/api/v1/events", tag = "agents", operation_id = "events",
    params(EventsQuery),
    responses((status = 200, content_type = "text/event-stream", description = "`agent` events carry an Agent; `deleted` events carry {\"id\"}; `pull` events carry {\"id\"} and a PullProgress; `egress` events carry an EgressEvent; `process` events carry a ProcessEvent when a background process starts or ends; `session` events carry a Session when one is created or changes, `session_deleted` events {\"id\", \"agentId\", \"deleted\": true}; `approval` events carry an Approval when one is asked for or resolved; `expiring` events carry an ExpiringEvent a minute before an agent's `expiresAt` (at once when less remains)"),
        (status = 404, body = super::error::ErrorBody, description = "`agent` names no agent")))]
pub async fn events(
    State(st): State<AppState>,
    principal: Principal,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let mut rx = st.lc.subscribe();
    let only = q.agent;
    // Subscribed first, so that nothing between this look and the snapshot is missed.
    if let Some(id) = &only {
        if !sees_agent(&st, &principal, id) {
            return Err(ApiError::not_found(format!(
                "there is no agent with id {id}"
            )));
        }
        st.lc.get(id).await?;
    }
    let lc = st.lc.clone();
    let can_use = principal.can(crate::model::teams::Scope::AgentsUse);
    // Asked per event: a membership given or taken while the stream is open counts at once.
    let auth = st.auth.clone();
    let sees = move |id: &str| sees(&principal, id, auth.directory.agent_facts(id).as_ref());
    let counted = st.lc.metrics().sse_subscriber();
    let stream = async_stream::stream! {
        // Counted for as long as the client follows (the stream is dropped when it goes).
        let _counted = counted;
        let mut snapshot = true;
        loop {
            if snapshot {
                snapshot = false;
                match &only {
                    None => if let Ok(agents) = lc.list().await {
                        for a in agents.into_iter().filter(|a| sees(&a.id)) {
                            yield Ok(agent_event(a));
                        }
                    },
                    Some(id) => match lc.get(id).await {
                        Ok(a) => yield Ok(agent_event(a)),
                        Err(crate::lifecycle::LifecycleError::NotFound(_)) => yield Ok(deleted_event(id)),
                        Err(_) => {}
                    },
                }
            }
            let event = rx.recv().await;
            if let Ok(e) = &event {
                if only.as_ref().is_some_and(|id| e.agent_id() != id)
                    || !sees(e.agent_id())
                    || (e.shows_use() && !can_use)
                {
                    continue;
                }
            }
            match event {
                Ok(AgentEvent::Changed(a)) => yield Ok(agent_event(*a)),
                Ok(AgentEvent::Deleted(id)) => yield Ok(deleted_event(&id)),
                Ok(AgentEvent::Expiring { id, expires_at }) => yield Ok(Event::default()
                    .event("expiring")
                    .json_data(ExpiringEvent { id, expires_at })
                    .unwrap_or_else(|_| Event::default().comment("unencodable expiring event"))),
                Ok(AgentEvent::Pull { id, progress }) => yield Ok(pull_event(&id, *progress)),
                Ok(AgentEvent::Egress(e)) => yield Ok(Event::default()
                    .event("egress")
                    .json_data(EgressEvent::from(*e))
                    .unwrap_or_else(|_| Event::default().comment("unencodable egress event"))),
                Ok(AgentEvent::Process { id, process }) => yield Ok(Event::default()
                    .event("process")
                    .json_data(ProcessEvent { process: super::processes::record(&lc, &id, *process), id })
                    .unwrap_or_else(|_| Event::default().comment("unencodable process event"))),
                Ok(AgentEvent::Session(s)) => yield Ok(Event::default()
                    .event("session")
                    .json_data(Session::from(*s))
                    .unwrap_or_else(|_| Event::default().comment("unencodable session"))),
                Ok(AgentEvent::SessionDeleted { id, agent_id }) => yield Ok(Event::default()
                    .event("session_deleted")
                    .data(serde_json::json!({"id": id, "agentId": agent_id, "deleted": true}).to_string())),
                Ok(AgentEvent::Approval(a)) => yield Ok(Event::default()
                    .event("approval")
                    .json_data(Approval::from(*a))
                    .unwrap_or_else(|_| Event::default().comment("unencodable approval"))),
                Err(RecvError::Lagged(_)) => snapshot = true,
                Err(RecvError::Closed) => break,
            }
        }
    };
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

fn deleted_event(id: &str) -> Event {
    Event::default()
        .event("deleted")
        .data(serde_json::json!({ "id": id }).to_string())
}
