//! The egress proxy: one listener for every sandbox, on the same addresses as the tunnel. It
//! knows which agent a connection comes from by the address it arrived at and came from (each
//! agent network has its own), and serves HTTP forward requests (checked on the request's host),
//! `CONNECT` for everything else, and origin-form requests by their `Host` header (what a
//! program that ignores the proxy variables sends once the firewall redirects it here).
//!
//! This file accepts, admits and decides; [`forward`] passes HTTP requests on, [`tunnel`]
//! copies `CONNECT` and redirected TLS, [`intercept`] terminates the TLS of destinations a
//! granted secret may go to, [`secrets`] swaps placeholders in what it sees, and [`refusal`]
//! says no.

mod bodies;
mod forward;
mod intercept;
mod refusal;
mod rewound;
mod secrets;
mod tunnel;
mod uses;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use self::bodies::BodyBudget;
use self::forward::destination;
use self::refusal::{plain_response, refuse_now, RefusalEvents};
use self::uses::UseEvents;
use super::counted::{Counted, Tally};
use super::dial::{Destination, Dialer, Refusal};
use super::event::EgressEvent;
use super::granted::{Granted, Inside, SecretGuard};
use super::open::{ClientSlot, Connections, UpstreamSlot};
use super::rules::{EgressRules, Verdict};
use super::tls::Interception;
use crate::listener::{accept_loop, ConnectionGuard, ConnectionLimiter, Refused};

/// A request head larger than this is refused (`431`): a proxy request needs a line and a few
/// headers, and each connection's buffer is bounded by it.
const MAX_HEAD: usize = 64 * 1024;

/// What the proxy needs to know about agents, and where its decisions go.
#[async_trait::async_trait]
pub trait Sandboxes: Send + Sync + 'static {
    /// The agent whose sandbox reaches the proxy at `local` from `peer`, if one does.
    async fn agent_at(&self, local: IpAddr, peer: IpAddr) -> Option<String>;
    /// The agent's name and rules now; `None` once it is gone.
    async fn rules(&self, id: &str) -> Option<(String, EgressRules)>;
    /// The secrets the agent's sandbox may use in its current boot (issue #34).
    async fn granted(&self, _id: &str) -> Arc<Granted> {
        Arc::new(Granted::default())
    }
    /// Announces a decision of the proxy, or the close of a connection it allowed (and
    /// remembers it, as [`Sandboxes::record`] does).
    fn publish(&self, event: EgressEvent);
    /// Remembers a decision without announcing it: a refusal past the events' rate limit.
    fn record(&self, _event: &EgressEvent) {}
}

pub struct ProxySettings {
    /// Connections one agent may hold (also the cap per source address, which under Docker is
    /// one sandbox).
    pub max_connections: usize,
    /// The caps checked at accept: all agents together, and per source address.
    pub limiter: Arc<ConnectionLimiter>,
    pub header_timeout: Duration,
    /// The CA and TLS client for destinations with a granted secret.
    pub interception: Arc<Interception>,
    /// Which TLS connections of an agent with grants are terminated
    /// (`sandbox.egress.secret_guard`).
    pub secret_guard: SecretGuard,
    /// Bytes of request bodies held whole (to swap an `inBody` secret) for all agents together.
    pub body_budget: usize,
    /// How long such a body may take to arrive after its request's headers.
    pub body_timeout: Duration,
}

pub struct Proxy {
    refusals: RefusalEvents,
    uses: UseEvents,
    bodies: BodyBudget,
    sandboxes: Arc<dyn Sandboxes>,
    dialer: Dialer,
    conns: Connections,
    settings: ProxySettings,
    closing: CancellationToken,
}

/// Who a request is for, fixed per sandbox connection. It holds the connection's place in the
/// agent's count: a `CONNECT` tunnel outlives hyper's part of the connection, so the tunnel
/// keeps its caller (and the place) until it closes.
struct Caller {
    id: String,
    /// The port a request naming no port goes to: 80, or the port the sandbox aimed at when
    /// the firewall redirected it here (transparent mode).
    default_port: u16,
    _slot: ClientSlot,
    /// The connection's place under the proxy's caps.
    _guard: ConnectionGuard,
}

impl Proxy {
    pub fn new(
        sandboxes: Arc<dyn Sandboxes>,
        dialer: Dialer,
        settings: ProxySettings,
    ) -> Arc<Proxy> {
        Arc::new(Proxy {
            refusals: RefusalEvents::default(),
            uses: UseEvents::default(),
            bodies: BodyBudget::new(settings.body_budget),
            sandboxes,
            dialer,
            conns: Connections::default(),
            settings,
            closing: CancellationToken::new(),
        })
    }

