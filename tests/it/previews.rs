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
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite;

use crate::common::previews::{browser, location, preview, serve_on_loopback, through, Preview};
use crate::common::{wait_for, wait_for_value, TestServer, DEADLINE, TOKEN};

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
    serve_on_loopback(router).await
}

/// A request to the preview listener for `host` (any `Host` a client likes).
fn to(s: &TestServer, host: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    through(s.previews_addr, host, method, path)
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
    assert!(p.token.is_none(), "a public preview has no token");
}

/// The `Set-Cookie` of an answer, as `name=value` for a `Cookie` header.
fn cookie_of(r: &reqwest::Response) -> String {
    let set = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a Set-Cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Lax"),
        "{set}"
    );
    assert!(!set.contains("Domain="), "host-only: {set}");
    set.split(';').next().expect("name=value").to_string()
}

#[tokio::test]
async fn a_token_preview_needs_its_token_and_the_app_never_sees_it() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("tok").await;
    let p = preview(&s, &agent, app.port(), "token").await;
    let token = p.token.clone().expect("a token preview's token, once");
    let listed = s
        .get_json(&format!("/api/v1/agents/{agent}/previews"))
        .await;
    assert!(listed[0].get("token").is_none(), "never listed: {listed}");

    for (what, req) in [
        (
            "no token",
            to(&s, &p.host, reqwest::Method::GET, "/headers"),
        ),
        (
            "a wrong token",
            to(&s, &p.host, reqwest::Method::GET, "/headers?token=nope"),
        ),
        (
            "a wrong bearer",
            to(&s, &p.host, reqwest::Method::GET, "/headers").bearer_auth("nope"),
        ),
    ] {
        let r = req.send().await.expect("request");
        assert_eq!(r.status(), 401, "{what}");
    }

    // A program: the bearer opens it and is taken out.
    let r = to(&s, &p.host, reqwest::Method::GET, "/headers")
        .bearer_auth(&token)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let seen: Value = r.json().await.expect("json");
    assert!(seen["headers"].get("authorization").is_none(), "{seen}");

    // A browser: `?token=` once, then the cookie; the address loses the token.
    let r = to(
        &s,
        &p.host,
        reqwest::Method::GET,
        &format!("/headers?a=1&token={token}"),
    )
    .send()
    .await
    .expect("request");
    assert_eq!(r.status(), 302);
    assert_eq!(location(&r), "/headers?a=1");
    let cookie = cookie_of(&r);
    let r = to(&s, &p.host, reqwest::Method::GET, "/headers?a=1")
        .header("cookie", format!("{cookie}; theirs=1"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let seen: Value = r.json().await.expect("json");
    assert_eq!(seen["headers"]["cookie"], "theirs=1");
    assert_eq!(seen["uri"], "/headers?a=1");

    // Another method with the token in the query: passed on without it, with the cookie set.
    let r = to(
        &s,
        &p.host,
        reqwest::Method::POST,
        &format!("/form?token={token}&b=2"),
    )
    .body("x")
    .send()
    .await
    .expect("request");
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("set-cookie").is_some());
    let seen: Value = r.json().await.expect("json");
    assert_eq!(seen["uri"], "/form?b=2");

    // The admin token opens any preview, and is taken out too.
    let r = to(&s, &p.host, reqwest::Method::GET, "/headers")
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_private_preview_signs_a_browser_in_through_the_api_and_its_cookie_opens_nothing_else() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("priv").await;
    let p = preview(&s, &agent, app.port(), "private").await;
    let other = preview(&s, &agent, app.port() + 1, "private").await;

    // A program without the admin token: 401; a page: sent to the API to sign in.
    let r = to(&s, &p.host, reqwest::Method::GET, "/headers")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 401);
    let r = to(&s, &p.host, reqwest::Method::GET, "/deep/page?q=1")
        .header("accept", "text/html")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 302);
    let open = location(&r);
    let api_origin = format!("http://localhost:{}", s.api_addr.port());
    let path = open
        .strip_prefix(&api_origin)
        .unwrap_or_else(|| panic!("to the API's origin: {open}"));
    assert!(
        path.starts_with(&format!("/api/v1/previews/{}/open?next=", p.id)),
        "{path}"
    );

    // Not signed in: the API sends the browser to the web UI, which comes back.
    let r = browser().get(s.url(path)).send().await.expect("request");
    assert_eq!(r.status(), 302);
    assert!(
        location(&r).starts_with("/?next=%2Fapi%2Fv1%2Fpreviews%2F"),
        "{}",
        location(&r)
    );

    // Signed in: back to the preview's host with a code.
    let session = sign_in(&s).await;
    let r = browser()
        .get(s.url(path))
        .header("cookie", &session)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 302);
    let sent_to = location(&r);
    let auth_path = sent_to
        .strip_prefix(&format!("http://{}", p.host))
        .unwrap_or_else(|| panic!("to the preview's host: {sent_to}"));
    assert!(
        auth_path.starts_with("/.agenthold/auth?code="),
        "{auth_path}"
    );
    let r = to(&s, &p.host, reqwest::Method::GET, auth_path)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 302);
    assert_eq!(location(&r), "/deep/page?q=1");
    let cookie = cookie_of(&r);
    // A code is spent once.
    let again = to(&s, &p.host, reqwest::Method::GET, auth_path)
        .send()
        .await
        .expect("request");
    assert_eq!(again.status(), 403);

    let r = to(&s, &p.host, reqwest::Method::GET, "/headers")
        .header("cookie", &cookie)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let seen: Value = r.json().await.expect("json");
    assert!(seen["headers"].get("cookie").is_none(), "{seen}");

    // That cookie opens neither another preview nor the API.
    let r = to(&s, &other.host, reqwest::Method::GET, "/headers")
        .header("cookie", &cookie)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 401);
    let r = browser()
        .get(s.url("/api/v1/agents"))
        .header(
            "cookie",
            cookie.replace("agenthold_preview", "agenthold_session"),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 401);

    // A code for one preview does not open another.
    let code_path = hand_off(&s, &other, "/").await;
    let r = to(&s, &p.host, reqwest::Method::GET, &code_path)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 403);

    // The hand-off lands on the preview's own paths only.
    let to_auth = hand_off(&s, &p, "//evil.example/").await;
    let r = to(&s, &p.host, reqwest::Method::GET, &to_auth)
        .send()
        .await
        .expect("request");
    assert_eq!(location(&r), "/");
}

