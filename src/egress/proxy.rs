//! The egress proxy: one listener for every sandbox, on the same addresses as the tunnel. It
//! knows which agent a connection comes from by the address it arrived at and came from (each
//! agent network has its own), and serves HTTP forward requests (checked on the request's host),
//! `CONNECT` for everything else, and origin-form requests by their `Host` header (what a
//! program that ignores the proxy variables sends once the firewall redirects it here).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::counted::{Counted, Tally};
use super::dial::{Destination, Dialer, Refusal};
use super::event::EgressEvent;
use super::open::{ClientSlot, Connections, Full, UpstreamSlot};
use super::rules::{EgressRules, Verdict};
use crate::events::{AgentEvent, EventHub};
use crate::model::AgentState;

/// A request head larger than this is refused (`431`): a proxy request needs a line and a few
/// headers, and each connection's buffer is bounded by it.
const MAX_HEAD: usize = 64 * 1024;
/// Bytes buffered each way while a tunnel copies: bounded memory per connection.
const SPLICE_BUF: usize = 64 * 1024;
/// How long a connection refused before its request was read stays open for the client to
/// read the answer.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Pauses of the accept loop when the process is out of file handles.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the proxy needs to know about agents.
#[async_trait::async_trait]
pub trait Sandboxes: Send + Sync + 'static {
    /// The agent whose sandbox reaches the proxy at `local` from `peer`, if one does.
    async fn agent_at(&self, local: IpAddr, peer: IpAddr) -> Option<String>;
    /// The agent's name and rules now; `None` once it is gone.
    async fn rules(&self, id: &str) -> Option<(String, EgressRules)>;
}

pub struct ProxySettings {
    pub max_connections: usize,
    pub max_total_connections: usize,
    pub header_timeout: Duration,
}

pub struct Proxy {
    refusals: RefusalEvents,
    sandboxes: Arc<dyn Sandboxes>,
    dialer: Dialer,
    conns: Connections,
    hub: EventHub,
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
}

impl Proxy {
    pub fn new(
        sandboxes: Arc<dyn Sandboxes>,
        dialer: Dialer,
        hub: EventHub,
        settings: ProxySettings,
    ) -> Arc<Proxy> {
        Arc::new(Proxy {
            refusals: RefusalEvents::default(),
            sandboxes,
            dialer,
            conns: Connections::default(),
            hub,
            settings,
            closing: CancellationToken::new(),
        })
    }

    pub fn connections(&self) -> &Connections {
        &self.conns
    }

