//! What each route needs of its caller, in one table, and the layer that enforces it after the
//! router has matched a route: the scope (`403` without it) and, on an agent's routes, what the
//! caller's standing on the agent allows ([`crate::teams::access::decide`]): `404` for an agent
//! the caller does not see (as if it did not exist), `403` for one they see but may not do this
//! on. No handler checks by hand.

use std::future::Future;

use axum::body::{Body, HttpBody};
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::audit;
use super::auth::Scraper;
use super::error::ApiError;
use super::AppState;
use crate::model::teams::Scope;
use crate::teams::access::{decide, sees, standing, Act, Decision, Standing};
use crate::teams::{Principal, StreamEnds};

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone, signed in or not.
    Public,
    /// Any valid credential, whatever its scopes.
    SignedIn,
    Scope(Scope),
    /// A route of one agent (`{id}`): the scope, then what the caller's standing on the agent
    /// allows ([`crate::teams::access::decide`]).
    Agent(Scope, Act),
}

use Need::{Public, SignedIn};
const READ: Need = Need::Scope(Scope::AgentsRead);
const WRITE: Need = Need::Scope(Scope::AgentsWrite);
const ANSWER: Need = Need::Scope(Scope::ApprovalsAnswer);
const ADMIN: Need = Need::Scope(Scope::Admin);
const SEE: Need = Need::Agent(Scope::AgentsRead, Act::Read);
const WORK: Need = Need::Agent(Scope::AgentsUse, Act::Use);
const OPERATE: Need = Need::Agent(Scope::AgentsWrite, Act::Operate);
const GOVERN: Need = Need::Agent(Scope::AgentsWrite, Act::Govern);
const JOIN: Need = Need::Agent(Scope::AgentsUse, Act::Join);