/// The API's side of the hand-off for a program with the admin token: the path on the
/// preview's host, with its one-time code, that it sends the browser to.
async fn hand_off(s: &TestServer, p: &Preview, next: &str) -> String {
    let r = browser()
        .get(s.url(&format!(
            "/api/v1/previews/{}/open?next={}",
            p.id,
            crate::common::client::query(next)
        )))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 302);
    location(&r)
        .split_once(&p.host)
        .map(|(_, path)| path.to_string())
        .unwrap_or_else(|| panic!("to {}: {}", p.host, location(&r)))
}

/// Signs in as the web UI does: the session cookie, as `name=value`.
async fn sign_in(s: &TestServer) -> String {
    let r = browser()
        .post(s.url("/api/v1/session"))
        .json(&json!({"token": TOKEN}))
        .send()
        .await
        .expect("sign in");
    assert_eq!(r.status(), 204);
    let set = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie");
    set.split(';').next().expect("name=value").to_string()
}

#[tokio::test]
async fn a_deleted_preview_answers_410_at_once_and_its_open_connections_end() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("del").await;
    let p = preview(&s, &agent, app.port(), "public").await;

    // A stream and a WebSocket, open through the preview.
    let r = to(&s, &p.host, reqwest::Method::GET, "/forever")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let first = body.next().await.expect("a tick").expect("bytes");
    assert!(first.starts_with(b"tick"));
    let mut ws = websocket(&s, &p.host).await;
    ws.send(tungstenite::Message::text("hello"))
        .await
        .expect("send");
    let echoed = ws.next().await.expect("an echo").expect("message");
    assert_eq!(echoed.into_text().expect("text").as_str(), "hello");

    let (status, _) = s
        .call(
            "DELETE",
            &format!("/api/v1/agents/{agent}/previews/{}", p.id),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let r = to(&s, &p.host, reqwest::Method::GET, "/")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 410);
    // The stream ends with an error (never as if it were complete), the WebSocket closes.
    let ended = tokio::time::timeout(DEADLINE, async {
        loop {
            match body.next().await {
                Some(Ok(_)) => continue,
                Some(Err(_)) => return true,
                None => return false,
            }
        }
    })
    .await
    .expect("the stream ended");
    assert!(ended, "the cut stream must end with an error");
    let closed = tokio::time::timeout(DEADLINE, async {
        loop {
            match ws.next().await {
                Some(Ok(m)) if !m.is_close() => continue,
                _ => return,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the WebSocket closed");
    let (status, _) = s
        .call(
            "DELETE",
            &format!("/api/v1/agents/{agent}/previews/{}", p.id),
            None,
        )
        .await;
    assert_eq!(status, 404, "deleted once");

    // A new preview of the port works, with a new id.
    let again = preview(&s, &agent, app.port(), "public").await;
    assert_ne!(again.id, p.id);
    let r = to(&s, &again.host, reqwest::Method::GET, "/x")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn websocket(s: &TestServer, host: &str) -> Ws {
    use tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{}/ws", s.previews_addr)
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("host", host.parse().expect("host header"));
    let (ws, resp) = tokio_tungstenite::connect_async(req)
        .await
        .expect("upgrade");
    assert_eq!(resp.status(), 101);
    ws
}

#[tokio::test]
async fn websockets_echo_through_a_preview() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("wsecho").await;
    let p = preview(&s, &agent, app.port(), "public").await;
    let mut ws = websocket(&s, &p.host).await;
    for i in 0..50 {
        ws.send(tungstenite::Message::text(format!("m{i}")))
            .await
            .expect("send");
        let m = ws.next().await.expect("echo").expect("message");
        assert_eq!(m.into_text().expect("text").as_str(), format!("m{i}"));
    }
    let big = vec![5u8; 1 << 20];
    ws.send(tungstenite::Message::binary(big.clone()))
        .await
        .expect("send");
    let m = ws.next().await.expect("echo").expect("message");
    assert_eq!(m.into_data().as_ref(), big.as_slice());
}

#[tokio::test]
async fn an_expired_preview_answers_410_and_is_not_listed() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("exp").await;
    let (status, made) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{agent}/previews"),
            Some(json!({"port": app.port(), "access": "public", "expiresInMinutes": 5})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    assert!(made["expiresAt"].is_string(), "{made}");
    let p = preview_host(&made);
    let r = to(&s, &p, reqwest::Method::GET, "/")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    // Its time comes (staged in the database: minutes are too long for a test).
    let db = s.dir.path().join("agenthold.db");
    let id = made["id"].as_str().expect("id").to_string();
    tokio::task::spawn_blocking(move || {
        let c = rusqlite::Connection::open(db).expect("open the database");
        c.execute(
            "UPDATE previews SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE id = ?1",
            [id],
        )
        .expect("update");
    })
    .await
    .expect("join");
    let r = to(&s, &p, reqwest::Method::GET, "/")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 410);
    let listed = s
        .get_json(&format!("/api/v1/agents/{agent}/previews"))
        .await;
    assert_eq!(listed, json!([]));
}

fn preview_host(made: &Value) -> String {
    made["url"]
        .as_str()
        .and_then(|u| u.strip_prefix("http://"))
        .and_then(|u| u.strip_suffix('/'))
        .expect("an http URL")
        .to_string()
}

#[tokio::test]
async fn hosts_that_name_no_preview_get_404() {
    let s = TestServer::start().await;
    let app = app().await;
    let a = s.running_agent("alpha").await;
    s.running_agent("beta").await;
    preview(&s, &a, app.port(), "public").await;
    let port = app.port();
    let lp = s.previews_addr.port();
    for host in [
        format!("{port}-beta.localhost:{lp}"),
        format!("{}-alpha.localhost:{lp}", port + 1),
        format!("{port}-gamma.localhost:{lp}"),
        format!("127.0.0.1:{lp}"),
        format!("[::1]:{lp}"),
        format!("localhost:{lp}"),
        format!("0-alpha.localhost:{lp}"),
        format!("65536-alpha.localhost:{lp}"),
        format!("0{port}-alpha.localhost:{lp}"),
        format!("{port}-alpha.example.com:{lp}"),
        format!("x.{port}-alpha.localhost:{lp}"),
        "<script>alert(1)</script>".to_string(),
    ] {
        let r = to(&s, &host, reqwest::Method::GET, "/")
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 404, "{host}");
        let page = r.text().await.expect("page");
        assert!(!page.contains("<script>alert"), "escaped: {page}");
    }
    // The right one answers (in any case, with or without the port).
    let r = to(
        &s,
        &format!("{port}-ALPHA.LocalHost:{lp}"),
        reqwest::Method::GET,
        "/",
    )
    .send()
    .await
    .expect("request");
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn bad_preview_requests_get_clear_errors() {
    let s = TestServer::start().await;
    let agent = s.create_agent("bad").await;
    let path = format!("/api/v1/agents/{agent}/previews");
    for (body, status, needle) in [
        (json!({"port": 0}), 400, "port"),
        (json!({"port": 70000}), 400, "port"),
        (json!({"port": -1}), 400, "port"),
        (json!({}), 400, "port"),
        (json!({"port": 80, "access": "everyone"}), 400, "access"),
        (json!({"port": 80, "host": "10.0.0.1"}), 400, "host"),
        (
            json!({"port": 80, "expiresInMinutes": 0}),
            400,
            "expiresInMinutes",
        ),
        (
            json!({"port": 80, "expiresInMinutes": 525601}),
            400,
            "expiresInMinutes",
        ),
    ] {
        let (got, answer) = s.call("POST", &path, Some(body.clone())).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer.to_string().contains(needle), "{body}: {answer}");
    }
    let (got, _) = s
        .call(
            "POST",
            "/api/v1/agents/nosuchagent1/previews",
            Some(json!({"port": 80})),
        )
        .await;
    assert_eq!(got, 404);
    let (got, _) = s
        .call("GET", "/api/v1/agents/nosuchagent1/ports", None)
        .await;
    assert_eq!(got, 404);
    let (got, _) = s
        .call("DELETE", &format!("{path}/nosuchpreview"), None)
        .await;
    assert_eq!(got, 404);
    // A whole number written with a zero fraction is the same number.
    let (got, whole) = s
        .call(
            "POST",
            &path,
            Some(json!({"port": 120.0, "expiresInMinutes": 5.0})),
        )
        .await;
    assert_eq!(got, 201, "{whole}");
    let (got, first) = s.call("POST", &path, Some(json!({"port": 80}))).await;
    let (long, _) = s
        .call(
            "GET",
            &format!(
                "/api/v1/previews/{}/open?next=/{}",
                first["id"].as_str().unwrap_or_default(),
                "a".repeat(2048)
            ),
            None,
        )
        .await;
    assert_eq!(long, 400, "a next over 2048 characters");
    assert_eq!(got, 201, "{first}");
    assert_eq!(first["access"], "private", "private by default");
    let (got, again) = s.call("POST", &path, Some(json!({"port": 80}))).await;
    assert_eq!(got, 409);
    assert!(
        again
            .to_string()
            .contains(first["id"].as_str().expect("id")),
        "{again}"
    );
}

#[tokio::test]
async fn ten_thousand_creations_stop_at_max_per_agent() {
    let s = TestServer::start_with(|c| c.server.previews.max_per_agent = 20).await;
    let agent = s.create_agent("many").await;
    let path = format!("/api/v1/agents/{agent}/previews");
    let made = std::sync::atomic::AtomicU32::new(0);
    let refused = std::sync::atomic::AtomicU32::new(0);
    futures::stream::iter(1..=10_000u32)
        .for_each_concurrent(32, |port| {
            let (s, path, made, refused) = (&s, &path, &made, &refused);
            async move {
                let (status, body) = s
                    .call(
                        "POST",
                        path,
                        Some(json!({"port": port, "access": "public"})),
                    )
                    .await;
                match status {
                    201 => made.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    409 => refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    other => panic!("port {port}: {other} {body}"),
                };
            }
        })
        .await;
    assert_eq!(made.into_inner(), 20);
    assert_eq!(refused.into_inner(), 9_980);
    let listed = s.get_json(&path).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(20));
}

