//! Hands one request to the app over a `port.connect` stream: HTTP/1.1 with streamed bodies
//! both ways, and WebSocket (any `Upgrade`) connections spliced once the app agrees. What
//! agenthold added to the request (its cookies, the token, the admin token) is taken out, and
//! `X-Forwarded-*` put in.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use super::pages;
use crate::activity::UseGuard;
use crate::tunnel::registry::LinkStream;
use tokio::sync::OwnedSemaphorePermit;

/// What to do with one request besides passing it on.
pub struct Forward {
    pub peer: SocketAddr,
    /// `X-Forwarded-Proto`.
    pub scheme: &'static str,
    /// The `Host` the browser used, for `X-Forwarded-Host`.
    pub host: String,
    /// Whether the client's `X-Forwarded-For` is believed (it came through a trusted proxy).
    pub trust_forwarded: bool,
    /// The `Authorization` header carried agenthold's credential, not the app's.
    pub strip_authorization: bool,
    /// A `token` query parameter was the preview's token.
    pub strip_token_query: bool,
    /// A grant cookie to set on the answer.
    pub set_cookie: Option<HeaderValue>,
    /// Ends the connection when the preview is deleted.
    pub closer: CancellationToken,
    /// The preview expires then.
    pub deadline: Option<tokio::time::Instant>,
    /// The agent is in use, and one of its previews' streams taken, while this lives.
    pub hold: (UseGuard, OwnedSemaphorePermit),
}

/// Cookies of agenthold's that the app never sees: the preview's grant, and the API's session
/// should a browser have one for this host.
const OUR_COOKIES: [&str; 2] = [
    super::super::grant::COOKIE,
    crate::credentials::SESSION_COOKIE,
];

/// Headers that belong to one hop (RFC 9110 7.6.1), dropped both ways; an upgrade keeps
/// `Connection` and `Upgrade`, which are what it asks for.
fn hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .filter(|n| !(keep_upgrade && n == header::UPGRADE))
        // A client naming `Host` there would send the app a request for no host at all.
        .filter(|n| n != header::HOST)
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in [
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
    ] {
        headers.remove(n);
    }
    if !keep_upgrade {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The `Cookie` headers without agenthold's.
fn without_our_cookies(headers: &mut HeaderMap) {
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
        .filter(|kv| {
            let name = kv.split_once('=').map_or(*kv, |(k, _)| k);
            !OUR_COOKIES.contains(&name)
        })
        .map(str::to_string)
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, v);
        }
    }
}

/// The path and query to send on, without a `token` parameter when it was ours.
pub fn path_and_query(uri: &Uri, strip_token: bool) -> String {
    let path = uri.path();
    match uri.query() {
        None => path.to_string(),
        Some(q) if !strip_token => format!("{path}?{q}"),
        Some(q) => {
            let kept: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| k != "token")
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            if kept.is_empty() {
                path.to_string()
            } else {
                let q = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(kept)
                    .finish();
                format!("{path}?{q}")
            }
        }
    }
}

fn forwarded_headers(headers: &mut HeaderMap, f: &Forward) {
    let peer = f.peer.ip().to_canonical().to_string();
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(earlier) if f.trust_forwarded => format!("{earlier}, {peer}"),
        _ => peer,
    };
    let proto = match headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
    {
        Some(p) if f.trust_forwarded && (p == "http" || p == "https") => p.to_string(),
        _ => f.scheme.to_string(),
    };
    for (name, value) in [
        ("x-forwarded-for", xff),
        ("x-forwarded-proto", proto),
        ("x-forwarded-host", f.host.clone()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}

/// Waits for the preview to be deleted or to expire.
async fn ended(closer: CancellationToken, deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => {
            tokio::select! {
                () = closer.cancelled() => {}
                () = tokio::time::sleep_until(d) => {}
            }
        }
        None => closer.cancelled().await,
    }
}

