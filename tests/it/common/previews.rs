//! What the preview tests share: a client that follows no redirect (each step of an access
//! check is seen), requests to the preview listener under any `Host`, and the hand-off's steps.

use std::net::SocketAddr;
use std::time::Duration;

/// A client of the preview listener and the API that follows no redirect.
pub fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// A request to the preview listener at `listener` for `host` (any `Host` a client likes:
/// `*.localhost` need not resolve here).
pub fn through(
    listener: SocketAddr,
    host: &str,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    browser()
        .request(method, format!("http://{listener}{path}"))
        .header("host", host)
}

/// An answer's `Location`.
pub fn location(r: &reqwest::Response) -> String {
    r.headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("a Location")
        .to_string()
}

/// Serves `app` on a free port of 127.0.0.1: on the fake driver, the sandbox's loopback, so it
/// is what a preview opens.
pub async fn serve_on_loopback(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the app");
    let addr = listener.local_addr().expect("app address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A preview as its creation answered: its id, host (`{port}-{agent}.localhost:{listener
/// port}`) and, for a `token` one, its token.
pub struct Preview {
    pub id: String,
    pub host: String,
    pub token: Option<String>,
}

/// Makes a preview of agent `agent`'s `port` (expecting 201).
pub async fn preview(
    api: &crate::common::client::Client,
    agent: &str,
    port: u16,
    access: &str,
) -> Preview {
    let (status, body) = api
        .call(
            "POST",
            &format!("/api/v1/agents/{agent}/previews"),
            Some(serde_json::json!({"port": port, "access": access})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let url = body["url"].as_str().expect("url");
    let host = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix('/'))
        .unwrap_or_else(|| panic!("an http URL ending in /: {url}"))
        .to_string();
    Preview {
        id: body["id"].as_str().expect("id").to_string(),
        host,
        token: body["token"].as_str().map(str::to_string),
    }
}
