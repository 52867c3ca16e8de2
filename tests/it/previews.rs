//! Previews on the fake driver, whose sandbox's loopback is the host's: an app served by the
//! test opens through its preview's host, with each access's rules, the sign-in hand-off, and
//! what hostile clients try (docs/api.md, "Previews"). The same through real containers is in
//! `docker::previews`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::Router;
use serde_json::{json, Value};

use crate::common::{TestServer, TOKEN};

/// An app as an agent would serve one: it answers with what it was sent, streams, and echoes
/// on a WebSocket.
async fn app() -> SocketAddr {
    async fn seen(req: Request) -> axum::Json<Value> {
        let headers: serde_json::Map<String, Value> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or("?"))))
            .collect();
        let uri = req.uri().to_string();
        let method = req.method().to_string();
        let body = axum::body::to_bytes(req.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        axum::Json(json!({"uri": uri, "method": method, "headers": headers, "bodyLen": body.len()}))
    }
    async fn forever() -> impl IntoResponse {
        let ticks = futures::stream::unfold(0u64, |n| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Some((Ok::<_, std::io::Error>(format!("tick {n}\n")), n + 1))
        });
        axum::body::Body::from_stream(ticks)
    }
    async fn echo(ws: WebSocketUpgrade) -> impl IntoResponse {
        ws.on_upgrade(|mut socket| async move {
            while let Some(Ok(m)) = socket.recv().await {
                if matches!(m, Message::Text(_) | Message::Binary(_))
                    && socket.send(m).await.is_err()
                {
                    break;
                }
            }
        })
    }
    let router = Router::new()
        .route("/forever", get(forever))
        .route("/ws", get(echo))
        .fallback(any(seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the app");
    let addr = listener.local_addr().expect("app address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// A client of the preview listener that follows no redirect.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

struct Preview {
    id: String,
    host: String,
    token: Option<String>,
}

async fn preview(s: &TestServer, agent: &str, port: u16, access: &str) -> Preview {
    let (status, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{agent}/previews"),
            Some(json!({"port": port, "access": access})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let url = body["url"].as_str().expect("url");
    let host = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix('/'))
        .expect("an http URL")
        .to_string();
    Preview {
        id: body["id"].as_str().expect("id").to_string(),
        host,
        token: body["token"].as_str().map(str::to_string),
    }
}

/// A request to the preview listener for `host` (any `Host` a client likes).
fn to(s: &TestServer, host: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    browser()
        .request(method, format!("http://{}{path}", s.previews_addr))
        .header("host", host)
}

#[tokio::test]
async fn a_public_preview_opens_the_app_with_the_forwarded_headers_and_not_our_cookies() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("web").await;
    let p = preview(&s, &agent, app.port(), "public").await;
    assert_eq!(
        p.host,
        format!("{}-web.localhost:{}", app.port(), s.previews_addr.port())
    );
    let r = to(&s, &p.host, reqwest::Method::POST, "/some/path?x=1")
        .header(
            "cookie",
            "app=kept; agenthold_session=secret; agenthold_preview=x",
        )
        .body(vec![7u8; 300_000])
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let seen: Value = r.json().await.expect("json");
    assert_eq!(seen["uri"], "/some/path?x=1");
    assert_eq!(seen["bodyLen"], 300_000);
    let h = &seen["headers"];
    assert_eq!(h["cookie"], "app=kept");
    assert_eq!(h["host"], p.host.as_str());
    assert_eq!(h["x-forwarded-host"], p.host.as_str());
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert!(
        p.token.is_none() && !p.id.is_empty(),
        "a public preview has no token"
    );
    let _ = TOKEN;
}
