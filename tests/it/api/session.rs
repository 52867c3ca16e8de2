//! The web session: signing in and out with the cookie, its life across restarts and its time,
//! and the origin rules for requests that carry it (CSRF): only the server's own pages (or its
//! `server.public_url`) may change things or open a terminal with it; a token needs no Origin.

use crate::common::{expect_error, read_until, send_keys, wait_for, TestServer, Ws, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

/// Signs in with `token` and returns the whole `Set-Cookie` header.
async fn sign_in_cookie(s: &TestServer, token: &str) -> String {
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({ "token": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    r.headers()["set-cookie"].to_str().unwrap().to_string()
}

/// The `name=value` of a `Set-Cookie` header, as the browser sends it back.
fn cookie_pair(cookie: &str) -> String {
    cookie.split(';').next().unwrap().to_string()
}

/// Signs in with `token` and returns the `name=value` of the session cookie.
async fn sign_in(s: &TestServer, token: &str) -> String {
    cookie_pair(&sign_in_cookie(s, token).await)
}

/// Signs the browser holding cookie `pair` out, from a page at `origin`.
async fn sign_out(s: &TestServer, pair: &str, origin: &str) -> reqwest::Response {
    s.http
        .delete(s.url("/api/v1/session"))
        .header("cookie", pair)
        .header("origin", origin)
        .send()
        .await
        .unwrap()
}

/// The status of `GET /api/v1/agents` with the session cookie `pair` and no token.
async fn status_with_cookie(s: &TestServer, pair: &str) -> u16 {
    s.http
        .get(s.url("/api/v1/agents"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Another port on the same host: the same site for `SameSite`, another origin.
const OTHER_PORT: &str = "http://127.0.0.1:28555";

/// A form post as a browser sends it from some page: the cookie and, unless `origin` is `None`,
/// that page's `Origin`; `extra` adds headers.
async fn cookie_post(
    s: &TestServer,
    path: &str,
    pair: &str,
    origin: Option<&str>,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut r = s
        .http
        .post(s.url(path))
        .header("cookie", pair)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("x=1");
    if let Some(o) = origin {
        r = r.header("origin", o);
    }
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

/// The names in the agent's home.
async fn home_names(s: &TestServer, id: &str) -> Vec<String> {
    s.list_dir(id, ".")
        .await
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// A page's `Origin` (or none) and the other headers its browser adds.
type Page = (
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
);

/// Every way a page that is not the server's own could send the cookie: another port of the
/// host, another site, an opaque origin, no Origin at all, a same-site claim.
const NOT_OURS: &[Page] = &[
    (Some(OTHER_PORT), &[]),
    (Some("https://evil.example"), &[]),
    (Some("null"), &[]),
    (None, &[]),
    (None, &[("sec-fetch-site", "same-site")]),
    // Sec-Fetch-Site stands in only for a missing Origin, never against a foreign one.
    (Some(OTHER_PORT), &[("sec-fetch-site", "same-origin")]),
];

/// Asserts that `r` is the 403 a cookie request from another origin gets, saying how to fix it.
async fn refused(r: reqwest::Response, what: &str) {
    let msg = expect_error(r, 403, "forbidden").await;
    assert!(
        msg.contains("server.public_url") && msg.contains("Origin"),
        "{what}: the refusal says how to fix it: {msg}"
    );
}

#[tokio::test]
async fn web_sessions_survive_a_restart_but_not_a_new_admin_token_or_sign_out() {
    let s = TestServer::start().await;
    let kept = sign_in(&s, TOKEN).await;
    let signed_out = sign_in(&s, TOKEN).await;
    // From the web UI's own page (see the same-origin tests below).
    let r = sign_out(&s, &signed_out, &s.base).await;
    assert_eq!(r.status(), 204);

    let s = s.restart_with(|_| {}).await;
    assert_eq!(
        status_with_cookie(&s, &kept).await,
        200,
        "kept across a restart"
    );
    assert_eq!(
        status_with_cookie(&s, &signed_out).await,
        401,
        "a signed-out session stays out after a restart"
    );

    // The operator replaces the admin token: every session of the old one ends, and going
    // back to the old token does not revive them.
    let s = s
        .restart_with(|c| c.server.admin_token = Some("another-admin-token-0123456789".into()))
        .await;
    assert_eq!(status_with_cookie(&s, &kept).await, 401);
    let s = s.restart_with(|_| {}).await;
    assert_eq!(status_with_cookie(&s, &kept).await, 401);
    assert_eq!(status_with_cookie(&s, &sign_in(&s, TOKEN).await).await, 200);
}

#[tokio::test]
async fn a_web_session_ends_after_its_time() {
    let ttl = |c: &mut agenthold::config::Config| c.server.session_ttl = Duration::from_secs(3);
    let s = TestServer::start_with(ttl).await;
    let cookie = sign_in_cookie(&s, TOKEN).await;
    assert!(
        cookie.contains("Max-Age=3;"),
        "the browser is told too: {cookie}"
    );
    let pair = cookie_pair(&cookie);
    assert_eq!(status_with_cookie(&s, &pair).await, 200);
    wait_for("the session to end", || async {
        status_with_cookie(&s, &pair).await == 401
    })
    .await;
    // Nor does a restart bring it back.
    let s = s.restart_with(ttl).await;
    assert_eq!(status_with_cookie(&s, &pair).await, 401);
}

#[tokio::test]
async fn web_session_cookie_signs_in_and_out() {
    let s = TestServer::start().await;
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({"token": "nope"}))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
    let cookie = sign_in_cookie(&s, TOKEN).await;
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie_pair(&cookie);
    assert_eq!(status_with_cookie(&s, &pair).await, 200);
    let r = sign_out(&s, &pair, &s.base).await;
    assert_eq!(r.status(), 204);
    assert_eq!(status_with_cookie(&s, &pair).await, 401);
}

#[tokio::test]
async fn cookie_requests_that_change_things_must_come_from_the_servers_own_origin() {
    let s = TestServer::start().await;
    let id = s.running_agent("csrf").await;
    let pair = sign_in(&s, TOKEN).await;
    let stop = format!("/api/v1/agents/{id}/stop");
    let start = format!("/api/v1/agents/{id}/start");
    let mkdir = format!("/api/v1/agents/{id}/fs/mkdir?path=pwned");

    for (origin, extra) in NOT_OURS {
        let what = format!("{origin:?} {extra:?}");
        refused(cookie_post(&s, &stop, &pair, *origin, extra).await, &what).await;
        refused(cookie_post(&s, &mkdir, &pair, *origin, extra).await, &what).await;
    }
    let r = cookie_post(&s, &stop, &pair, Some(OTHER_PORT), &[]).await;
    let msg = expect_error(r, 403, "forbidden").await;
    assert!(
        msg.contains(OTHER_PORT) && msg.contains(&s.base),
        "names both origins: {msg}"
    );
    assert_eq!(s.state(&id).await, "running", "no stop got through");
    assert!(!home_names(&s, &id).await.contains(&"pwned".to_string()));

    s.stop_sleeping(&id).await;
    for (origin, extra) in NOT_OURS {
        let what = format!("{origin:?} {extra:?}");
        refused(cookie_post(&s, &start, &pair, *origin, extra).await, &what).await;
    }
    assert_eq!(s.state(&id).await, "sleeping", "no start got through");
    // Nor may another page sign the browser out.
    refused(sign_out(&s, &pair, OTHER_PORT).await, "sign-out").await;
    // Reading needs no Origin (another origin's page cannot read the answer).
    assert_eq!(status_with_cookie(&s, &pair).await, 200);

    // The server's own pages go on working: the Origin it is reached at (as the web UI sends
    // it), or a browser's same-origin word when there is no Origin.
    let own = Some(s.base.as_str());
    let r = cookie_post(&s, &start, &pair, own, &[]).await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    s.wait_state(&id, "running").await;
    let r = cookie_post(
        &s,
        &mkdir,
        &pair,
        None,
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    assert!(home_names(&s, &id).await.contains(&"pwned".to_string()));
    let r = cookie_post(&s, &stop, &pair, own, &[]).await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    s.wait_state(&id, "sleeping").await;
}

#[tokio::test]
async fn bearer_requests_need_no_origin() {
    let s = TestServer::start().await;
    let id = s.running_agent("bearer").await;
    let mkdir = format!("/api/v1/agents/{id}/fs/mkdir?path=made");
    // A program sends no Origin; a foreign one does not matter either, since no page can
    // set Authorization on a request to us without a CORS grant this server never gives.
    let r = s.post(&mkdir).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let r = s
        .post(&mkdir)
        .header("origin", OTHER_PORT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // The token wins over a cookie that comes with it.
    let pair = sign_in(&s, TOKEN).await;
    let r = s
        .post(&format!("/api/v1/agents/{id}/stop"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    s.wait_state(&id, "sleeping").await;
}

/// Opens the terminal WebSocket with the session cookie and `origin`.
async fn cookie_terminal(
    s: &TestServer,
    id: &str,
    pair: &str,
    origin: Option<&str>,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal?cols=80&rows=24"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert("cookie", pair.parse().unwrap());
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_websockets_with_the_cookie_must_come_from_the_servers_own_origin() {
    use tokio_tungstenite::tungstenite::Error;
    let s = TestServer::start().await;
    let id = s.running_agent("wsorigin").await;
    let pair = sign_in(&s, TOKEN).await;
    for origin in [
        Some("https://evil.example"),
        Some("null"),
        Some(OTHER_PORT),
        None,
    ] {
        match cookie_terminal(&s, &id, &pair, origin).await {
            Err(Error::Http(resp)) => {
                assert_eq!(resp.status(), 403, "{origin:?}");
                let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
                assert_eq!(body["error"]["code"], "forbidden", "{body}");
                let msg = body["error"]["message"].as_str().unwrap();
                assert!(msg.contains("server.public_url"), "{msg}");
            }
            Err(e) => panic!("{origin:?}: expected a 403, got {e}"),
            Ok(_) => panic!("{origin:?}: a shell was handed to another origin"),
        }
    }
    assert!(
        serde_json::from_value::<Vec<Value>>(
            s.get_json(&format!("/api/v1/agents/{id}/terminals")).await
        )
        .unwrap()
        .is_empty(),
        "no session was started"
    );

    let mut ws = cookie_terminal(&s, &id, &pair, Some(&s.base))
        .await
        .expect("the server's own page gets its terminal");
    send_keys(&mut ws, "echo own-'origin'\r").await;
    read_until(&mut ws, "own-origin").await;
    // And a program with the token, which sends no Origin, as before.
    let mut ws = s.terminal(&id, 80, 24).await;
    send_keys(&mut ws, "echo by-'token'\r").await;
    read_until(&mut ws, "by-token").await;
}

#[tokio::test]
async fn public_url_is_the_only_own_origin_and_https_makes_the_cookie_secure() {
    let s = TestServer::start_with(|c| {
        c.server.public_url =
            agenthold::config::WebOrigin::parse_public_url("https://agents.example.com").ok();
    })
    .await;
    let cookie = sign_in_cookie(&s, TOKEN).await;
    assert!(cookie.contains("; Secure"), "{cookie}");
    let pair = cookie_pair(&cookie);
    let path = "/api/v1/agents";
    let create = |origin: &'static str| {
        s.http
            .post(s.url(path))
            .header("cookie", &pair)
            .header("origin", origin)
            .json(&json!({"name": origin.len().to_string()}))
            .send()
    };
    // The address the request reached is not enough once the operator named the public one.
    refused(create("http://127.0.0.1:1").await.unwrap(), "host").await;
    let r = s
        .http
        .post(s.url(path))
        .header("cookie", &pair)
        .header("origin", &s.base)
        .json(&json!({"name": "by-host"}))
        .send()
        .await
        .unwrap();
    refused(r, "the Host's own origin").await;
    refused(create("http://agents.example.com").await.unwrap(), "http").await;
    let r = create("https://agents.example.com").await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // Signing out clears the cookie with the same attributes.
    let r = sign_out(&s, &pair, "https://agents.example.com").await;
    assert_eq!(r.status(), 204);
    let cleared = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.contains("Max-Age=0") && cleared.contains("Secure"),
        "{cleared}"
    );
}

#[tokio::test]
async fn only_a_trusted_proxy_can_say_the_browser_uses_https() {
    let sign_in_via = |s: &TestServer, proto: Option<&'static str>| {
        let mut r = s
            .http
            .post(s.url("/api/v1/session"))
            .json(&json!({ "token": TOKEN }));
        if let Some(p) = proto {
            r = r.header("x-forwarded-proto", p);
        }
        r.send()
    };
    let set_cookie = |r: reqwest::Response| {
        assert_eq!(r.status(), 204);
        r.headers()["set-cookie"].to_str().unwrap().to_string()
    };

    // Plain http, as on a laptop: no Secure, or the browser would never send the cookie back.
    let s = TestServer::start().await;
    let plain = set_cookie(sign_in_via(&s, None).await.unwrap());
    assert!(!plain.contains("Secure"), "{plain}");
    // Anyone may send the header; without trusted proxies nobody is believed.
    let claimed = set_cookie(sign_in_via(&s, Some("https")).await.unwrap());
    assert!(!claimed.contains("Secure"), "{claimed}");

    let s = s
        .restart_with(|c| c.server.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()])
        .await;
    let proxied = set_cookie(sign_in_via(&s, Some("https")).await.unwrap());
    assert!(proxied.contains("; Secure"), "{proxied}");
    let proxied_http = set_cookie(sign_in_via(&s, Some("http")).await.unwrap());
    assert!(!proxied_http.contains("Secure"), "{proxied_http}");
    // Behind it, the server's own origin is https at the same host.
    let pair = cookie_pair(&proxied);
    let https_own = s.base.replace("http://", "https://");
    let post = |origin: String| {
        s.http
            .post(s.url("/api/v1/agents"))
            .header("cookie", &pair)
            .header("x-forwarded-proto", "https")
            .header("origin", origin)
            .json(&json!({"name": "proxied"}))
            .send()
    };
    refused(post(s.base.clone()).await.unwrap(), "http behind https").await;
    let r = post(https_own).await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}