/// Every route as the router spells it (`/api/v1/…` or `/metrics`), by method. A route missing
/// here is refused to everyone (405: its handler never runs), and the tests fail.
pub const ROUTES: &[(&str, &str, Need)] = &[
    ("GET", "/api/v1/health", Public),
    ("GET", "/api/v1/openapi.json", SignedIn),
    ("GET", "/api/v1/limits", READ),
    ("GET", "/api/v1/presets", READ),
    ("GET", "/api/v1/pool", SignedIn),
    ("POST", "/api/v1/admin/reload", ADMIN),
    ("POST", "/api/v1/session", Public),
    ("GET", "/api/v1/session", Public),
    ("DELETE", "/api/v1/session", SignedIn),
    ("GET", "/api/v1/me", SignedIn),
    ("GET", "/api/v1/users", ADMIN),
    ("POST", "/api/v1/users", ADMIN),
    ("PATCH", "/api/v1/users/{id}", ADMIN),
    ("DELETE", "/api/v1/users/{id}", ADMIN),
    ("GET", "/api/v1/secrets", ADMIN),
    ("PUT", "/api/v1/secrets/{name}", ADMIN),
    ("DELETE", "/api/v1/secrets/{name}", ADMIN),
    ("GET", "/api/v1/tokens", SignedIn),
    ("POST", "/api/v1/tokens", SignedIn),
    ("DELETE", "/api/v1/tokens/{id}", SignedIn),
    // Non-admins see the entries of their own actions (see `crate::audit::visible_to`).
    ("GET", "/api/v1/audit", READ),
    ("GET", "/api/v1/events", READ),
    ("GET", "/api/v1/agents", READ),
    ("POST", "/api/v1/agents", WRITE),
    ("GET", "/api/v1/agents/{id}", SEE),
    ("PATCH", "/api/v1/agents/{id}", OPERATE),
    ("DELETE", "/api/v1/agents/{id}", GOVERN),
    ("POST", "/api/v1/agents/{id}/start", OPERATE),
    ("POST", "/api/v1/agents/{id}/stop", OPERATE),
    ("POST", "/api/v1/agents/{id}/pause", OPERATE),
    ("POST", "/api/v1/agents/{id}/rebuild", OPERATE),
    ("POST", "/api/v1/agents/{id}/setup", OPERATE),
    ("POST", "/api/v1/agents/{id}/keep-alive", WORK),
    ("GET", "/api/v1/agents/{id}/egress/log", SEE),
    ("GET", "/api/v1/agents/{id}/members", SEE),
    ("POST", "/api/v1/agents/{id}/members", GOVERN),
    ("DELETE", "/api/v1/agents/{id}/members/{user}", GOVERN),
    ("POST", "/api/v1/agents/{id}/access-token", GOVERN),
    ("POST", "/api/v1/agents/{id}/join", JOIN),
    ("POST", "/api/v1/agents/{id}/exec", WORK),
    ("POST", "/api/v1/agents/{id}/code", WORK),
    ("GET", "/api/v1/agents/{id}/code/contexts", WORK),
    ("POST", "/api/v1/agents/{id}/code/contexts", WORK),
    ("DELETE", "/api/v1/agents/{id}/code/contexts/{cid}", WORK),
    (
        "POST",
        "/api/v1/agents/{id}/code/contexts/{cid}/restart",
        WORK,
    ),
    ("GET", "/api/v1/agents/{id}/processes", WORK),
    ("POST", "/api/v1/agents/{id}/processes", WORK),
    ("GET", "/api/v1/agents/{id}/processes/{pid}", WORK),
    ("DELETE", "/api/v1/agents/{id}/processes/{pid}", WORK),
    ("GET", "/api/v1/agents/{id}/processes/{pid}/output", WORK),
    ("POST", "/api/v1/agents/{id}/processes/{pid}/stdin", WORK),
    ("POST", "/api/v1/agents/{id}/processes/{pid}/signal", WORK),
    ("GET", "/api/v1/agents/{id}/processes/{pid}/wait", WORK),
    ("GET", "/api/v1/agents/{id}/sessions", WORK),
    ("POST", "/api/v1/agents/{id}/sessions", WORK),
    ("GET", "/api/v1/agents/{id}/sessions/{sid}", WORK),
    ("PATCH", "/api/v1/agents/{id}/sessions/{sid}", WORK),
    ("DELETE", "/api/v1/agents/{id}/sessions/{sid}", WORK),
    ("POST", "/api/v1/agents/{id}/sessions/{sid}/prompt", WORK),
    ("POST", "/api/v1/agents/{id}/sessions/{sid}/cancel", WORK),
    ("GET", "/api/v1/agents/{id}/sessions/{sid}/events", WORK),
    ("GET", "/api/v1/agents/{id}/ports", WORK),
    ("GET", "/api/v1/agents/{id}/previews", WORK),
    ("POST", "/api/v1/agents/{id}/previews", WORK),
    ("DELETE", "/api/v1/agents/{id}/previews/{pid}", WORK),
    // Looks at the credential itself: one without sends the browser to sign in first.
    ("GET", "/api/v1/previews/{pid}/open", Public),
    ("GET", "/api/v1/approvals", READ),
    ("GET", "/api/v1/approvals/{aid}", READ),
    ("POST", "/api/v1/approvals/{aid}", ANSWER),
    ("GET", "/api/v1/agents/{id}/terminal", WORK),
    ("GET", "/api/v1/agents/{id}/terminals", WORK),
    ("DELETE", "/api/v1/agents/{id}/terminals/{sid}", WORK),
    ("GET", "/api/v1/agents/{id}/fs/list", WORK),
    ("GET", "/api/v1/agents/{id}/fs/read", WORK),
    ("PUT", "/api/v1/agents/{id}/fs/write", WORK),
    ("POST", "/api/v1/agents/{id}/fs/mkdir", WORK),
    ("DELETE", "/api/v1/agents/{id}/fs/remove", WORK),
    ("POST", "/api/v1/agents/{id}/fs/rename", WORK),
    ("GET", "/api/v1/agents/{id}/fs/stat", WORK),
    ("GET", "/api/v1/agents/{id}/fs/exists", WORK),
    ("GET", "/api/v1/agents/{id}/fs/watch", WORK),
    ("POST", "/api/v1/agents/{id}/fs/write-files", WORK),
    ("GET", crate::metrics::PATH, ADMIN),
];

