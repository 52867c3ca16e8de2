//! `/api/v1/agents/{id}/sessions…`: conversations with a harness (see [`crate::sessions`]).
//! The handlers read the request and call the sessions' methods; the rules live there.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use super::types::conversation::{
    CreateSession, PromptAccepted, PromptBody, Session, TranscriptEvent, UpdateSession,
};
use super::AppState;
use crate::model::sessions::StoredEvent;
use crate::sessions::{NewSession, SessionError};

/// Events read from the store at a time for an SSE follower.
const SSE_BATCH: u32 = 1000;

/// Makes a session; its harness starts with the first prompt.
#[utoipa::path(post, path = "/api/v1/agents/{id}/sessions", tag = "sessions", operation_id = "createSession",
    request_body = CreateSession, params(("id" = String, Path, description = "The agent's id")),
    responses((status = 201, body = Session),
        (status = 400, body = ErrorBody, description = "No such harness (the message names the configured ones), or a bad cwd or title"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "The agent has `sessions.max_per_agent` sessions, or no harness can be had: none is configured, or none is named and neither the agent's preset nor `sandbox.default_harness` names one")))]
pub async fn create(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CreateSession>,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    let req = NewSession {
        harness: body.harness,
        cwd: body.cwd,
        title: body.title,
    };
    let s = st.sessions.create(&id, req).await?;
    Ok((StatusCode::CREATED, Json(s.into())))
}

/// The agent's sessions, oldest first.
#[utoipa::path(get, path = "/api/v1/agents/{id}/sessions", tag = "sessions", operation_id = "listSessions",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [Session]), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Session>>, ApiError> {
    let all = st.sessions.list(&id).await?;
    Ok(Json(all.into_iter().map(Session::from).collect()))
}

/// One session.
#[utoipa::path(get, path = "/api/v1/agents/{id}/sessions/{sid}", tag = "sessions", operation_id = "getAgentSession",
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id")),
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(st.sessions.get(&id, &sid).await?.into()))
}

/// Renames a session.
#[utoipa::path(patch, path = "/api/v1/agents/{id}/sessions/{sid}", tag = "sessions", operation_id = "updateSession",
    request_body = UpdateSession,
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id")),
    responses((status = 200, body = Session), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn update(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
    ApiJson(body): ApiJson<UpdateSession>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(
        st.sessions.rename(&id, &sid, body.title).await?.into(),
    ))
}

/// Deletes a session: a running turn is cancelled, the harness ended, the transcript deleted.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/sessions/{sid}", tag = "sessions", operation_id = "deleteSession",
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id")),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    st.sessions.delete(&id, &sid).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Starts a turn: wakes a sleeping agent, starts the harness if it does not run, and sends
/// the prompt. The turn's events follow on `…/events`.
#[utoipa::path(post, path = "/api/v1/agents/{id}/sessions/{sid}/prompt", tag = "sessions", operation_id = "promptSession",
    request_body = PromptBody,
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id")),
    responses((status = 202, body = PromptAccepted),
        (status = 400, body = ErrorBody, description = "Neither or both of `prompt` and `text`, or a block that is not ACP content"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "A turn is running"),
        (status = 413, body = ErrorBody, description = "The prompt is over 1 MiB as JSON")))]
pub async fn prompt(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
    note: AuditNote,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<(StatusCode, Json<PromptAccepted>), ApiError> {
    // An unknown session is that, whatever the body says.
    st.sessions.get(&id, &sid).await?;
    let blocks = match (body.prompt, body.text) {
        (Some(p), None) => p,
        (None, Some(t)) => vec![serde_json::json!({"type": "text", "text": t})],
        _ => {
            return Err(ApiError::invalid_field(
                "prompt",
                "give either `prompt` (ACP content blocks) or `text`, not both",
            ))
        }
    };
    note.detail(crate::audit::detail::prompt_blocks(&blocks));
    let turn = st.sessions.prompt(&id, &sid, blocks).await?;
    Ok((StatusCode::ACCEPTED, Json(PromptAccepted { turn })))
}

/// Cancels the running turn.
#[utoipa::path(post, path = "/api/v1/agents/{id}/sessions/{sid}/cancel", tag = "sessions", operation_id = "cancelSession",
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id")),
    responses((status = 202, description = "The harness was asked to stop the turn"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "No turn is running")))]
