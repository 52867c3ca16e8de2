//! The audit log over HTTP: which routes record what ([`action_of`]), the note a handler adds
//! to its entry ([`AuditNote`]), the recording itself (called by [`super::access::authorize`]
//! once the handler answered), and `GET /api/v1/audit`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::Method;
use axum::Json;
use serde::Deserialize;
use tokio::sync::oneshot;
use utoipa::IntoParams;

use super::error::{ApiError, ApiQuery, ErrorBody};
use super::AppState;
use crate::audit::{self, Action, AuditEntry, Entry};
use crate::teams::Principal;

/// What each audited route records; every other route records nothing. Reads (GETs) are not
/// audited, except a terminal's opening, which is a GET only because it is a WebSocket.
const AUDITED: &[(&str, &str, Action)] = &[
    ("POST", "/api/v1/admin/reload", Action::ConfigReload),
    ("POST", "/api/v1/session", Action::SignIn),
    ("DELETE", "/api/v1/session", Action::SignOut),
    ("POST", "/api/v1/users", Action::UserCreate),
    ("PATCH", "/api/v1/users/{id}", Action::UserUpdate),
    ("DELETE", "/api/v1/users/{id}", Action::UserDelete),
    ("POST", "/api/v1/tokens", Action::TokenCreate),
    ("DELETE", "/api/v1/tokens/{id}", Action::TokenRevoke),
    ("POST", "/api/v1/agents", Action::AgentCreate),
    ("PATCH", "/api/v1/agents/{id}", Action::AgentUpdate),
    ("DELETE", "/api/v1/agents/{id}", Action::AgentDestroy),
    ("POST", "/api/v1/agents/{id}/start", Action::AgentStart),
    ("POST", "/api/v1/agents/{id}/stop", Action::AgentStop),
    ("POST", "/api/v1/agents/{id}/pause", Action::AgentPause),
    ("POST", "/api/v1/agents/{id}/rebuild", Action::AgentRebuild),
    ("POST", "/api/v1/agents/{id}/setup", Action::AgentSetup),
    ("POST", "/api/v1/agents/{id}/exec", Action::Exec),
    ("POST", "/api/v1/agents/{id}/code", Action::CodeRun),
    (
        "POST",
        "/api/v1/agents/{id}/code/contexts",
        Action::CodeContextCreate,
    ),
    (
        "DELETE",
        "/api/v1/agents/{id}/code/contexts/{cid}",
        Action::CodeContextRemove,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/code/contexts/{cid}/restart",
        Action::CodeContextRestart,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/processes",
        Action::ProcessStart,
    ),
    (
        "DELETE",
        "/api/v1/agents/{id}/processes/{pid}",
        Action::ProcessRemove,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/processes/{pid}/signal",
        Action::ProcessSignal,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/sessions",
        Action::SessionCreate,
    ),
    (
        "PATCH",
        "/api/v1/agents/{id}/sessions/{sid}",
        Action::SessionUpdate,
    ),
    (
        "DELETE",
        "/api/v1/agents/{id}/sessions/{sid}",
        Action::SessionDelete,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/sessions/{sid}/prompt",
        Action::SessionPrompt,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/sessions/{sid}/cancel",
        Action::SessionCancel,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/previews",
        Action::PreviewCreate,
    ),
    (
        "DELETE",
        "/api/v1/agents/{id}/previews/{pid}",
        Action::PreviewDelete,
    ),
    ("POST", "/api/v1/approvals/{aid}", Action::ApprovalAnswer),
    ("GET", "/api/v1/agents/{id}/terminal", Action::TerminalOpen),
    (
        "DELETE",
        "/api/v1/agents/{id}/terminals/{sid}",
        Action::TerminalKill,
    ),
    ("PUT", "/api/v1/agents/{id}/fs/write", Action::FsWrite),
    (
        "POST",
        "/api/v1/agents/{id}/fs/write-files",
        Action::FsWrite,
    ),
    ("POST", "/api/v1/agents/{id}/fs/mkdir", Action::FsMkdir),
    ("DELETE", "/api/v1/agents/{id}/fs/remove", Action::FsRemove),
    ("POST", "/api/v1/agents/{id}/fs/rename", Action::FsRename),
    ("POST", "/api/v1/agents/{id}/members", Action::MemberAdd),
    (
        "DELETE",
        "/api/v1/agents/{id}/members/{user}",
        Action::MemberRemove,
    ),
    (
        "POST",
        "/api/v1/agents/{id}/access-token",
        Action::AccessTokenRotate,
    ),
    ("POST", "/api/v1/agents/{id}/join", Action::AgentJoin),
    ("PUT", "/api/v1/secrets/{name}", Action::SecretSet),
    ("DELETE", "/api/v1/secrets/{name}", Action::SecretDelete),
];