    pub fn connections(&self) -> &Connections {
        &self.conns
    }

    /// Accepts until `shutdown`, then closes every connection it holds. Each connection is
    /// counted against the proxy's own caps (its sandbox's address, and the proxy's share of the
    /// process's file handles) before the server so much as looks up whose it is, and one over
    /// a cap is answered and closed at once: a flood from a sandbox costs the server no more
    /// file handles than its cap, and no lookups.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let limiter = self.settings.limiter.clone();
        let (total, per_source) = limiter.caps();
        let source_full = Bytes::from(plain_response(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "agenthold: this sandbox holds its most connections through the proxy \
                 ({per_source}, sandbox.egress.max_connections)\n"
            ),
        ));
        let all_full = Bytes::from(plain_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "agenthold: the proxy holds its most connections for all agents \
                 ({total}, sandbox.egress.max_total_connections)\n"
            ),
        ));
        let refusal = |why: Refused| match why {
            Refused::SourceFull(_) => source_full.clone(),
            Refused::ListenerFull(_) => all_full.clone(),
        };
        accept_loop(
            listener,
            limiter,
            refusal,
            shutdown.cancelled(),
            |tcp, peer, guard| {
                let proxy = self.clone();
                tokio::spawn(async move { proxy.serve_connection(tcp, peer, guard).await });
            },
        )
        .await;
        self.closing.cancel();
    }

    async fn serve_connection(
        self: Arc<Self>,
        tcp: TcpStream,
        peer: SocketAddr,
        guard: ConnectionGuard,
    ) {
        let Ok(local) = tcp.local_addr() else { return };
        let Some(id) = self.sandboxes.agent_at(local.ip(), peer.ip()).await else {
            tracing::debug!(%peer, %local, "egress proxy: a connection from no sandbox, refused");
            refuse_now(
                tcp,
                StatusCode::FORBIDDEN,
                "agenthold: this proxy serves agent sandboxes only\n",
            );
            return;
        };
        let slot = match self.conns.admit(&id, self.settings.max_connections) {
            Ok(slot) => slot,
            Err(n) => {
                let why = format!(
                    "agenthold: agent {id} holds its most connections through the proxy ({n}, sandbox.egress.max_connections)\n"
                );
                refuse_now(tcp, StatusCode::TOO_MANY_REQUESTS, &why);
                return;
            }
        };
        let _ = tcp.set_nodelay(true);
        // In transparent mode the firewall hands the proxy connections aimed elsewhere; the
        // port they were aimed at says what they carry.
        let redirected = original_port(&tcp).filter(|&p| p != local.port());
        let caller = Arc::new(Caller {
            id,
            default_port: redirected.unwrap_or(80),
            _slot: slot,
            _guard: guard,
        });
        if redirected == Some(443) {
            self.transparent_tls(tcp, caller).await;
            return;
        }
        let proxy = self.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let (proxy, caller) = (proxy.clone(), caller.clone());
            async move { Ok::<_, std::convert::Infallible>(proxy.handle(caller, req).await) }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.settings.header_timeout)
            .max_buf_size(MAX_HEAD);
        let conn = builder
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades();
        let mut conn = std::pin::pin!(conn);
        let ended = tokio::select! {
            ended = conn.as_mut() => ended,
            () = self.closing.cancelled() => return,
        };
        if let Err(e) = ended {
            tracing::debug!(%peer, "egress proxy: connection ended: {e}");
        }
    }

    async fn handle(
        self: &Arc<Self>,
        caller: Arc<Caller>,
        req: Request<Incoming>,
    ) -> Response<Body> {
        let connect = req.method() == Method::CONNECT;
        let dest = match destination(&req, caller.default_port) {
            Ok(d) => d,
            Err(why) => return text(StatusCode::BAD_REQUEST, format!("agenthold: {why}\n")),
        };
        let granted = self.sandboxes.granted(&caller.id).await;
        if connect {
            let (upstream, slot, ended) = match self.open_for(caller, &dest).await {
                Ok(opened) => opened,
                Err(refusal) => return refusal,
            };
            match granted.inside(&dest.host, dest.port, self.settings.secret_guard) {
                Inside::Intercepted => self.intercept(req, upstream, slot, ended),
                Inside::GuardedIfTls => self.tunnel(req, upstream, slot, ended, true),
                Inside::Spliced => self.tunnel(req, upstream, slot, ended, false),
            }
        } else {
            // Placeholders are swapped (or the request refused) before the destination is
            // so much as dialled.
            let swapped = match self.with_secrets(&caller, &dest, &granted, true, req).await {
                Ok(swapped) => swapped,
                Err(refusal) => return refusal,
            };
            let (upstream, slot, ended) = match self.open_for(caller, &dest).await {
                Ok(opened) => opened,
                Err(refusal) => return refusal,
            };
            self.forward(swapped, upstream, slot, ended).await
        }
    }

    /// Decides on `dest` for `caller` and connects: the connection, registered for rechecks,
    /// and what reports its end; or the answer that refuses it (already told as an event).
    async fn open_for(
        self: &Arc<Self>,
        caller: Arc<Caller>,
        dest: &Destination,
    ) -> Result<(Counted<TcpStream>, UpstreamSlot, Ended), Response<Body>> {
        let dest = dest.clone();
        let Some((agent_name, rules)) = self.sandboxes.rules(&caller.id).await else {
            return Err(text(
                StatusCode::FORBIDDEN,
                "agenthold: this agent is gone\n".into(),
            ));
        };
        let opened = match self.dialer.open(&rules, &dest).await {
            Ok(o) => o,
            Err(refusal) => return Err(self.refuse(&caller, &agent_name, &dest, refusal)),
        };
        let name = dest
            .host
            .parse::<IpAddr>()
            .is_err()
            .then(|| dest.host.clone());
        let slot = self
            .conns
            .opened(&caller.id, name.clone(), opened.addr, dest.port);
        // The rules may have changed while the dial was under way, before the connection was
        // registered for rechecks: decide once more, now that every later change will see it.
        let still = match self.sandboxes.rules(&caller.id).await {
            Some((_, now)) => now.decide(name.as_deref(), opened.addr, dest.port),
            None => Verdict::Denied(None),
        };
        if let Verdict::Denied(rule) = still {
            drop(slot);
            return Err(self.refuse(&caller, &agent_name, &dest, Refusal::Denied { rule }));
        }
        let rule = opened.rule.to_string();
        self.publish(&caller, &dest, true, Some(rule.clone()), None, None);
        let tally = Arc::new(Tally::default());
        let upstream = Counted::new(opened.stream, tally.clone());
        let ended = Ended {
            proxy: self.clone(),
            caller,
            dest,
            rule,
            tally,
        };
        Ok((upstream, slot, ended))
    }

    fn publish(
        &self,
        caller: &Caller,
        dest: &Destination,
        allowed: bool,
        rule: Option<String>,
        reason: Option<String>,
        closed: Option<(u64, u64)>,
    ) {
        self.sandboxes
            .publish(event(caller, dest, allowed, rule, reason, closed));
    }
}

