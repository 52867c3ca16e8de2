//! `/api/v1/agents/{id}/ports` and `…/previews`: what listens in a sandbox and the URLs that
//! open it (see [`crate::previews`]); and `/api/v1/previews/{pid}/open`, the API's side of a
//! private preview's sign-in hand-off.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::Deserialize;
use utoipa::IntoParams;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use super::types::{CreatePreview, ListeningPort, Preview, PreviewAccess};
use super::AppState;
use crate::model::previews::Access;
use crate::model::teams::Scope;
use crate::previews::gateway::AUTH_PATH;
use crate::previews::{NewPreview, PreviewError, PreviewView};
use crate::store::previews::PreviewStoreError;
use crate::teams::Principal;

impl From<PreviewAccess> for Access {
    fn from(a: PreviewAccess) -> Access {
        match a {
            PreviewAccess::Private => Access::Private,
            PreviewAccess::Token => Access::Token,
            PreviewAccess::Public => Access::Public,
        }
    }
}

impl From<Access> for PreviewAccess {
    fn from(a: Access) -> PreviewAccess {
        match a {
            Access::Private => PreviewAccess::Private,
            Access::Token => PreviewAccess::Token,
            Access::Public => PreviewAccess::Public,
        }
    }
}

impl From<PreviewView> for Preview {
    fn from(v: PreviewView) -> Preview {
        Preview {
            id: v.record.id,
            port: v.record.port,
            access: v.record.access.into(),
            url: v.url,
            token: v.token,
            created_at: v.record.created_at,
            expires_at: v.record.expires_at,
        }
    }
}

impl From<PreviewError> for ApiError {
    fn from(e: PreviewError) -> ApiError {
        let message = e.to_string();
        match e {
            PreviewError::Lifecycle(e) => e.into(),
            PreviewError::Conn(e) => e.into(),
            PreviewError::Store(PreviewStoreError::NoPreview(_)) => ApiError::not_found(message),
            PreviewError::Store(
                PreviewStoreError::TooMany(_) | PreviewStoreError::PortTaken { .. },
            ) => ApiError::conflict(message),
            PreviewError::Store(PreviewStoreError::Store(_)) => ApiError::internal(message),
        }
    }
}

