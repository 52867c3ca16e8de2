//! The preview listener (`server.previews.listen`): reads which preview a request's `Host`
//! names, lets in whoever its access allows, wakes the agent if it sleeps, and hands the
//! request to the app through the tunnel ([`proxy`]).
//!
//! A browser signs in to a `private` preview by a hand-off: the preview's host sends it to the
//! API's origin (`/api/v1/previews/{id}/open`), which, for a signed-in person, sends it back to
//! [`AUTH_PATH`] with a one-time code; that answer sets a cookie for the preview's host alone.
//! The API's own cookie is never sent to a preview's host, and a preview's cookie opens
//! nothing but its preview.

mod pages;
pub mod proxy;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::Utc;

use super::grant;
use super::{host, Previews};
use crate::activity::Use;
use crate::config::{Config, UrlScheme};
use crate::credentials::{bearer_token, cookies, Gatekeeper};
use crate::model::previews::{Access, PreviewRecord};
use crate::model::AgentState;
use crate::store::{now_text, verify_token};
use crate::tunnel::conn::{ConnError, SandboxConn};
use crate::tunnel::registry::TunnelError;
use proxy::Forward;

/// Where a preview's host takes the sign-in hand-off's code. Reserved on every preview host.
pub const AUTH_PATH: &str = "/.agenthold/auth";
/// Paths of agenthold's own on every preview host: never passed on to the app.
const RESERVED: &str = "/.agenthold/";
/// How long a request that is not a page waits for a sleeping agent.
const WAKE_WAIT: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Gateway {
    previews: Arc<Previews>,
    auth: Arc<dyn Gatekeeper>,
}

pub fn router(previews: Arc<Previews>, auth: Arc<dyn Gatekeeper>) -> Router {
    Router::new()
        .fallback(handle)
        .with_state(Gateway { previews, auth })
}

fn unix_now() -> i64 {
    Utc::now().timestamp()
}

/// Whether a browser is loading a page (not a script's request): it gets pages of ours.
fn wants_page(req: &Request) -> bool {
    req.method() == Method::GET
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"))
}

fn redirect(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(v) => (StatusCode::FOUND, [(header::LOCATION, v)]).into_response(),
        Err(_) => pages::forbidden("the address to go on to is not valid"),
    }
}

/// The `Set-Cookie` of a grant for preview `p`.
fn grant_cookie(g: &Gateway, config: &Config, p: &PreviewRecord) -> Option<HeaderValue> {
    let now = unix_now();
    let mut ends = now + grant::GRANT_TTL.as_secs() as i64;
    if let Some(exp) = p
        .expires_at
        .as_deref()
        .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
    {
        ends = ends.min(exp.timestamp());
    }
    let value = g.previews.grants().sign(&p.id, ends);
    let secure = match config.server.previews.public_url_scheme {
        UrlScheme::Https => "; Secure",
        UrlScheme::Http => "",
    };
    HeaderValue::from_str(&format!(
        "{}={value}; Max-Age={}; Path=/; HttpOnly; SameSite=Lax{secure}",
        grant::COOKIE,
        (ends - now).max(0)
    ))
    .ok()
}

/// What the access check decided.
enum Admitted {
    /// Go on to the app, taking out what was ours.
    Yes {
        strip_authorization: bool,
        strip_token_query: bool,
        set_cookie: Option<HeaderValue>,
    },
    /// Answer this instead.
    No(Response),
}