    /// Accepts until `shutdown`, then closes every connection it holds.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let mut backoff = MIN_BACKOFF;
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => {
                    backoff = MIN_BACKOFF;
                    a
                }
                Err(e) => {
                    tracing::warn!("egress proxy: accept failed: {e}");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            let proxy = self.clone();
            tokio::spawn(async move { proxy.serve_connection(tcp, peer).await });
        }
        self.closing.cancel();
    }

    async fn serve_connection(self: Arc<Self>, tcp: TcpStream, peer: SocketAddr) {
        let Ok(local) = tcp.local_addr() else { return };
        let Some(id) = self.sandboxes.agent_at(local.ip(), peer.ip()).await else {
            tracing::debug!(%peer, %local, "egress proxy: a connection from no sandbox, refused");
            refuse_unread(
                tcp,
                StatusCode::FORBIDDEN,
                "agenthold: this proxy serves agent sandboxes only\n".into(),
            );
            return;
        };
        let s = &self.settings;
        let slot = match self
            .conns
            .admit(&id, s.max_connections, s.max_total_connections)
        {
            Ok(slot) => slot,
            Err(Full::Agent(n)) => {
                let why = format!(
                    "agenthold: agent {id} holds its most connections through the proxy ({n}, sandbox.egress.max_connections)\n"
                );
                refuse_unread(tcp, StatusCode::TOO_MANY_REQUESTS, why);
                return;
            }
            Err(Full::All(n)) => {
                let why = format!(
                    "agenthold: the proxy holds its most connections for all agents ({n}, sandbox.egress.max_total_connections)\n"
                );
                refuse_unread(tcp, StatusCode::SERVICE_UNAVAILABLE, why);
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
        let (upstream, slot, ended) = match self.open_for(caller, &dest).await {
            Ok(opened) => opened,
            Err(refusal) => return refusal,
        };
        if connect {
            self.tunnel(req, upstream, slot, ended)
        } else {
            self.forward(req, upstream, slot, ended).await
        }
    }

    /// A TLS connection the firewall redirected from port 443: decided on the server name in
    /// its ClientHello, which then goes on to the destination unchanged. A refusal closes the
    /// connection (no HTTP answer can be read inside TLS); the event says why.
    async fn transparent_tls(self: &Arc<Self>, mut tcp: TcpStream, caller: Arc<Caller>) {
        use tokio::io::AsyncWriteExt;
        let (name, hello) = match super::sni::read_client_hello(
            &mut tcp,
            self.settings.header_timeout,
        )
        .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(agent = %caller.id, "egress proxy: port 443 without a usable ClientHello: {e}");
                return;
            }
        };
        let Some(dest) = Destination::parse(&name, Some(443)).filter(|d| d.port == 443) else {
            return;
        };
        let Ok((mut upstream, slot, ended)) = self.open_for(caller, &dest).await else {
            return;
        };
        if upstream.write_all(&hello).await.is_err() {
            ended.report(Some("the destination closed at once".into()));
            return;
        }
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let reason = splice_tcp(&tcp, b"", &upstream, &slot, &closing).await;
            drop(slot);
            ended.report(reason);
        });
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

    /// Answers `200` and, once the client has the answer, copies both ways until either side
    /// closes or the rules no longer allow the destination.
    fn tunnel(
        &self,
        req: Request<Incoming>,
        mut upstream: Counted<TcpStream>,
        slot: UpstreamSlot,
        ended: Ended,
    ) -> Response<Body> {
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let reason = match hyper::upgrade::on(req).await {
                // The client's own socket, when hyper gives it back, lets the tunnel splice
                // (bytes the client sent after its request head, already read, go first).
                Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => {
                        let tcp = parts.io.into_inner();
                        splice_tcp(&tcp, &parts.read_buf, &upstream, &slot, &closing).await
                    }
                    Err(upgraded) => {
                        let mut client = TokioIo::new(upgraded);
                        splice(&mut client, &mut upstream, &slot, &closing).await
                    }
                },
                Err(e) => Some(e.to_string()),
            };
            drop(slot);
            ended.report(reason);
        });
        Response::new(Body::empty())
    }

    /// Sends the request on to the destination over its own connection and streams the answer
    /// back; the connection closes once the answer is through.
    async fn forward(
        &self,
        req: Request<Incoming>,
        upstream: Counted<TcpStream>,
        slot: UpstreamSlot,
        ended: Ended,
    ) -> Response<Body> {
        let (mut sender, conn) =
            match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
                Ok(pair) => pair,
                Err(e) => {
                    ended.report(Some(e.to_string()));
                    return text(StatusCode::BAD_GATEWAY, format!("agenthold: {e}\n"));
                }
            };
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let reason = tokio::select! {
                r = conn => r.err().map(|e| e.to_string()),
                () = slot.cancelled.cancelled() => Some("closed: the agent's egress rules no longer allow it".into()),
                () = closing.cancelled() => Some("closed: the server is shutting down".into()),
            };
            drop(slot);
            ended.report(reason);
        });
        let (mut parts, body) = req.into_parts();
        let host = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| header_str(&parts.headers, header::HOST).map(str::to_string));
        parts.uri = parts.uri.path_and_query().map_or_else(
            || Uri::from_static("/"),
            |pq| Uri::try_from(pq.as_str()).unwrap_or_else(|_| Uri::from_static("/")),
        );
        strip_hop_headers(&mut parts.headers);
        if let Some(host) = host.and_then(|h| HeaderValue::from_str(&h).ok()) {
            parts.headers.insert(header::HOST, host);
        }
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_headers(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Err(e) => text(
                StatusCode::BAD_GATEWAY,
                format!("agenthold: the destination did not answer: {e}\n"),
            ),
        }
    }

    fn refuse(
        &self,
        caller: &Caller,
        name: &str,
        dest: &Destination,
        refusal: Refusal,
    ) -> Response<Body> {
        let rule = match &refusal {
            Refusal::Denied { rule } => rule.as_ref().map(ToString::to_string),
            _ => None,
        };
        let reason = refusal.to_string();
        if refusal.is_policy() {
            if self.refusals.worth_telling(&caller.id, dest) {
                self.publish(caller, dest, false, rule, Some(reason.clone()), None);
            }
            let hint = match refusal {
                Refusal::Denied { rule: None } => format!(
                    "; to allow it: agenthold egress {} --allow {}",
                    caller.id, dest.host
                ),
                Refusal::Denied { rule: Some(r) } => format!(
                    "; to allow it: agenthold egress {} --remove '{r}'",
                    caller.id
                ),
                _ => String::new(),
            };
            text(
                StatusCode::FORBIDDEN,
                format!(
                    "agenthold: agent {name} ({}) may not reach {dest}: {reason}{hint}\n",
                    caller.id
                ),
            )
        } else {
            self.publish(caller, dest, true, None, Some(reason.clone()), Some((0, 0)));
            text(
                StatusCode::BAD_GATEWAY,
                format!("agenthold: cannot reach {dest} for agent {name}: {reason}\n"),
            )
        }
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
        let (bytes_up, bytes_down) = closed.unwrap_or_default();
        self.hub.publish(AgentEvent::Egress(Box::new(EgressEvent {
            id: caller.id.clone(),
            host: dest.host.clone(),
            port: dest.port,
            allowed,
            rule,
            reason,
            closed: closed.is_some() || !allowed,
            bytes_up,
            bytes_down,
        })));
    }

    /// Closes connections that rules changed since no longer allow, and every connection of
    /// an agent that stopped or is gone. Runs for the server's life.
    pub async fn follow_rule_changes(self: Arc<Self>) {
        let mut rx = self.hub.subscribe();
        loop {
            match rx.recv().await {
                Ok(AgentEvent::Changed(agent)) => {
                    if !matches!(agent.state, AgentState::Running | AgentState::Starting) {
                        self.conns.close_all(&agent.id);
                    } else if let Some(rules) = &agent.egress {
                        self.conns.recheck(&agent.id, rules);
                    }
                }
                Ok(AgentEvent::Deleted(id)) => self.conns.close_all(&id),
                Ok(_) => {}
                // Some changes went by unseen: check every agent that has connections.
                Err(RecvError::Lagged(_)) => {
                    for id in self.conns.agents() {
                        match self.sandboxes.rules(&id).await {
                            Some((_, rules)) => {
                                self.conns.recheck(&id, &rules);
                            }
                            None => self.conns.close_all(&id),
                        }
                    }
                }
                Err(RecvError::Closed) => break,
            }
        }
    }
}