#[tokio::test]
async fn a_port_nobody_listens_on_gets_502_with_the_listening_ports() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("empty").await;
    // A port just freed: nothing listens there.
    let free = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let p = preview(&s, &agent, free, "public").await;
    let r = to(&s, &p.host, reqwest::Method::GET, "/")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 502);
    let page = r.text().await.expect("page");
    assert!(
        page.contains(&format!("Nothing listens on port {free}")),
        "{page}"
    );
    assert!(
        page.contains(&format!("<code>{}</code>", app.port())),
        "lists the app's: {page}"
    );

    let ports = s.get_json(&format!("/api/v1/agents/{agent}/ports")).await;
    let listed = ports
        .as_array()
        .expect("a list")
        .iter()
        .find(|p| p["port"] == app.port())
        .unwrap_or_else(|| panic!("the app's port is listed: {ports}"));
    assert_eq!(listed["address"], "127.0.0.1");
}

#[tokio::test]
async fn a_sleeping_agent_is_woken_by_its_preview() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.sleeping_agent("sleepy").await;
    assert_eq!(
        s.get_json(&format!("/api/v1/agents/{agent}/ports")).await,
        json!([]),
        "asleep: nothing listens, and the listing does not wake it"
    );
    assert_eq!(s.state(&agent).await, "sleeping");
    let p = preview(&s, &agent, app.port(), "public").await;
    // A page: "Starting…", reloading itself, while the agent starts.
    let r = to(&s, &p.host, reqwest::Method::GET, "/")
        .header("accept", "text/html,*/*")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let page = r.text().await.expect("page");
    assert!(
        page.contains("Starting the sandbox") && page.contains("http-equiv=\"refresh\""),
        "{page}"
    );
    wait_for("the page loads once the agent runs", || async {
        to(&s, &p.host, reqwest::Method::GET, "/")
            .header("accept", "text/html")
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert_eq!(s.state(&agent).await, "running");

    // Anything else waits for the wake and gets the app's answer.
    s.stop_sleeping(&agent).await;
    let r = to(&s, &p.host, reqwest::Method::GET, "/api/data")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let seen: Value = r.json().await.expect("json");
    assert_eq!(seen["uri"], "/api/data");
}

/// A paused agent is thawed by a request through its preview, which gets the app's answer
/// straight away (no "Starting" page: nothing starts).
#[tokio::test]
async fn a_paused_agent_is_thawed_by_its_preview() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("dozing").await;
    let p = preview(&s, &agent, app.port(), "public").await;
    s.pause(&agent).await;
    let r = to(&s, &p.host, reqwest::Method::GET, "/thawed")
        .header("accept", "text/html,*/*")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    let seen: Value = r.json().await.expect("json");
    assert_eq!(seen["uri"], "/thawed");
    assert_eq!(s.state(&agent).await, "running");
}

