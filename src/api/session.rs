//! Signing in to the web UI: a token in, an `HttpOnly`, `SameSite=Strict` cookie out.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::{session_cookie, SESSION_COOKIE};
use super::error::{ApiError, ApiJson};
use super::AppState;

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

/// Signs in with a token; the answer sets the session cookie.
#[utoipa::path(post, path = "/api/v1/session", tag = "session", request_body = SignIn,
    responses((status = 204, description = "Signed in; cookie set"), (status = 401, body = super::error::ErrorBody)))]
pub async fn sign_in(State(st): State<AppState>, ApiJson(body): ApiJson<SignIn>) -> Response {
    if !st.auth.is_admin_token(body.token.trim()) {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "that token is not valid",
        )
        .into_response();
    }
    let session = match st.auth.open_session().await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("keeping a web session: {e}");
            return ApiError::internal(format!("the session could not be kept: {e}"))
                .into_response();
        }
    };
    let max_age = st.auth.session_ttl().as_secs();
    let cookie =
        format!("{SESSION_COOKIE}={session}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response()
}

/// Tells whether the caller is signed in.
#[utoipa::path(get, path = "/api/v1/session", tag = "session",
    responses((status = 200, body = SessionStatus), (status = 401, body = super::error::ErrorBody)))]
pub async fn status(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if st.auth.allows(&headers) {
        axum::Json(SessionStatus {
            authenticated: true,
        })
        .into_response()
    } else {
        ApiError::unauthorized().into_response()
    }
}

/// Signs out: the session ends and the cookie is cleared.
#[utoipa::path(delete, path = "/api/v1/session", tag = "session",
    responses((status = 204, description = "Signed out")))]
pub async fn sign_out(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(c) = session_cookie(&headers) {
        if let Err(e) = st.auth.close_session(&c).await {
            // Already refused in this process; only a restart could bring it back.
            tracing::error!("forgetting a web session: {e}");
            return ApiError::internal(format!("the session could not be forgotten: {e}"))
                .into_response();
        }
    }
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response()
}
