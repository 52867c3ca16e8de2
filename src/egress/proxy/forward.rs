//! HTTP forward requests (`GET http://host/…`, and origin-form ones the firewall redirected):
//! where a request wants to go, and passing it on over a connection of its own with the
//! hop-by-hop headers removed.

use axum::body::Body;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::secrets::Swapped;
use super::{text, until_cut, Ended, Proxy};
use crate::egress::counted::Counted;
use crate::egress::dial::Destination;
use crate::egress::open::UpstreamSlot;

impl Proxy {
    /// Sends the request on to the destination over its own connection and streams the answer
    /// back; the connection closes once the answer is through.
    pub(super) async fn forward(
        &self,
        swapped: Swapped,
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
        let (caller, dest) = (ended.caller.clone(), ended.dest.clone());
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let reason = until_cut(conn, &slot, &closing).await;
            drop(slot);
            ended.report(reason);
        });
        let Swapped { req, used } = swapped;
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
        let sent = sender.send_request(Request::from_parts(parts, body)).await;
        // The secrets went out unless the request was never written.
        if !matches!(&sent, Err(e) if e.is_canceled()) {
            self.tell_used(&caller, &dest, used);
        }
        match sent {
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
}

/// Where a request wants to go: the `CONNECT` target, an absolute URI's host, or the `Host`
/// header of an origin-form request.
pub(super) fn destination(
    req: &Request<Incoming>,
    default_port: u16,
) -> Result<Destination, String> {
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
pub(super) fn strip_hop_headers(headers: &mut HeaderMap) {
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