/// What `method` on the route `path` (as the router spells it) needs; `None` for a route
/// missing from [`ROUTES`]. HEAD is GET's.
pub fn need(method: &Method, path: &str) -> Option<Need> {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTES
        .iter()
        .find(|(m, p, _)| *m == method && *p == path)
        .map(|(_, _, n)| *n)
}

/// A handler that takes the caller gets the one [`authorize`] checked; with none (a public
/// route called without a credential), the request is refused `401`.
impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Principal, ApiError> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(ApiError::unauthorized)
    }
}

/// What ends the request's streams (an HTTP body without a known length, a WebSocket, a
/// command waiting for approval): its credential ending, or its caller losing access to the
/// agent of the route (see [`StreamEnds`]).
#[derive(Debug, Clone, Default)]
pub struct CredentialEnds(pub StreamEnds);

impl<S: Send + Sync> FromRequestParts<S> for CredentialEnds {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> Result<CredentialEnds, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<CredentialEnds>()
            .cloned()
            .unwrap_or_default())
    }
}

impl CredentialEnds {
    /// Resolves when what the request streams must stop.
    pub async fn ended(&self) {
        self.0.ended().await;
    }

    /// Runs `work` (a WebSocket's life) until it ends or the caller's right to it does.
    pub async fn guard(self, work: impl Future<Output = ()>) {
        tokio::select! {
            () = work => {}
            () = self.0.ended() => {
                tracing::info!("a WebSocket closed: its credential or access ended");
            }
        }
    }
}

/// A streamed answer ends when the caller's right to it does; one of known length is sent whole.
fn ends_with(response: Response, ends: CredentialEnds) -> Response {
    if response.body().size_hint().exact().is_some() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = body
        .into_data_stream()
        .take_until(async move { ends.ended().await });
    Response::from_parts(parts, Body::from_stream(body))
}

/// The caller sees the agent but their standing does not allow `act`.
fn not_yours(id: &str, act: Act) -> Response {
    let who = match act {
        Act::Operate => "its owner, admins and its operators",
        _ => "its owner and admins",
    };
    ApiError::forbidden(format!(
        "only {who} may do this on agent {id}; ask its owner for a role"
    ))
    .into_response()
}

/// The caller's standing on the agent of the route, as the access layer decided it.
impl<S: Send + Sync> FromRequestParts<S> for Standing {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Standing, ApiError> {
        parts
            .extensions
            .get::<Standing>()
            .copied()
            .ok_or_else(|| ApiError::not_found("there is no such agent"))
    }
}

/// Whether agent `id` is in `p`'s lists and event stream.
pub fn sees_agent(st: &AppState, p: &Principal, id: &str) -> bool {
    sees(p, id, st.auth.directory.agent_facts(id).as_ref())
}

fn no_agent(id: &str) -> Response {
    ApiError::not_found(format!("there is no agent with id {id}")).into_response()
}

