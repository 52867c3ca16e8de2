//! TLS interception, only for destinations a granted secret may go to: the sandbox's TLS ends
//! here with a certificate from the installation CA, the destination gets TLS of the proxy's
//! own (verified as any client would), and each request in between goes through
//! [`Proxy::with_secrets`]. The protocol is the one both sides agree on (HTTP/2 or HTTP/1.1, the
//! destination's choice among what the sandbox offered); bodies stream both ways, and an
//! HTTP/1.1 upgrade (WebSocket) is passed through as bytes after its answer.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::server::Acceptor;
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};
use tokio_util::task::AbortOnDropHandle;

use super::forward::strip_hop_headers;
use super::secrets::Swapped;
use super::{text, until_cut, Caller, Ended, Proxy, MAX_HEAD};
use crate::egress::ca::CaError;
use crate::egress::counted::Counted;
use crate::egress::dial::Destination;
use crate::egress::open::UpstreamSlot;
use crate::egress::tls::{H2, HTTP11};

/// HTTP/2 streams one intercepted connection may have open at once (hyper's default is 200).
const MAX_STREAMS: u32 = 32;

/// Why an intercepted connection ended early.
#[derive(Debug, thiserror::Error)]
pub(super) enum InterceptError {
    #[error("the sandbox's TLS handshake did not finish in time")]
    Timeout,
    #[error("the sandbox's TLS handshake failed: {0}")]
    Sandbox(std::io::Error),
    #[error("TLS to the destination failed: {0}")]
    Upstream(std::io::Error),
    #[error("\"{0}\" is not a name TLS can verify")]
    Name(String),
    #[error(transparent)]
    Certificate(#[from] CaError),
    #[error("HTTP to the destination failed: {0}")]
    Http(hyper::Error),
}

impl Proxy {
    /// Answers a `CONNECT` to an intercepted destination `200`, then relays its TLS inside.
    pub(super) fn intercept(
        self: &Arc<Self>,
        req: Request<Incoming>,
        upstream: Counted<TcpStream>,
        slot: UpstreamSlot,
        ended: Ended,
    ) -> Response<Body> {
        let proxy = self.clone();
        tokio::spawn(async move {
            let reason = match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let relay = proxy.clone().relay_tls(
                        TokioIo::new(upgraded),
                        upstream,
                        ended.caller.clone(),
                        ended.dest.clone(),
                    );
                    until_cut(relay, &slot, &proxy.closing).await
                }
                Err(e) => Some(e.to_string()),
            };
            drop(slot);
            ended.report(reason);
        });
        Response::new(Body::empty())
    }

    /// The TLS of both sides and the HTTP between them, until the sandbox's side ends.
    pub(super) async fn relay_tls<C>(
        self: Arc<Self>,
        client: C,
        upstream: Counted<TcpStream>,
        caller: Arc<Caller>,
        dest: Destination,
    ) -> Result<(), InterceptError>
    where
        C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let interception = self.settings.interception.clone();
        let handshakes = async {
            let start = LazyConfigAcceptor::new(Acceptor::default(), client)
                .await
                .map_err(InterceptError::Sandbox)?;
            let offered: Vec<Vec<u8>> = start
                .client_hello()
                .alpn()
                .map(|names| {
                    names
                        .filter(|p| *p == H2 || *p == HTTP11)
                        .map(<[u8]>::to_vec)
                        .collect()
                })
                .unwrap_or_default();
            // The destination first: the sandbox is then offered exactly what it chose.
            let name = ServerName::try_from(dest.host.clone())
                .map_err(|_| InterceptError::Name(dest.host.clone()))?;
            let upstream = TlsConnector::from(interception.upstream(offered))
                .connect(name, upstream)
                .await
                .map_err(InterceptError::Upstream)?;
            let chosen = upstream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            let server = interception.server(&dest.host, chosen.clone().into_iter().collect())?;
            let client = start
                .into_stream(server)
                .await
                .map_err(InterceptError::Sandbox)?;
            Ok::<_, InterceptError>((client, upstream, chosen.as_deref() == Some(H2)))
        };
        let (client, upstream, h2) =
            tokio::time::timeout(self.settings.header_timeout * 2, handshakes)
                .await
                .map_err(|_| InterceptError::Timeout)??;
        let sender = if h2 {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(upstream))
                .await
                .map_err(InterceptError::Http)?;
            tokio::spawn(conn);
            Sender::H2(sender)
        } else {
            let (sender, conn) = http1::handshake(TokioIo::new(upstream))
                .await
                .map_err(InterceptError::Http)?;
            tokio::spawn(conn.with_upgrades());
            Sender::H1(tokio::sync::Mutex::new(sender))
        };
        let inside = Arc::new(Inside {
            proxy: self.clone(),
            caller,
            dest,
            sender,
            upgrades: Mutex::new(Vec::new()),
        });
        let service = {
            let inside = inside.clone();
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let inside = inside.clone();
                async move { Ok::<_, std::convert::Infallible>(inside.pass_on(req).await) }
            })
        };
        let served = if h2 {
            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                // Each stream may hold a body being rewritten: few at once per connection.
                .max_concurrent_streams(MAX_STREAMS)
                .max_header_list_size(MAX_HEAD as u32)
                .serve_connection(TokioIo::new(client), service)
                .await
        } else {
            hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(self.settings.header_timeout)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(client), service)
                .with_upgrades()
                .await
        };
        // An upgraded connection lives on in its relay: the connection ends with it.
        let upgrades =
            std::mem::take(&mut *inside.upgrades.lock().unwrap_or_else(|e| e.into_inner()));
        for relay in upgrades {
            let _ = relay.await;
        }
        served.map_err(InterceptError::Http)
    }
}