/// Changes left out of the log on purpose: a heartbeat, and what is typed into a process
/// (like a terminal's keystrokes, it is the data of an action already recorded).
#[cfg(test)]
const NOT_AUDITED: &[(&str, &str)] = &[
    ("POST", "/api/v1/agents/{id}/keep-alive"),
    ("POST", "/api/v1/agents/{id}/processes/{pid}/stdin"),
];

/// What `method` on `route` (as the router spells it) records, if anything.
pub fn action_of(method: &Method, route: &str) -> Option<Action> {
    AUDITED
        .iter()
        .find(|(m, p, _)| *m == method.as_str() && *p == route)
        .map(|(_, _, a)| *a)
}

#[derive(Debug, Default)]
struct Note {
    detail: Option<String>,
    agent: Option<(String, String)>,
    /// Who signed in (or tried): (user id if known, name).
    who: Option<(Option<String>, String)>,
    /// The outcome, when the answer's status does not tell it (see [`AuditNote::later`]).
    later: Option<oneshot::Receiver<u16>>,
}

/// What a handler adds to its route's entry: the detail, the agent it made, who signed in.
/// Taken as an extractor; on a route that is not audited, what it is told goes nowhere.
#[derive(Debug, Clone, Default)]
pub struct AuditNote(Arc<Mutex<Note>>);

impl AuditNote {
    fn with<T>(&self, f: impl FnOnce(&mut Note) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn detail(&self, detail: impl Into<String>) {
        let detail = detail.into();
        self.with(|n| n.detail = Some(detail));
    }

    /// Adds `more` to the detail, in parentheses.
    pub fn also(&self, more: &str) {
        self.with(|n| {
            n.detail = Some(match n.detail.take() {
                Some(d) => format!("{d} ({more})"),
                None => more.to_string(),
            })
        });
    }

    /// The agent the action made (the route has no `{id}` to tell it).
    pub fn agent(&self, id: &str, name: &str) {
        self.with(|n| n.agent = Some((id.to_string(), name.to_string())));
    }

    /// The answer's status is not the outcome (a streamed exec that waits for approval answers
    /// `200` at once): the entry is recorded when the returned [`LateOutcome`] tells it, or with
    /// the answer's status if it is dropped untold.
    pub fn later(&self) -> LateOutcome {
        let (tx, rx) = oneshot::channel();
        self.with(|n| n.later = Some(rx));
        LateOutcome(tx)
    }

    /// Who a sign-in was for: the user's id when it succeeded, and the name given.
    pub fn who(&self, user_id: Option<String>, name: &str) {
        self.with(|n| n.who = Some((user_id, name.to_string())));
    }
}

/// Where a handler tells its entry's outcome once it is known ([`AuditNote::later`]).
#[derive(Debug)]
pub struct LateOutcome(oneshot::Sender<u16>);

impl LateOutcome {
    pub fn tell(self, status: u16) {
        // The entry's recorder waits until the server stops; gone then, there is no one to tell.
        let _ = self.0.send(status);
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AuditNote {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<AuditNote, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<AuditNote>()
            .cloned()
            .unwrap_or_default())
    }
}

/// What the access layer knows of an audited request before its handler runs.
pub struct Pending {
    pub action: Action,
    pub note: AuditNote,
    pub principal: Option<Principal>,
    pub address: IpAddr,
    pub agent: Option<(String, Option<String>)>,
}

impl Pending {
    /// Gathers what the entry needs from the request (the returned future does not hold
    /// it); the agent's name is read now, since destroying it may take it away.
    pub fn new<'a>(
        st: &'a AppState,
        action: Action,
        req: &axum::extract::Request,
        agent_id: Option<String>,
        approval_id: Option<String>,
    ) -> impl std::future::Future<Output = Pending> + Send + 'a {
        // The client, as a trusted proxy names it (`server.trusted_proxies`), else the peer.
        let address = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| {
                super::origin::client_ip(&st.config().server, c.0, req.headers())
            });
        let principal = req.extensions().get::<Principal>().cloned();
        Pending::resolve(st, action, principal, address, agent_id, approval_id)
    }

    async fn resolve(
        st: &AppState,
        action: Action,
        principal: Option<Principal>,
        address: IpAddr,
        agent_id: Option<String>,
        approval_id: Option<String>,
    ) -> Pending {
        // Only an agent the caller sees is named: an entry must not tell its reader of an
        // agent they were refused.
        let sees = |id: &str| {
            principal.as_ref().is_some_and(|p| {
                crate::teams::access::sees(p, id, st.auth.directory.agent_facts(id).as_ref())
            })
        };
        let agent_id = match (agent_id, approval_id) {
            (Some(id), _) => Some(id),
            (None, Some(aid)) if principal.is_some() => {
                st.sessions.approval(&aid).await.ok().map(|a| a.agent_id)
            }
            _ => None,
        };
        let agent = match agent_id {
            Some(id) if sees(&id) => {
                let name = st.lc.get(&id).await.ok().map(|a| a.name);
                Some((id, name))
            }
            Some(id) => Some((id, None)),
            None => None,
        };
        Pending {
            action,
            note: AuditNote::default(),
            principal,
            address,
            agent,
        }
    }

    /// Records the entry, now that the answer's status is known.
    pub async fn record(self, st: &AppState, status: u16) {
        let note = std::mem::take(&mut *self.note.0.lock().unwrap_or_else(PoisonError::into_inner));
        let mut entry = match (note.who, &self.principal) {
            (Some((user_id, name)), _) => Entry {
                user_id,
                ..Entry::anonymous(&name, self.action, self.address, status)
            },
            (None, Some(p)) => Entry::by(p, self.action, self.address, status),
            // A public route's caller without a credential who told nothing: nobody to name.
            (None, None) => Entry::anonymous("", self.action, self.address, status),
        };
        (entry.agent_id, entry.agent_name) = match (note.agent, self.agent) {
            (Some((id, name)), _) => (Some(id), Some(name)),
            (None, Some((id, name))) => (Some(id), name),
            (None, None) => (None, None),
        };
        entry.detail = note.detail;
        match note.later {
            None => st.audit.record(entry).await,
            Some(later) => {
                let st = st.clone();
                tokio::spawn(async move {
                    if let Ok(status) = later.await {
                        entry.status = status;
                    }
                    st.audit.record(entry).await;
                });
            }
        }
    }
}