/// Sends `req` to the app on `stream` and answers with what it says.
pub async fn forward(mut req: Request, stream: LinkStream, f: Forward) -> Response {
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers;
    hop_by_hop(&mut headers, upgrade);
    without_our_cookies(&mut headers);
    if f.strip_authorization {
        headers.remove(header::AUTHORIZATION);
    }
    forwarded_headers(&mut headers, &f);
    let uri = path_and_query(&parts.uri, f.strip_token_query);
    let mut out = match hyper::Request::builder()
        .method(parts.method)
        .uri(uri)
        .version(Version::HTTP_11)
        .body(body)
    {
        Ok(r) => r,
        Err(e) => return pages::bad_gateway(&format!("the request could not be passed on: {e}")),
    };
    *out.headers_mut() = headers;

    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(h) => h,
        Err(e) => return pages::bad_gateway(&format!("the connection to the app failed: {e}")),
    };
    let (closer, deadline) = (f.closer.clone(), f.deadline);
    // The app's connection lives until it is done or the preview ends; ending it makes the
    // body being streamed fail, so the browser sees the answer cut, never complete.
    tokio::spawn(async move {
        tokio::select! {
            _ = conn.with_upgrades() => {}
            () = ended(closer, deadline) => {}
        }
    });
    let mut resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => {
            return pages::bad_gateway(&format!(
                "the app closed the connection without an answer: {e}"
            ))
        }
    };

    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            return pages::bad_gateway("the app switched protocols without being asked to");
        };
        let app_upgrade = hyper::upgrade::on(&mut resp);
        let (parts, _) = resp.into_parts();
        let Forward {
            closer,
            deadline,
            hold,
            ..
        } = f;
        tokio::spawn(async move {
            let (Ok(client), Ok(app)) = tokio::join!(client_upgrade, app_upgrade) else {
                return;
            };
            let (mut client, mut app) = (TokioIo::new(client), TokioIo::new(app));
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut app) => {}
                () = ended(closer, deadline) => {}
            }
            drop(hold);
        });
        return Response::from_parts(parts, Body::empty());
    }

    let (mut parts, body) = resp.into_parts();
    hop_by_hop(&mut parts.headers, false);
    if let Some(cookie) = f.set_cookie {
        parts.headers.append(header::SET_COOKIE, cookie);
    }
    let body = Held {
        body,
        _hold: f.hold,
    };
    Response::from_parts(parts, Body::new(body)).into_response()
}

/// The app's body, holding the agent in use until it is all sent.
struct Held {
    body: Incoming,
    _hold: (UseGuard, OwnedSemaphorePermit),
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_parameter_alone_is_taken_out() {
        let u: Uri = "/a/b?x=1&token=s3cret&y=two%20words".parse().expect("uri");
        assert_eq!(path_and_query(&u, true), "/a/b?x=1&y=two+words");
        assert_eq!(
            path_and_query(&u, false),
            "/a/b?x=1&token=s3cret&y=two%20words"
        );
        let only: Uri = "/?token=s3cret".parse().expect("uri");
        assert_eq!(path_and_query(&only, true), "/");
    }

    #[test]
    fn our_cookies_are_taken_out_and_the_apps_kept() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; agenthold_preview=x.1.y"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("agenthold_session=s; b=2"),
        );
        without_our_cookies(&mut h);
        assert_eq!(h.get_all(header::COOKIE).iter().count(), 1);
        assert_eq!(h.get(header::COOKIE).expect("kept"), "a=1; b=2");
        let mut only_ours = HeaderMap::new();
        only_ours.insert(
            header::COOKIE,
            HeaderValue::from_static("agenthold_preview=x"),
        );
        without_our_cookies(&mut only_ours);
        assert!(only_ours.get(header::COOKIE).is_none());
    }

    #[test]
    fn hop_by_hop_headers_go_but_an_upgrade_keeps_what_it_asks_for() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("Upgrade, x-private"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        let mut plain = h.clone();
        hop_by_hop(&mut h, true);
        assert!(h.contains_key(header::UPGRADE) && h.contains_key(header::CONNECTION));
        assert!(!h.contains_key("x-private") && !h.contains_key("keep-alive"));
        hop_by_hop(&mut plain, false);
        assert!(plain.is_empty(), "{plain:?}");
        let mut host = HeaderMap::new();
        host.insert(header::CONNECTION, HeaderValue::from_static("host"));
        host.insert(header::HOST, HeaderValue::from_static("3000-a.localhost"));
        hop_by_hop(&mut host, false);
        assert_eq!(
            host.get(header::HOST).map(|v| v.as_bytes()),
            Some(&b"3000-a.localhost"[..])
        );
    }
}