pub async fn cancel(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    st.sessions.cancel(&id, &sid).await?;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this sequence number (0: from the start). `Last-Event-ID` wins over it.
    #[serde(default)]
    pub after: u64,
    /// `json` for the transcript as a JSON array instead of Server-Sent Events.
    #[serde(default)]
    #[param(pattern = "^(json|sse)$")]
    pub format: Option<String>,
    /// With `format=json`: at most this many events (1 to 10000; default 1000).
    #[serde(default)]
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

fn sse_event(e: StoredEvent) -> Event {
    Event::default()
        .id(e.seq.to_string())
        .event(e.kind.as_str())
        .data(e.data.get())
}

/// The session's transcript from after `after`: Server-Sent Events that go on live, or with
/// `format=json` the events so far as a JSON array.
#[utoipa::path(get, path = "/api/v1/agents/{id}/sessions/{sid}/events", tag = "sessions", operation_id = "sessionEvents",
    params(("id" = String, Path, description = "The agent's id"), ("sid" = String, Path, description = "The session's id"), EventsQuery),
    responses((status = 200, body = [TranscriptEvent], description = "With `format=json`: the events, oldest first. Otherwise `text/event-stream`: each event's `id:` is its sequence number, its name `prompt`, `update`, `turn`, `notice`, `permission` or `permission_resolved`, its data as in the transcript"),
        (status = 404, body = ErrorBody)))]
pub async fn events(
    State(st): State<AppState>,
    Path((id, sid)): Path<(String, String)>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    match q.format.as_deref() {
        None | Some("sse") => {}
        Some("json") => {
            let limit = q.limit.unwrap_or(1000);
            if !(1..=10_000).contains(&limit) {
                return Err(ApiError::invalid_field("limit", "limit is 1 to 10000"));
            }
            let events = st.sessions.events(&id, &sid, q.after, limit).await?;
            let out: Vec<TranscriptEvent> = events.into_iter().map(Into::into).collect();
            return Ok(Json(out).into_response());
        }
        Some(_) => return Err(ApiError::invalid_field("format", "format is json or sse")),
    }
    // A reconnecting EventSource says where it was.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(q.after);
    // Followed before the first read, so that nothing written in between is missed.
    let mut grew = st.sessions.follow(&sid);
    st.sessions.get(&id, &sid).await?;
    let sessions = st.sessions.clone();
    let counted = st.lc.metrics().sse_subscriber();
    let stream = async_stream::stream! {
        let _counted = counted;
        let mut last = after;
        loop {
            match sessions.events_after(&sid, last, SSE_BATCH).await {
                Ok(batch) if !batch.is_empty() => {
                    for e in batch {
                        last = e.seq;
                        yield Ok::<_, Infallible>(sse_event(e));
                    }
                    continue;
                }
                Ok(_) => {}
                Err(_) => break,
            }
            // Nothing new: wait for the transcript to grow (or the session to go).
            if grew.changed().await.is_err() {
                break;
            }
        }
    };
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        let message = e.to_string();
        match e {
            SessionError::NoSession(_) | SessionError::NoApproval(_) => {
                ApiError::not_found(message)
            }
            SessionError::Invalid { field, .. } => ApiError::invalid_field(field, message),
            SessionError::PromptTooLarge { .. } => ApiError::too_large(message),
            SessionError::Conflict(_) => ApiError::conflict(message),
            SessionError::Forbidden(_) => ApiError::forbidden(message),
            SessionError::Lifecycle(e) => e.into(),
            SessionError::Store(_) => ApiError::internal(message),
        }
    }
}