/// The layer every routed request goes through (see the module's comment). An audited
/// route's entry is recorded once the answer is decided, whoever decided it.
pub async fn authorize(
    State(st): State<AppState>,
    matched: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    // A route without parameters has none to give: no error.
    let params = RawPathParams::from_request_parts(&mut parts, &st)
        .await
        .ok();
    let mut req = Request::from_parts(parts, body);
    let route = matched.as_ref().map_or("", |m| m.as_str());
    let param = |name: &str| {
        params.as_ref().and_then(|ps| {
            ps.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    };
    let pending = match audit::action_of(req.method(), route) {
        Some(action) => {
            let pending = audit::Pending::new(
                &st,
                action,
                &req,
                param("id").filter(|_| route.starts_with("/api/v1/agents/{id}")),
                param("aid"),
            )
            .await;
            req.extensions_mut().insert(pending.note.clone());
            Some(pending)
        }
        None => None,
    };
    let response = admit(&st, route, &param, req, next).await;
    if let Some(pending) = pending {
        pending.record(&st, response.status().as_u16()).await;
    }
    response
}

/// Refuses the request or runs its handler.
async fn admit(
    st: &AppState,
    route: &str,
    param: &impl Fn(&str) -> Option<String>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(need) = need(req.method(), route) else {
        // Not a method of this route in the table: the handler never runs. (A route's method
        // served without a rule is caught by the tests; TRACE and the like are simply 405.)
        tracing::debug!(method = %req.method(), route, "a method without an access rule");
        return axum::http::StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    let (scope, act) = match need {
        Need::Public => return next.run(req).await,
        Need::SignedIn => (None, None),
        Need::Scope(s) => (Some(s), None),
        Need::Agent(s, act) => (Some(s), Some(act)),
    };
    if scope == Some(Scope::Admin) && req.extensions().get::<Scraper>().is_some() {
        return next.run(req).await;
    }
    let Some(principal) = req.extensions().get::<Principal>().cloned() else {
        return ApiError::unauthorized().into_response();
    };
    if let Some(s) = scope.filter(|s| !principal.can(*s)) {
        return ApiError::forbidden(format!("this credential does not have the scope {s}"))
            .into_response();
    }
    let mut ends = StreamEnds::of(&principal);
    if let (Some(act), Some(id)) = (act, param("id")) {
        if !principal.sees_agent(&id) {
            return no_agent(&id);
        }
        match st.auth.directory.agent_facts(&id) {
            Some(facts) => {
                let standing = standing(&principal, &facts);
                match decide(standing, facts.access, act) {
                    Decision::Allow => {
                        req.extensions_mut().insert(standing);
                        ends = ends.on_agent(&st.auth.directory, &principal, standing, &id, act);
                    }
                    Decision::NotFound => return no_agent(&id),
                    Decision::Forbidden => return not_yours(&id, act),
                }
            }
            // An agent the server does not know is the handler's 404 to give, for an admin;
            // anyone else is refused here, so that no handler runs unchecked.
            None if principal.is_admin() => {}
            None => return no_agent(&id),
        }
    }
    if route.starts_with("/api/v1/approvals/{aid}") {
        if let Some(aid) = param("aid") {
            // An approval of an agent the caller does not see does not exist for them either;
            // one that does not exist at all is the handler's 404 to give.
            if let Ok(a) = st.sessions.approval(&aid).await {
                let facts = st.auth.directory.agent_facts(&a.agent_id);
                if !sees(&principal, &a.agent_id, facts.as_ref()) {
                    return ApiError::not_found(format!("there is no approval with id {aid}"))
                        .into_response();
                }
            }
        }
    }
    let ends = CredentialEnds(ends);
    req.extensions_mut().insert(ends.clone());
    ends_with(next.run(req).await, ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation of the OpenAPI document has a rule, and every rule an operation.
    #[test]
    fn every_documented_route_has_exactly_one_rule() {
        let doc =
            serde_json::to_value(<super::super::ApiDoc as utoipa::OpenApi>::openapi()).unwrap();
        let mut documented = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                let m = method.to_uppercase();
                if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&m.as_str()) {
                    documented.push((m, path.clone()));
                }
            }
        }
        for (m, p) in &documented {
            let method = Method::from_bytes(m.as_bytes()).unwrap();
            assert!(need(&method, p).is_some(), "{m} {p} has no access rule");
        }
        // Served but not operations of the document: the document itself, and the scrape.
        let undocumented = ["/api/v1/openapi.json", crate::metrics::PATH];
        for (m, p, _) in ROUTES {
            let n = ROUTES
                .iter()
                .filter(|(m2, p2, _)| m2 == m && p2 == p)
                .count();
            assert_eq!(n, 1, "{m} {p} has {n} rules");
            assert!(
                undocumented.contains(p) || documented.iter().any(|(dm, dp)| dm == m && dp == p),
                "{m} {p} has a rule but no OpenAPI operation"
            );
        }
    }
}
