//! Signing in to the web UI: a token in, an `HttpOnly`, `SameSite=Strict` cookie out (and
//! `Secure` when the browser talks to us over HTTPS).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::auth::{session_cookie, SESSION_COOKIE};
use super::error::{ApiError, ApiJson};
use super::types::{SessionStatus, SignIn};
use super::{origin, AppState};

/// The cookie's attributes. `Secure` only over HTTPS: a browser would not send a `Secure`
/// cookie back over plain http, and the UI on http://127.0.0.1 must keep working.
fn attributes(st: &AppState, peer: SocketAddr, headers: &HeaderMap) -> &'static str {
    if origin::is_https(&st.config().server, peer, headers) {
        "Path=/; HttpOnly; SameSite=Strict; Secure"
    } else {
        "Path=/; HttpOnly; SameSite=Strict"
    }
}

/// Signs in with a token; the answer sets the session cookie.
#[utoipa::path(post, path = "/api/v1/session", tag = "session", operation_id = "signIn", security(), request_body = SignIn,
    responses((status = 204, description = "Signed in; the `agenthold_session` cookie is set",
            headers(("Set-Cookie" = String, description = "`agenthold_session=…; Max-Age=…; Path=/; HttpOnly; SameSite=Strict` (and `Secure` over HTTPS)"))),
        (status = 401, body = super::error::ErrorBody, description = "That token is not valid")))]
pub async fn sign_in(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignIn>,
) -> Response {
    if !st.auth.is_admin_token(body.token.trim()) {
        return ApiError::new(
            super::types::ErrorCode::Unauthorized,
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
    let attributes = attributes(&st, peer, &headers);
    let cookie = format!("{SESSION_COOKIE}={session}; Max-Age={max_age}; {attributes}");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response()
}

/// Tells whether the caller is signed in.
#[utoipa::path(get, path = "/api/v1/session", tag = "session", operation_id = "getSession", security(),
    responses((status = 200, body = SessionStatus, description = "The admin token or a live session cookie came with the request"),
        (status = 401, body = super::error::ErrorBody, description = "Neither did")))]
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
#[utoipa::path(delete, path = "/api/v1/session", tag = "session", operation_id = "signOut",
    responses((status = 204, description = "Signed out; the cookie is cleared",
        headers(("Set-Cookie" = String, description = "`agenthold_session=; Max-Age=0; …`")))))]
pub async fn sign_out(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(c) = session_cookie(&headers) {
        if let Err(e) = st.auth.close_session(&c).await {
            // Already refused in this process; only a restart could bring it back.
            tracing::error!("forgetting a web session: {e}");
            return ApiError::internal(format!("the session could not be forgotten: {e}"))
                .into_response();
        }
    }
    let attributes = attributes(&st, peer, &headers);
    let cookie = format!("{SESSION_COOKIE}=; Max-Age=0; {attributes}");
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response()
}