fn event(
    caller: &Caller,
    dest: &Destination,
    allowed: bool,
    rule: Option<String>,
    reason: Option<String>,
    closed: Option<(u64, u64)>,
) -> EgressEvent {
    let (bytes_up, bytes_down) = closed.unwrap_or_default();
    EgressEvent {
        id: caller.id.clone(),
        host: dest.host.clone(),
        port: dest.port,
        allowed,
        rule,
        reason,
        closed: closed.is_some() || !allowed,
        bytes_up,
        bytes_down,
        secret: None,
    }
}

/// Runs a relay to its end, or until the rules no longer allow it or the server shuts down
/// (dropping it closes both sides): the reason it ended, `None` for a clean end.
async fn until_cut<T, E: std::fmt::Display>(
    relay: impl std::future::Future<Output = Result<T, E>>,
    slot: &UpstreamSlot,
    closing: &CancellationToken,
) -> Option<String> {
    tokio::select! {
        r = relay => r.err().map(|e| e.to_string()),
        () = slot.cancelled.cancelled() => Some("closed: the agent's egress rules no longer allow it".into()),
        () = closing.cancelled() => Some("closed: the server is shutting down".into()),
    }
}

/// The port a connection was aimed at before the firewall redirected it here; `None` for one
/// that came straight to the proxy (or from where the server cannot tell).
fn original_port(tcp: &TcpStream) -> Option<u16> {
    let addr = nix::sys::socket::getsockopt(tcp, nix::sys::socket::sockopt::OriginalDst).ok()?;
    Some(u16::from_be(addr.sin_port))
}

/// Reports an allowed connection's end, with its byte counts; until then it holds the caller's
/// place in the agent's connection count.
struct Ended {
    proxy: Arc<Proxy>,
    caller: Arc<Caller>,
    dest: Destination,
    rule: String,
    tally: Arc<Tally>,
}

impl Ended {
    fn report(self, reason: Option<String>) {
        self.proxy.publish(
            &self.caller,
            &self.dest,
            true,
            Some(self.rule),
            reason,
            Some(self.tally.get()),
        );
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