fn query_token(req: &Request) -> Option<String> {
    form_urlencoded::parse(req.uri().query()?.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

fn admit(g: &Gateway, config: &Config, p: &PreviewRecord, req: &Request) -> Admitted {
    let is_token = |t: &str| {
        p.access == Access::Token
            && p.token_hash
                .as_deref()
                .is_some_and(|hash| verify_token(t, hash))
    };
    // What is ours is taken out whatever let the request in (a public preview, a cookie): the
    // admin token, an API token or the preview's token, in the header or the query, never
    // reaches the app.
    let bearer = bearer_token(req.headers());
    let bearer_is_ours = bearer.is_some_and(|t| is_token(t) || g.auth.is_our_token(t));
    // Stripped whatever it is, but it lets in only a credential that may use this agent.
    let bearer_admits = bearer.is_some_and(|t| is_token(t) || g.auth.may_use_agent(t, &p.agent_id));
    let query_is_ours = query_token(req).is_some_and(|t| is_token(&t));
    let yes = |set_cookie| Admitted::Yes {
        strip_authorization: bearer_is_ours,
        strip_token_query: query_is_ours,
        set_cookie,
    };
    if query_is_ours && matches!(*req.method(), Method::GET | Method::HEAD) {
        // The address bar loses the token: what is bookmarked or shared on is clean. Only to
        // a path of this origin (a request for `//elsewhere/?token=…` lands on `/`).
        let clean = proxy::path_and_query(req.uri(), true);
        let mut r = redirect(local_path(&clean).unwrap_or("/"));
        if let Some(c) = grant_cookie(g, config, p) {
            r.headers_mut().append(header::SET_COOKIE, c);
        }
        return Admitted::No(r);
    }
    let granted = cookies(req.headers(), grant::COOKIE)
        .any(|c| g.previews.grants().allows(c, &p.id, unix_now()));
    if p.access == Access::Public || granted || bearer_admits {
        return yes(None);
    }
    if query_is_ours {
        return yes(grant_cookie(g, config, p));
    }
    match p.access {
        Access::Token => Admitted::No(pages::needs_token()),
        _ if wants_page(req) => {
            let next = proxy::path_and_query(req.uri(), false);
            let to = format!(
                "{}/api/v1/previews/{}/open?next={}",
                g.previews.api_origin(),
                p.id,
                percent_encoding::utf8_percent_encode(&next, percent_encoding::NON_ALPHANUMERIC)
            );
            Admitted::No(redirect(&to))
        }
        _ => Admitted::No(pages::needs_sign_in()),
    }
}

/// A path on the preview's own origin: `/…`, never `//host` or `/\host`, which a browser
/// would take as another origin.
fn local_path(next: &str) -> Option<&str> {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.chars().any(|c| c.is_control());
    ok.then_some(next)
}

/// `AUTH_PATH?code=…&next=…`: spends the code and sets the grant.
fn take_hand_off(g: &Gateway, config: &Config, p: &PreviewRecord, req: &Request) -> Response {
    let mut code = None;
    let mut next = None;
    for (k, v) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        match &*k {
            "code" => code = Some(v.into_owned()),
            "next" => next = Some(v.into_owned()),
            _ => {}
        }
    }
    let granted = code.and_then(|c| g.previews.grants().take_code(&c));
    if granted.as_deref() != Some(p.id.as_str()) {
        return pages::forbidden(
            "This sign-in link was used already, is stale, or is for another preview. Open \
             the preview again.",
        );
    }
    let next = next.as_deref().and_then(local_path).unwrap_or("/");
    let mut r = redirect(next);
    if let Some(c) = grant_cookie(g, config, p) {
        r.headers_mut().append(header::SET_COOKIE, c);
    }
    r
}

/// The agent's sandbox, woken if it sleeps: a page asks again in a second (it shows
/// "Starting…"), anything else waits up to [`WAKE_WAIT`].
async fn sandbox(
    g: &Gateway,
    agent_id: &str,
    name: &str,
    page: bool,
) -> Result<SandboxConn, Response> {
    let lc = g.previews.lifecycle();
    if let Some(conn) = lc.conn(agent_id) {
        return Ok(conn);
    }
    let agent = lc
        .get(agent_id)
        .await
        .map_err(|e| pages::unavailable(&e.to_string()))?;
    match agent.state {
        AgentState::Destroying => return Err(pages::gone()),
        AgentState::Error => {
            return Err(pages::unavailable(&format!(
                "Agent {name} is in error: start or rebuild it from agenthold first."
            )))
        }
        _ => {}
    }
    // A paused agent thaws at once: the request waits for that rather than for a page.
    if page && agent.state != AgentState::Paused {
        g.previews.wake_in_background(agent_id);
        return Err(pages::starting(name));
    }
    match tokio::time::timeout(WAKE_WAIT, lc.wake_conn(agent_id)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(pages::unavailable(&e.to_string())),
        Err(_) => Err(pages::unavailable(&format!(
            "Agent {name} did not start within {} s; try again.",
            WAKE_WAIT.as_secs()
        ))),
    }
}

fn host_of(headers: &HeaderMap, req_host: Option<&str>) -> String {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or(req_host)
        .unwrap_or("")
        .to_string()
}

async fn handle(
    State(g): State<Gateway>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    if g.auth.is_sandbox_peer(peer.ip()) {
        return pages::forbidden("requests from the sandbox network are refused");
    }
    let config = g.previews.lifecycle().config();
    let pc = &config.server.previews;
    let host_header = host_of(req.headers(), req.uri().host());
    let Some(ph) = host::parse(&host_header, &pc.domain) else {
        return pages::no_preview(&host_header);
    };
    let store = g.previews.store();
    let found = match store.agent_id_by_name(&ph.name).await {
        Ok(Some(agent_id)) => store.preview_on_port(&agent_id, ph.port).await,
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let p = match found {
        Ok(Some(p)) => p,
        Ok(None) => return pages::no_preview(&host_header),
        Err(e) => {
            tracing::error!("reading a preview: {e}");
            return pages::unavailable("agenthold could not read its database; try again.");
        }
    };
    if !p.is_live(&now_text()) {
        g.previews.forget(&p.id);
        return pages::gone();
    }
    if req.uri().path() == AUTH_PATH {
        return take_hand_off(&g, &config, &p, &req);
    }
    if req.uri().path().starts_with(RESERVED) {
        return pages::no_preview(&host_header);
    }
    let (strip_authorization, strip_token_query, set_cookie) = match admit(&g, &config, &p, &req) {
        Admitted::Yes {
            strip_authorization,
            strip_token_query,
            set_cookie,
        } => (strip_authorization, strip_token_query, set_cookie),
        Admitted::No(r) => return r,
    };
    let page = wants_page(&req);
    let conn = match sandbox(&g, &p.agent_id, &ph.name, page).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Some(permit) = g.previews.stream_permit(&p.agent_id) else {
        return pages::busy();
    };
    let lc = g.previews.lifecycle();
    let hold = lc.activity().hold(&p.agent_id, Use::Preview);
    // The request may have waited since the preview was read (for a wake, for the app). Its
    // closer is taken before the preview is read again, so a delete either shows in that read
    // or cancels this closer: a preview deleted meanwhile lets nothing through. The read goes
    // alongside the connection to the app, which takes longer.
    let closer = g.previews.closer(&p.id);
    let (connected, again) = tokio::join!(conn.connect_port(p.port), store.get_preview(&p.id));
    match again {
        Ok(Some(now)) if now.is_live(&now_text()) && !closer.is_cancelled() => {}
        Ok(_) => {
            g.previews.forget(&p.id);
            return pages::gone();
        }
        Err(e) => {
            tracing::error!("reading a preview: {e}");
            return pages::unavailable("agenthold could not read its database; try again.");
        }
    }
    let stream = match connected {
        Ok(s) => s,
        Err(ConnError::Refused(e)) if e.code == agenthold_proto::ErrorCode::Refused => {
            let listening = conn.list_ports().await.unwrap_or_default();
            return pages::not_listening(p.port, &listening);
        }
        Err(ConnError::Tunnel(TunnelError::TooManyStreams(_))) => return pages::busy(),
        Err(e) => return pages::bad_gateway(&format!("the sandbox connection failed: {e}")),
    };
    let deadline = p
        .expires_at
        .as_deref()
        .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
        .map(|e| {
            let left = (e.with_timezone(&Utc) - Utc::now())
                .to_std()
                .unwrap_or_default();
            tokio::time::Instant::now() + left
        });
    let trusted = config
        .server
        .trusted_proxies
        .iter()
        .any(|n| n.contains(&peer.ip().to_canonical()));
    let forward = Forward {
        peer,
        scheme: pc.public_url_scheme.as_str(),
        host: host_header,
        trust_forwarded: trusted,
        strip_authorization,
        strip_token_query,
        set_cookie,
        closer,
        deadline,
        hold: (hold, permit),
    };
    proxy::forward(req, stream, forward).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_off_goes_on_only_to_a_path_of_the_preview() {
        assert_eq!(local_path("/a?b=1"), Some("/a?b=1"));
        for bad in [
            "//evil.com/",
            "/\\evil.com",
            "https://evil.com",
            "evil",
            "/a\nb",
            "",
        ] {
            assert_eq!(local_path(bad), None, "{bad:?}");
        }
    }
}