/// The destination's side of an intercepted connection.
enum Sender {
    H1(tokio::sync::Mutex<http1::SendRequest<Body>>),
    H2(http2::SendRequest<Body>),
}

/// One intercepted connection, as its requests need it.
struct Inside {
    proxy: Arc<Proxy>,
    caller: Arc<Caller>,
    dest: Destination,
    sender: Sender,
    /// Relays of upgraded requests: the connection lasts as long as they do, and a cut ends them.
    upgrades: Mutex<Vec<AbortOnDropHandle<()>>>,
}

impl Inside {
    async fn pass_on(&self, mut req: Request<Incoming>) -> Response<Body> {
        let upgrade = matches!(self.sender, Sender::H1(_))
            .then(|| req.headers().get(header::UPGRADE).cloned())
            .flatten();
        // The connection was let in, and the destination verified, for `dest`: a request for
        // another host (a Host header, an absolute URI, an HTTP/2 `:authority`) must not ride on
        // it, or a value meant for `dest` could reach another site served from the same address.
        let asked = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| {
                req.headers()
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_string)
            });
        if let Some(asked) = asked {
            if Destination::parse(&asked, Some(self.dest.port)).as_ref() != Some(&self.dest) {
                return text(
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "agenthold: this connection is to {}; a request for {} needs its own\n",
                        self.dest,
                        asked.chars().take(300).collect::<String>()
                    ),
                );
            }
        }
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        // Read again for each request: a rotation, a deletion or a grant taken away counts from
        // the next request, on connections already open too.
        let granted = self.proxy.sandboxes.granted(&self.caller.id).await;
        let Swapped { req, used } = match self
            .proxy
            .with_secrets(&self.caller, &self.dest, &granted, false, req)
            .await
        {
            Ok(swapped) => swapped,
            Err(refusal) => return refusal,
        };
        let (mut parts, body) = req.into_parts();
        let authority = match (self.dest.port, self.dest.host.parse::<std::net::Ipv6Addr>()) {
            (443, Ok(_)) => format!("[{}]", self.dest.host),
            (443, Err(_)) => self.dest.host.clone(),
            _ => self.dest.to_string(),
        };
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_string();
        // The one hop-by-hop header HTTP/2 keeps: gRPC needs it.
        let trailers = parts
            .headers
            .get(header::TE)
            .is_some_and(|te| te.as_bytes().eq_ignore_ascii_case(b"trailers"));
        strip_hop_headers(&mut parts.headers);
        let sent = match &self.sender {
            Sender::H1(sender) => {
                parts.version = Version::HTTP_11;
                parts.uri = Uri::try_from(path).unwrap_or_else(|_| Uri::from_static("/"));
                if let Ok(host) = HeaderValue::from_str(&authority) {
                    parts.headers.insert(header::HOST, host);
                }
                if let Some(protocol) = &upgrade {
                    parts.headers.insert(header::UPGRADE, protocol.clone());
                    parts
                        .headers
                        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
                }
                let mut sender = sender.lock().await;
                match sender.ready().await {
                    Ok(()) => sender.send_request(Request::from_parts(parts, body)).await,
                    Err(e) => Err(e),
                }
            }
            Sender::H2(sender) => {
                parts.version = Version::HTTP_2;
                parts.headers.remove(header::HOST);
                if trailers {
                    parts
                        .headers
                        .insert(header::TE, HeaderValue::from_static("trailers"));
                }
                parts.uri = match Uri::try_from(format!("https://{authority}{path}")) {
                    Ok(uri) => uri,
                    Err(e) => {
                        return text(StatusCode::BAD_REQUEST, format!("agenthold: {e}\n"));
                    }
                };
                sender
                    .clone()
                    .send_request(Request::from_parts(parts, body))
                    .await
            }
        };
        // The secrets went out unless the request was never written.
        if !matches!(&sent, Err(e) if e.is_canceled()) {
            self.proxy.tell_used(&self.caller, &self.dest, used);
        }
        let mut resp = match sent {
            Ok(resp) => resp,
            Err(e) => {
                return text(
                    StatusCode::BAD_GATEWAY,
                    format!("agenthold: the destination did not answer: {e}\n"),
                )
            }
        };
        if let (StatusCode::SWITCHING_PROTOCOLS, Some(client)) = (resp.status(), client_upgrade) {
            let theirs = hyper::upgrade::on(&mut resp);
            let relay = AbortOnDropHandle::new(tokio::spawn(async move {
                if let (Ok(ours), Ok(theirs)) = (client.await, theirs.await) {
                    let _ = tokio::io::copy_bidirectional(
                        &mut TokioIo::new(ours),
                        &mut TokioIo::new(theirs),
                    )
                    .await;
                }
            }));
            self.upgrades
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(relay);
            let (parts, body) = resp.into_parts();
            return Response::from_parts(parts, Body::new(body));
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_headers(&mut parts.headers);
        Response::from_parts(parts, Body::new(body))
    }
}
