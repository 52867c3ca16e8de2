//! Who may call the API: the admin token (header or the web UI's session cookie), and never a
//! sandbox, whatever token it carries.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::Ipv4Net;

use super::error::ApiError;
use super::AppState;
use crate::store::{hash_token, new_token, verify_token};

pub const SESSION_COOKIE: &str = "agenthold_session";

pub struct Auth {
    admin_hash: String,
    /// Hashes of live web sessions. Kept in memory: a server restart signs everyone out.
    sessions: Mutex<HashSet<String>>,
    sandbox_pool: Ipv4Net,
}

impl Auth {
    pub fn new(admin_hash: String, sandbox_pool: Ipv4Net) -> Auth {
        Auth {
            admin_hash,
            sessions: Mutex::default(),
            sandbox_pool,
        }
    }

    pub fn is_admin_token(&self, token: &str) -> bool {
        verify_token(token, &self.admin_hash)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a web session; the returned value goes into the cookie.
    pub fn open_session(&self) -> String {
        let token = new_token();
        self.sessions().insert(hash_token(&token));
        token
    }

    pub fn close_session(&self, token: &str) {
        self.sessions().remove(&hash_token(token));
    }

    pub fn is_session(&self, token: &str) -> bool {
        self.sessions().contains(&hash_token(token))
    }

    pub fn from_sandbox(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(v4) => self.sandbox_pool.contains(&v4),
            IpAddr::V6(_) => false,
        }
    }

    /// True if the request carries the admin token or a live session cookie.
    pub fn allows(&self, headers: &axum::http::HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if bearer.is_some_and(|t| self.is_admin_token(t.trim())) {
            return true;
        }
        session_cookie(headers).is_some_and(|c| self.is_session(&c))
    }
}

pub fn session_cookie(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v.to_string())
}

/// Routes anyone may call: the health check, signing in, and the web UI's files.
fn is_public(method: &Method, path: &str) -> bool {
    path == "/api/v1/health"
        || (path == "/api/v1/session" && method != Method::DELETE)
        || !path.starts_with("/api/")
}

pub async fn guard(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if state.auth.from_sandbox(peer.ip()) {
        return ApiError::forbidden(
            "requests from the sandbox network are refused: a sandbox may not drive agenthold",
        )
        .into_response();
    }
    if !is_public(req.method(), req.uri().path()) && !state.auth.allows(req.headers()) {
        return ApiError::unauthorized().into_response();
    }
    next.run(req).await
}
