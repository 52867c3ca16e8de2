//! Who calls the API: the admin token, an API token or the web UI's session cookie, resolved
//! into a [`Principal`] that goes into the request; never a sandbox, whatever token it carries.
//! What the principal may do on each route is [`super::access`]'s business.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;

use super::error::ApiError;
use super::{origin, AppState};
use crate::credentials::{cookie, Gatekeeper};
use crate::model::teams::BUILT_IN_ADMIN;
use crate::store::{hash_token, new_token, verify_token, Store, StoreError};
use crate::teams::throttle::SignInThrottle;
use crate::teams::{Directory, Principal, TeamsError, UserUpdate};

pub use crate::credentials::{bearer_token, SESSION_COOKIE};

/// A live web session.
struct WebSession {
    /// When it ends, in Unix seconds.
    ends: i64,
    /// Whose it is; `None` for one opened with the admin token (the built-in admin).
    user_id: Option<String>,
}

pub struct Auth {
    admin_hash: String,
    /// Live web sessions by the hash of their cookie. The store holds the same, so a restart
    /// signs nobody out; this copy answers every request.
    sessions: Mutex<HashMap<String, WebSession>>,
    /// Users and API tokens.
    pub directory: Directory,
    /// Password tries by address.
    pub sign_in_throttle: SignInThrottle,
    store: Store,
    session_ttl: Duration,
    /// Where sandboxes' requests come from (the driver's [`crate::driver::Driver::sandbox_networks`]).
    sandbox_networks: Vec<IpNet>,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Auth {
    /// Takes up the web sessions kept in the store that are still good: opened with this admin
    /// token and not yet ended. The others are deleted, so a new admin token signs everyone out.
    pub async fn load(
        admin_hash: String,
        sandbox_networks: Vec<IpNet>,
        store: Store,
        session_ttl: Duration,
    ) -> Result<Auth, StoreError> {
        let live = store.live_web_sessions(&admin_hash, unix_now()).await?;
        let directory = Directory::load(store.clone()).await?;
        Ok(Auth {
            admin_hash,
            sessions: Mutex::new(
                live.into_iter()
                    .map(|(hash, ends, user_id)| (hash, WebSession { ends, user_id }))
                    .collect(),
            ),
            directory,
            sign_in_throttle: SignInThrottle::default(),
            store,
            session_ttl,
            sandbox_networks,
        })
    }

    pub fn is_admin_token(&self, token: &str) -> bool {
        verify_token(token, &self.admin_hash)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, WebSession>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a web session lasts from sign-in.
    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    /// Starts a web session for user `user_id` (`None`: one opened with the admin token), kept
    /// in the store before it is handed out; the returned value goes into the cookie.
    pub async fn open_session(&self, user_id: Option<String>) -> Result<String, StoreError> {
        let token = new_token();
        let hash = hash_token(&token);
        let now = unix_now();
        let ttl = i64::try_from(self.session_ttl.as_secs()).unwrap_or(i64::MAX);
        let ends = now.saturating_add(ttl);
        self.store
            .add_web_session(&hash, &self.admin_hash, user_id.clone(), ends, now)
            .await?;
        let mut sessions = self.sessions();
        sessions.retain(|_, s| s.ends > now);
        sessions.insert(hash, WebSession { ends, user_id });
        Ok(token)
    }

    /// Ends a web session at once, then in the store.
    pub async fn close_session(&self, token: &str) -> Result<(), StoreError> {
        let hash = hash_token(token);
        self.sessions().remove(&hash);
        self.store.remove_web_session(&hash).await
    }

    /// Changes a user; a new password also signs them out of every web session (a reset
    /// password is often a stolen one).
    pub async fn update_user(
        &self,
        id: &str,
        change: UserUpdate,
    ) -> Result<crate::model::teams::User, TeamsError> {
        let new_password = change.password.is_some();
        let user = self.directory.update_user(id, change).await?;
        if new_password {
            self.sessions()
                .retain(|_, s| s.user_id.as_deref() != Some(id));
            self.store.remove_web_sessions_of_user(id).await?;
        }
        Ok(user)
    }

    /// The user a live session cookie belongs to.
    fn session_user(&self, cookie: &str) -> Option<String> {
        self.sessions()
            .get(&hash_token(cookie))
            .filter(|s| s.ends > unix_now())
            .map(|s| {
                s.user_id
                    .clone()
                    .unwrap_or_else(|| BUILT_IN_ADMIN.to_string())
            })
    }

    /// Who a bearer token is: the admin token is the built-in admin; an API token its user,
    /// narrowed to the token's scopes and agents.
    fn token_principal(&self, token: &str) -> Option<Principal> {
        if self.is_admin_token(token) {
            return self.directory.principal_of_user(BUILT_IN_ADMIN);
        }
        self.directory.principal_of_token(token, chrono::Utc::now())
    }

    pub fn from_sandbox(&self, ip: IpAddr) -> bool {
        // An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d.
        let ip = ip.to_canonical();
        self.sandbox_networks.iter().any(|n| n.contains(&ip))
    }

    /// Who the request is and how it proved it, if it carries a good credential. A bearer
    /// token is looked at first: a request that has one is a program's, whatever cookie comes
    /// with it.
    pub fn principal(&self, headers: &HeaderMap) -> Option<(Principal, Credential)> {
        if let Some(p) = bearer_token(headers).and_then(|t| self.token_principal(t)) {
            return Some((p, Credential::Token));
        }
        let user = session_cookie(headers).and_then(|c| self.session_user(&c))?;
        let p = self.directory.principal_of_user(&user)?;
        Some((p, Credential::SessionCookie))
    }

    /// Which credential the request carries that is good, if any.
    pub fn credential(&self, headers: &HeaderMap) -> Option<Credential> {
        self.principal(headers).map(|(_, c)| c)
    }
}

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer` (the admin token or an API token): set by a program; a page on
    /// another origin cannot add it without a CORS preflight, which this server never grants.
    Token,
    /// The web UI's cookie, which the browser adds by itself, so where the request came from
    /// must be checked too (see [`super::origin`]).
    SessionCookie,
}

/// Whether the request carries `server.metrics_token`, which opens this route and nothing else.
pub fn is_scraper(st: &AppState, path: &str, headers: &HeaderMap) -> bool {
    if path != crate::metrics::PATH {
        return false;
    }
    let config = st.config();
    let Some(token) = config.server.metrics_token.as_deref() else {
        return false;
    };
    bearer_token(headers).is_some_and(|t| verify_token(t, &hash_token(token)))
}

pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    cookie(headers, SESSION_COOKIE).map(str::to_string)
}

/// Routes anyone may call: the health check, signing in, a preview's sign-in hand-off (which
/// looks at the credential itself, to send a browser without one to sign in), and the web UI's
/// files.
fn is_public(method: &Method, path: &str) -> bool {
    path == "/api/v1/health"
        || (path == "/api/v1/session" && method != Method::DELETE)
        || (method == Method::GET
            && path
                .strip_prefix("/api/v1/previews/")
                .is_some_and(|rest| rest.ends_with("/open") && rest.matches('/').count() == 1))
        || (!path.starts_with("/api/") && path != crate::metrics::PATH)
}

/// Marks a request let in by `server.metrics_token` (it has no principal).
#[derive(Debug, Clone, Copy)]
pub struct Scraper;

pub async fn guard(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
    next: Next,
) -> Response {
    if state.auth.from_sandbox(peer.ip()) {
        return ApiError::forbidden(
            "requests from the sandbox network are refused: a sandbox may not drive agenthold",
        )
        .into_response();
    }
    let found = state.auth.principal(req.headers());
    if is_public(req.method(), req.uri().path()) {
        // A public route may still want to know who calls (the session status, a preview's
        // hand-off).
        if let Some((p, _)) = found {
            req.extensions_mut().insert(p);
        }
        return next.run(req).await;
    }
    // A scraper's token opens /metrics and nothing else.
    if is_scraper(&state, req.uri().path(), req.headers()) {
        req.extensions_mut().insert(Scraper);
        return next.run(req).await;
    }
    let Some((principal, credential)) = found else {
        return ApiError::unauthorized().into_response();
    };
    match credential {
        Credential::Token => {}
        Credential::SessionCookie => {
            if origin::needs_same_origin(req.method(), req.headers()) {
                if let Err(e) =
                    origin::check(&state.config().server, peer, req.uri(), req.headers())
                {
                    // Either a page elsewhere trying its luck or a proxy that needs
                    // server.public_url: worth the operator's eye either way.
                    tracing::warn!(
                        method = %req.method(),
                        path = req.uri().path(),
                        "refused a cookie request: {e}"
                    );
                    return ApiError::forbidden(e.to_string()).into_response();
                }
            }
        }
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

use crate::teams::access::{decide, standing, Act, Decision};

impl Gatekeeper for Auth {
    fn is_our_token(&self, token: &str) -> bool {
        self.token_principal(token).is_some()
    }

    fn may_use_agent(&self, token: &str, agent_id: &str) -> bool {
        self.token_principal(token).is_some_and(|p| {
            let facts = self.directory.agent_facts(agent_id);
            p.can(crate::model::teams::Scope::AgentsUse)
                && facts.is_some_and(|f| {
                    p.sees_agent(agent_id)
                        && decide(standing(&p, &f), f.access, Act::Use) == Decision::Allow
                })
        })
    }

    fn is_sandbox_peer(&self, ip: IpAddr) -> bool {
        self.from_sandbox(ip)
    }
}