/// `GET /api/v1/audit`'s filters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditFilters {
    /// An agent's id or name.
    agent: Option<String>,
    /// A user's id or name.
    user: Option<String>,
    /// One action of the fixed vocabulary (see `AuditAction`); another is `400`.
    action: Option<String>,
    /// Entries at or after: an RFC 3339 time, or a duration ago (1 to 6 digits and `s`, `m`,
    /// `h`, `d` or `w`: `24h`, `7d`). After `until`, nothing matches.
    since: Option<String>,
    /// Entries at or before: an RFC 3339 time, or a duration ago.
    until: Option<String>,
    /// Only entries with a smaller id: pass the last id of a page for the next one.
    #[param(minimum = 1)]
    before: Option<i64>,
    /// Entries a page holds, 1 to 1000; 100 when left out.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// The audit log, newest first: admins see every entry, anyone else the entries of their own
/// actions. Page with `before`: a page shorter than `limit` is the last.
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", operation_id = "listAudit",
    params(AuditFilters),
    responses((status = 200, body = [AuditEntry]),
        (status = 400, body = ErrorBody, description = "A filter breaks its rule: an unknown action, a time that is neither RFC 3339 nor a duration, an empty or over-long name, `limit` outside 1–1000, `before` below 1 (`field` names it)")))]
pub async fn list(
    State(st): State<AppState>,
    principal: Principal,
    ApiQuery(f): ApiQuery<AuditFilters>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let query = audit::parse(
        audit::Filters {
            agent: f.agent,
            user: f.user,
            action: f.action,
            since: f.since,
            until: f.until,
            before: f.before,
            limit: f.limit,
        },
        chrono::Utc::now(),
    )?;
    Ok(Json(st.audit.query(&principal, query).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route that changes something records an entry, or is left out on purpose; every
    /// audited route is one the access table knows.
    #[test]
    fn every_change_is_audited_or_left_out_on_purpose() {
        for (m, p, _) in super::super::access::ROUTES {
            if *m == "GET" {
                continue;
            }
            let method = Method::from_bytes(m.as_bytes()).unwrap();
            let audited = action_of(&method, p).is_some();
            let left_out = NOT_AUDITED.contains(&(*m, *p));
            assert!(
                audited != left_out,
                "{m} {p}: add it to AUDITED or NOT_AUDITED (exactly one)"
            );
        }
        for (m, p, _) in AUDITED {
            let method = Method::from_bytes(m.as_bytes()).unwrap();
            assert!(
                super::super::access::need(&method, p).is_some(),
                "{m} {p} is audited but not a route"
            );
        }
    }
}