/// The TCP ports listening in the sandbox. Empty while the agent sleeps; never wakes it.
#[utoipa::path(get, path = "/api/v1/agents/{id}/ports", tag = "previews", operation_id = "listPorts",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [ListeningPort]), (status = 404, body = ErrorBody)))]
pub async fn ports(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<ListeningPort>>, ApiError> {
    let ports = st.previews.ports(&id).await?;
    Ok(Json(ports.into_iter().map(ListeningPort::from).collect()))
}

/// Makes a preview: a URL on an origin of its own that opens the port.
#[utoipa::path(post, path = "/api/v1/agents/{id}/previews", tag = "previews", operation_id = "createPreview",
    request_body = CreatePreview, params(("id" = String, Path, description = "The agent's id")),
    responses((status = 201, body = Preview, description = "Made; a `token` preview's token is in this answer only"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The port has a preview already, the agent has `server.previews.max_per_agent`, or it is being destroyed")))]
pub async fn create(
    State(st): State<AppState>,
    Path(id): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<CreatePreview>,
) -> Result<(StatusCode, Json<Preview>), ApiError> {
    note.detail(format!("port {}", body.port));
    if body.port == 0 {
        return Err(ApiError::invalid_field("port", "port must be 1 to 65535"));
    }
    if body
        .expires_in_minutes
        .is_some_and(|m| !(1..=525_600).contains(&m))
    {
        return Err(ApiError::invalid_field(
            "expiresInMinutes",
            "expiresInMinutes must be 1 to 525600 (a year)",
        ));
    }
    let new = NewPreview {
        port: body.port,
        access: body.access.into(),
        expires_in_minutes: body.expires_in_minutes,
    };
    let made = st.previews.create(&id, new).await?;
    Ok((StatusCode::CREATED, Json(made.into())))
}

/// The agent's previews, by port (deleted and expired ones are not listed).
#[utoipa::path(get, path = "/api/v1/agents/{id}/previews", tag = "previews", operation_id = "listPreviews",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [Preview]), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Preview>>, ApiError> {
    let all = st.previews.list(&id).await?;
    Ok(Json(all.into_iter().map(Preview::from).collect()))
}

/// Deletes a preview: its URL answers `410` at once, and connections open through it end.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/previews/{pid}", tag = "previews", operation_id = "deletePreview",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The preview's id")),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    st.previews.delete(&id, &pid).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The longest `next` the hand-off carries (it travels in two redirects' URLs).
const MAX_NEXT: usize = 2048;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OpenQuery {
    /// Where on the preview to land: a path of its own (`/`, when absent).
    #[serde(default)]
    #[param(max_length = 2048)]
    pub next: Option<String>,
}

/// Opens a preview in the browser: for a signed-in person (the web UI's cookie, or the admin
/// token), a redirect to the preview's host with a one-time code that it turns into a cookie
/// for that host alone; for anyone else, a redirect to the web UI's sign-in, which comes back
/// here. Works for every access (a `public` preview simply ignores the code).
#[utoipa::path(get, path = "/api/v1/previews/{pid}/open", tag = "previews", operation_id = "openPreview",
    security(), params(("pid" = String, Path, description = "The preview's id"), OpenQuery),
    responses((status = 302, description = "To the preview's host (signed in), or to the web UI to sign in first",
            headers(("Location" = String, description = "Where to go"))),
        (status = 403, body = ErrorBody, description = "The credential does not have the scope `agents:use`"),
        (status = 404, body = ErrorBody, description = "No such preview, or it was deleted or expired")))]
pub async fn open(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    ApiQuery(q): ApiQuery<OpenQuery>,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let next = q.next.unwrap_or_else(|| "/".to_string());
    if next.chars().count() > MAX_NEXT {
        return Err(ApiError::invalid_field(
            "next",
            format!("next is at most {MAX_NEXT} characters"),
        ));
    }
    // Public in the access table, so that a browser without a credential is sent to sign in;
    // one with a credential needs what the preview's other routes need.
    let Some(Extension(principal)) = principal else {
        let back = format!(
            "/api/v1/previews/{}/open?next={}",
            utf8_percent_encode(&pid, NON_ALPHANUMERIC),
            utf8_percent_encode(&next, NON_ALPHANUMERIC)
        );
        return Ok(found(&format!(
            "/?next={}",
            utf8_percent_encode(&back, NON_ALPHANUMERIC)
        )));
    };
    if !principal.can(Scope::AgentsUse) {
        return Err(ApiError::forbidden(
            "this credential does not have the scope agents:use",
        ));
    }
    let gone = || {
        ApiError::not_found(format!(
            "no preview {pid:?} (deleted or expired ones included)"
        ))
    };
    let preview = st
        .previews
        .store()
        .get_preview(&pid)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .filter(|p| {
            p.is_live(&crate::store::now_text())
                && super::access::sees_agent(&st, &principal, &p.agent_id)
        })
        .ok_or_else(gone)?;
    let agent = st.lc.get(&preview.agent_id).await?;
    let code = st.previews.grants().new_code(&preview.id).ok_or_else(|| {
        ApiError::unavailable(
            "too many preview sign-ins are waiting to be used; try again in a minute",
        )
    })?;
    let origin = st.previews.origin(&agent.name, preview.port);
    Ok(found(&format!(
        "{origin}{AUTH_PATH}?code={code}&next={}",
        utf8_percent_encode(&next, NON_ALPHANUMERIC)
    )))
}

fn found(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(v) => (StatusCode::FOUND, [(header::LOCATION, v)]).into_response(),
        Err(_) => ApiError::invalid_field("next", "next is not a path that can be gone to")
            .into_response(),
    }
}