/// Refusals cost the sandbox nothing (no DNS, no dial), so a loop of them would flood the event
/// hub that every agent's changes share: each agent gets at most [`REFUSAL_EVENTS_PER_SEC`]
/// refusal events a second, and one per destination in that second.
#[derive(Default)]
struct RefusalEvents {
    agents: std::sync::Mutex<std::collections::HashMap<String, RefusalWindow>>,
}

struct RefusalWindow {
    started: std::time::Instant,
    told: Vec<Destination>,
}

const REFUSAL_EVENTS_PER_SEC: usize = 20;

impl RefusalEvents {
    fn worth_telling(&self, agent: &str, dest: &Destination) -> bool {
        self.worth_telling_at(agent, dest, std::time::Instant::now())
    }

    fn worth_telling_at(&self, agent: &str, dest: &Destination, now: std::time::Instant) -> bool {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        // Windows of agents quiet for a second are dropped, so this holds only the noisy ones.
        if agents.len() > 1024 {
            agents.retain(|_, w| now.duration_since(w.started) < Duration::from_secs(1));
        }
        let w = agents
            .entry(agent.to_string())
            .or_insert_with(|| RefusalWindow {
                started: now,
                told: Vec::new(),
            });
        if now.duration_since(w.started) >= Duration::from_secs(1) {
            w.started = now;
            w.told.clear();
        }
        if w.told.len() >= REFUSAL_EVENTS_PER_SEC || w.told.contains(dest) {
            return false;
        }
        w.told.push(dest.clone());
        true
    }
}