#[tokio::test]
async fn preview_traffic_is_use_of_the_agent() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("used").await;
    let p = preview(&s, &agent, app.port(), "public").await;
    let before = s.agent(&agent).await["lastActivityAt"].clone();
    let r = to(&s, &p.host, reqwest::Method::GET, "/forever")
        .send()
        .await
        .expect("request");
    let mut body = r.bytes_stream();
    body.next().await.expect("a tick").expect("bytes");
    let after = wait_for_value("the activity moves", || async {
        let now = s.agent(&agent).await["lastActivityAt"].clone();
        (now != before).then_some(now)
    })
    .await;
    assert!(after.as_str() > before.as_str(), "{before} → {after}");
    assert!(
        s.lc.activity().view(&agent).busy,
        "a stream in progress keeps the agent busy"
    );
    drop(body);
    wait_for("the agent is idle once the stream is gone", || async {
        !s.lc.activity().view(&agent).busy
    })
    .await;
}

#[tokio::test]
async fn the_preview_listener_cuts_slow_headers_and_refuses_a_huge_host() {
    let s = TestServer::start_with(|c| c.server.header_timeout = Duration::from_secs(1)).await;
    let app = app().await;
    let agent = s.running_agent("slow").await;
    let p = preview(&s, &agent, app.port(), "public").await;

    let mut slow = tokio::net::TcpStream::connect(s.previews_addr)
        .await
        .expect("connect");
    slow.write_all(b"GET / HTTP/1.1\r\nHost: ")
        .await
        .expect("write");
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(DEADLINE, slow.read(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "a slow client is cut at server.header_timeout"
    );

    let mut huge = tokio::net::TcpStream::connect(s.previews_addr)
        .await
        .expect("connect");
    let host = "a".repeat(1 << 20);
    let _ = huge
        .write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, huge.read_to_end(&mut answer)).await;
    let head = String::from_utf8_lossy(&answer[..answer.len().min(64)]).to_string();
    assert!(
        answer.is_empty() || head.starts_with("HTTP/1.1 431") || head.starts_with("HTTP/1.1 400"),
        "a 1 MB Host is refused: {head:?}"
    );
    // The listener serves on.
    let r = to(&s, &p.host, reqwest::Method::GET, "/")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn what_is_ours_never_reaches_the_app_whatever_let_the_request_in() {
    let s = TestServer::start().await;
    let app = app().await;
    let agent = s.running_agent("ours").await;
    // A public preview: the admin token a program sends along is still taken out.
    let public = preview(&s, &agent, app.port(), "public").await;
    let r = to(&s, &public.host, reqwest::Method::GET, "/headers")
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request");
    let seen: Value = r.json().await.expect("json");
    assert!(seen["headers"].get("authorization").is_none(), "{seen}");
    // agenthold's paths on a preview host are never the app's.
    let r = to(&s, &public.host, reqwest::Method::GET, "/.agenthold/other")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 404);
    // Someone else's bearer is the app's business.
    let r = to(&s, &public.host, reqwest::Method::GET, "/headers")
        .bearer_auth("the-apps-own")
        .send()
        .await
        .expect("request");
    let seen: Value = r.json().await.expect("json");
    assert_eq!(seen["headers"]["authorization"], "Bearer the-apps-own");

    // A token preview opened by its cookie, with the shared link again: the token is taken out
    // of the address (a redirect), and never to another origin.
    let other_app = self::app().await;
    let tok = preview(&s, &agent, other_app.port(), "token").await;
    let token = tok.token.clone().expect("token");
    let r = to(
        &s,
        &tok.host,
        reqwest::Method::GET,
        &format!("/?token={token}"),
    )
    .send()
    .await
    .expect("request");
    let cookie = cookie_of(&r);
    let r = to(
        &s,
        &tok.host,
        reqwest::Method::GET,
        &format!("/x?token={token}"),
    )
    .header("cookie", &cookie)
    .send()
    .await
    .expect("request");
    assert_eq!(r.status(), 302);
    assert_eq!(location(&r), "/x");
    let r = to(
        &s,
        &tok.host,
        reqwest::Method::GET,
        &format!("//evil.example/?token={token}"),
    )
    .send()
    .await
    .expect("request");
    assert_eq!(r.status(), 302);
    assert_eq!(location(&r), "/", "never to another origin");
    // A cookie planted for the parent domain by a neighbour does not shadow the real one.
    let r = to(&s, &tok.host, reqwest::Method::GET, "/headers")
        .header("cookie", format!("agenthold_preview=planted.1.x; {cookie}"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn previews_leave_the_api_its_share_of_the_agents_streams() {
    // 34 streams an agent: previews may hold 2 of them, the API keeps 32.
    let s = TestServer::start_with(|c| c.sandbox.max_streams_per_agent = 34).await;
    let app = app().await;
    let agent = s.running_agent("capped").await;
    let p = preview(&s, &agent, app.port(), "public").await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let r = to(&s, &p.host, reqwest::Method::GET, "/forever")
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    let r = to(&s, &p.host, reqwest::Method::GET, "/")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 503, "the previews' share is taken");
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    // The API still reaches the sandbox.
    assert_eq!(s.exec_ok(&agent, &["echo", "in"]).await, "in\n");
    drop(held);
    wait_for("a place frees once a stream ends", || async {
        to(&s, &p.host, reqwest::Method::GET, "/")
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
}

/// An API token: the scopes and agents it names (as the admin).
async fn api_token(s: &TestServer, scopes: &[&str], agents: Option<&[&str]>) -> String {
    let mut body = serde_json::json!({"name": "t", "scopes": scopes});
    if let Some(a) = agents {
        body["agents"] = serde_json::json!(a);
    }
    let (status, made) = s.call("POST", "/api/v1/tokens", Some(body)).await;
    assert_eq!(status, 201, "{made}");
    made["token"].as_str().expect("token").to_string()
}

#[tokio::test]
async fn an_api_token_opens_a_private_preview_only_for_an_agent_it_may_use() {
    let s = TestServer::start().await;
    let app = app().await;
    let mine = s.running_agent("mine").await;
    let theirs = s.running_agent("theirs").await;
    let p = preview(&s, &theirs, app.port(), "private").await;
    let tok = preview(&s, &theirs, app.port() + 1, "token").await;
    let user = api_token(&s, &["agents:read", "agents:use"], None).await;
    let read_only = api_token(&s, &["agents:read"], None).await;
    let elsewhere = api_token(&s, &["agents:read", "agents:use"], Some(&[&mine])).await;

    let r = to(&s, &p.host, reqwest::Method::GET, "/headers")
        .bearer_auth(&user)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200, "a token that may use the agent opens it");
    let seen: Value = r.json().await.expect("json");
    assert!(seen["headers"].get("authorization").is_none(), "{seen}");
    for (who, t) in [("read only", &read_only), ("another agent's", &elsewhere)] {
        for host in [&p.host, &tok.host] {
            let r = to(&s, host, reqwest::Method::GET, "/headers")
                .bearer_auth(t)
                .send()
                .await
                .expect("request");
            assert!(
                r.status() == 401 || r.status() == 403,
                "{who} token on {host}: {}",
                r.status()
            );
        }
    }
}
