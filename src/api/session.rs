//! Signing in to the web UI: the admin token, or a user's name and password, in; an
//! `HttpOnly`, `SameSite=Strict` cookie out (and `Secure` when the browser talks to us over
//! HTTPS).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::audit::AuditNote;
use super::auth::{session_cookie, SESSION_COOKIE};
use super::error::{ApiError, ApiJson};
use super::types::{ErrorCode, PasswordSignIn, SessionStatus, SignIn, TokenSignIn};
use super::{origin, AppState};
use crate::model::teams::BUILT_IN_ADMIN;
use crate::teams::throttle::TRIES_PER_MINUTE;

/// The cookie's attributes. `Secure` only over HTTPS: a browser would not send a `Secure`
/// cookie back over plain http, and the UI on http://127.0.0.1 must keep working.
fn attributes(st: &AppState, peer: SocketAddr, headers: &HeaderMap) -> &'static str {
    if origin::is_https(&st.config().server, peer, headers) {
        "Path=/; HttpOnly; SameSite=Strict; Secure"
    } else {
        "Path=/; HttpOnly; SameSite=Strict"
    }
}

/// Who a sign-in is for: `None` for the admin token (the built-in admin), else a user's id.
/// The audit entry is told who signed in, or the name tried (never the password or token).
async fn signed_in_as(
    st: &AppState,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: SignIn,
    note: &AuditNote,
) -> Result<Option<String>, ApiError> {
    match body {
        SignIn::Token(TokenSignIn { token }) => {
            note.detail("admin token");
            if st.auth.is_admin_token(token.trim()) {
                note.who(Some(BUILT_IN_ADMIN.to_string()), BUILT_IN_ADMIN);
                Ok(None)
            } else {
                Err(ApiError::new(
                    ErrorCode::Unauthorized,
                    "that token is not valid",
                ))
            }
        }
        SignIn::Password(PasswordSignIn { name, password }) => {
            note.detail("password");
            note.who(None, &name);
            let client = super::origin::client_ip(&st.config().server, peer, headers);
            if let Err(wait) = st.auth.sign_in_throttle.try_from(client) {
                tracing::warn!(client = %client, "password sign-in tries over the limit");
                return Err(ApiError {
                    retry_after: Some(wait.as_secs().max(1)),
                    ..ApiError::too_many_requests(format!(
                        "too many sign-in tries from this address ({} a minute): try again later",
                        TRIES_PER_MINUTE
                    ))
                });
            }
            match st.auth.directory.sign_in(&name, password).await? {
                Some(user) => {
                    note.who(Some(user.id.clone()), &user.name);
                    Ok(Some(user.id))
                }
                None => Err(ApiError::new(
                    ErrorCode::Unauthorized,
                    "that name and password do not match a user",
                )),
            }
        }
    }
}

/// Signs in with the admin token or a user's name and password; the answer sets the session
/// cookie.
#[utoipa::path(post, path = "/api/v1/session", tag = "session", operation_id = "signIn", security(), request_body = SignIn,
    responses((status = 204, description = "Signed in; the `agenthold_session` cookie is set",
            headers(("Set-Cookie" = String, description = "`agenthold_session=…; Max-Age=…; Path=/; HttpOnly; SameSite=Strict` (and `Secure` over HTTPS)"))),
        (status = 400, body = super::error::ErrorBody, description = "Neither `token` alone nor `name` and `password`"),
        (status = 401, body = super::error::ErrorBody, description = "That token is not valid, or that name and password do not match a user"),
        (status = 429, body = super::error::ErrorBody, description = "This address tried passwords 10 times in the last minute; try again after `Retry-After` seconds")))]
pub async fn sign_in(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    note: AuditNote,
    ApiJson(body): ApiJson<SignIn>,
) -> Response {
    let user = match signed_in_as(&st, peer, &headers, body, &note).await {
        Ok(user) => user,
        Err(e) => return e.into_response(),
    };
    let session = match st.auth.open_session(user).await {
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
    if st.auth.credential(&headers).is_some() {
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