/// Copies both ways between a sandbox and its destination until either closes, the rules no
/// longer allow it, or the server stops; returns why it ended early, if it did.
async fn splice<C>(
    client: &mut C,
    upstream: &mut Counted<TcpStream>,
    slot: &UpstreamSlot,
    closing: &CancellationToken,
) -> Option<String>
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let copy = tokio::io::copy_bidirectional_with_sizes(client, upstream, SPLICE_BUF, SPLICE_BUF);
    until_cut(copy, slot, closing).await
}

/// [`splice`] between two TCP sockets, in the kernel (`splice(2)` through a pipe each way): the
/// bytes are not copied through the server. `early` is what the client sent that was already
/// read, sent first.
async fn splice_tcp(
    client: &TcpStream,
    early: &[u8],
    upstream: &Counted<TcpStream>,
    slot: &UpstreamSlot,
    closing: &CancellationToken,
) -> Option<String> {
    let (upstream, tally) = upstream.parts();
    until_cut(
        super::zerocopy::relay(client, upstream, early, tally),
        slot,
        closing,
    )
    .await
}

/// Runs a relay to its end, or until the rules no longer allow it or the server shuts down
/// (dropping it closes both sides): the reason it ended, `None` for a clean end.
async fn until_cut<T>(
    relay: impl std::future::Future<Output = std::io::Result<T>>,
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

/// Where a request wants to go: the `CONNECT` target, an absolute URI's host, or the `Host`
/// header of an origin-form request.
fn destination(req: &Request<Incoming>, default_port: u16) -> Result<Destination, String> {
    if req.method() == Method::CONNECT {
        let target = req
            .uri()
            .authority()
            .ok_or("CONNECT needs a target like pypi.org:443")?;
        return Destination::parse(target.as_str(), None)
            .ok_or_else(|| format!("\"{target}\" is not a host:port to CONNECT to"));
    }
    if let Some(authority) = req.uri().authority() {
        return match req.uri().scheme_str() {
            Some("http") => Destination::parse(authority.as_str(), Some(80))
                .ok_or_else(|| format!("\"{authority}\" is not a host to reach")),
            Some(other) => Err(format!(
                "the proxy forwards http:// URLs; for {other}:// use CONNECT (set HTTPS_PROXY)"
            )),
            None => Err("the request has no scheme".into()),
        };
    }
    let host = header_str(req.headers(), header::HOST)
        .ok_or("the request names no destination: send it through the proxy with an absolute URL, or with a Host header")?;
    Destination::parse(host, Some(default_port))
        .ok_or_else(|| format!("\"{host}\" is not a host to reach"))
}

fn header_str(headers: &HeaderMap, name: HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Headers that belong to one hop, not to the request or answer: never passed on.
fn strip_hop_headers(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::try_from(n.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("proxy-connection");
    headers.remove("keep-alive");
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

/// Answers a connection refused before any of its request was read, then closes it gently:
/// closing with unread bytes would reset it, and the client might never see the answer. The
/// wait for the client to finish is short and the answer small, so a flood costs little.
fn refuse_unread(mut tcp: TcpStream, status: StatusCode, body: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::spawn(async move {
        let answer = plain_response(status, &body);
        let polite = async {
            tcp.write_all(&answer).await?;
            tcp.shutdown().await?;
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, polite).await;
    });
}

/// A whole answer as bytes, for connections refused before any HTTP is read.
fn plain_response(status: StatusCode, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {} {}\r\nconnection: close\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_events_are_one_per_destination_and_bounded_per_agent() {
        let r = RefusalEvents::default();
        let d = |h: &str| Destination {
            host: h.into(),
            port: 443,
        };
        let t0 = std::time::Instant::now();
        assert!(r.worth_telling_at("a", &d("x.example"), t0));
        assert!(
            !r.worth_telling_at("a", &d("x.example"), t0),
            "the same one again in the second"
        );
        assert!(
            r.worth_telling_at("b", &d("x.example"), t0),
            "another agent's is its own"
        );
        let told = (0..100)
            .filter(|i| r.worth_telling_at("a", &d(&format!("h{i}.example")), t0))
            .count();
        assert_eq!(told, REFUSAL_EVENTS_PER_SEC - 1);
        let later = t0 + Duration::from_secs(1);
        assert!(
            r.worth_telling_at("a", &d("x.example"), later),
            "a new second, a new window"
        );
    }
}
