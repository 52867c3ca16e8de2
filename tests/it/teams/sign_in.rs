//! Signing in with a name and password: right, wrong, unknown, and too often.

use serde_json::{json, Value};

use super::{sign_in, user};
use crate::common::{expect_error, TestServer};

async fn try_password(s: &TestServer, name: &str, password: &str) -> reqwest::Response {
    s.http
        .post(s.url("/api/v1/session"))
        .json(&json!({ "name": name, "password": password }))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_user_signs_in_with_the_right_password_only() {
    let s = TestServer::start().await;
    let id = user(&s, "ann", "member", Some("correct horse")).await;
    let cookie = sign_in(&s, "ann", "correct horse").await;
    let r = s
        .http
        .get(s.url("/api/v1/me"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let me: Value = r.json().await.unwrap();
    assert_eq!(me["user"]["id"], id.as_str());
    assert_eq!(me["user"]["role"], "member");
    assert!(me.get("token").is_none(), "{me}");
    assert!(!me["scopes"].as_array().unwrap().contains(&json!("admin")));

    let wrong = expect_error(
        try_password(&s, "ann", "wrong horse").await,
        401,
        "unauthorized",
    )
    .await;
    let unknown = expect_error(
        try_password(&s, "nobody", "correct horse").await,
        401,
        "unauthorized",
    )
    .await;
    assert_eq!(wrong, unknown, "the answer does not tell which names exist");
    // Too short to be anyone's password: refused the same way.
    expect_error(try_password(&s, "ann", "short").await, 401, "unauthorized").await;
    // A user without a password cannot sign in with one.
    user(&s, "bot", "member", None).await;
    expect_error(
        try_password(&s, "bot", "anything-at-all").await,
        401,
        "unauthorized",
    )
    .await;
    // Both ways at once, or neither: a bad request.
    for body in [
        json!({ "token": s.token, "name": "ann", "password": "correct horse" }),
        json!({ "name": "ann" }),
        json!({}),
    ] {
        let r = s
            .http
            .post(s.url("/api/v1/session"))
            .json(&body)
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "invalid").await;
    }
}

#[tokio::test]
async fn an_address_gets_ten_password_tries_a_minute_then_429_with_retry_after() {
    let s = TestServer::start().await;
    user(&s, "ann", "member", Some("correct horse")).await;
    // Tries 1 to 8 wrong, 9 right: right or wrong, each counts.
    for _ in 0..8 {
        expect_error(
            try_password(&s, "ann", "wrong horse").await,
            401,
            "unauthorized",
        )
        .await;
    }
    sign_in(&s, "ann", "correct horse").await;
    expect_error(
        try_password(&s, "nobody", "wrong horse").await,
        401,
        "unauthorized",
    )
    .await;
    let r = try_password(&s, "ann", "correct horse").await;
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    expect_error(r, 429, "too_many_requests").await;
    // The admin token still signs in: the limit is on guessing passwords.
    let r = s
        .http
        .post(s.url("/api/v1/session"))
        .json(&json!({ "token": s.token }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

/// A password set by an admin (a reset, often because the old one leaked) signs the user out
/// of every web session; the new password signs in.
#[tokio::test]
async fn a_new_password_signs_the_user_out_everywhere() {
    let s = TestServer::start().await;
    let id = user(&s, "ann", "member", Some("correct horse")).await;
    let first = sign_in(&s, "ann", "correct horse").await;
    let me_with = |cookie: String| {
        let s = &s;
        async move {
            s.http
                .get(s.url("/api/v1/me"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(me_with(first.clone()).await, 200);
    // A new role keeps the session (its power follows the role at each request).
    let (status, v) = s
        .call(
            "PATCH",
            &format!("/api/v1/users/{id}"),
            Some(json!({ "role": "admin" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(me_with(first.clone()).await, 200);
    let (status, v) = s
        .call(
            "PATCH",
            &format!("/api/v1/users/{id}"),
            Some(json!({ "password": "battery staple" })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(me_with(first).await, 401, "the old session ended");
    let again = sign_in(&s, "ann", "battery staple").await;
    assert_eq!(me_with(again).await, 200);
}

/// Behind a trusted proxy (here loopback, where the test's requests come from) each client
/// named by `X-Forwarded-For` has its own tries; from an untrusted peer the header is ignored,
/// so a guesser cannot buy fresh tries by writing one.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_tries() {
    let s = TestServer::start_with(|c| {
        c.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    user(&s, "ann", "member", Some("correct horse")).await;
    let from = |client: &'static str| {
        let s = &s;
        async move {
            s.http
                .post(s.url("/api/v1/session"))
                .header("x-forwarded-for", client)
                .json(&json!({ "name": "ann", "password": "wrong horse" }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    for _ in 0..10 {
        assert_eq!(from("203.0.113.7").await, 401);
    }
    assert_eq!(
        from("203.0.113.7").await,
        429,
        "that client's tries are used up"
    );
    // The client wrote an address of its own before the proxy's: only the proxy's counts.
    assert_eq!(from("198.51.100.1, 203.0.113.7").await, 429);
    assert_eq!(from("203.0.113.8").await, 401, "another client has its own");

    let direct = TestServer::start().await;
    user(&direct, "ann", "member", Some("correct horse")).await;
    for i in 0..11 {
        let r = direct
            .http
            .post(direct.url("/api/v1/session"))
            .header("x-forwarded-for", format!("192.0.2.{i}"))
            .json(&json!({ "name": "ann", "password": "wrong horse" }))
            .send()
            .await
            .unwrap();
        let want = if i < 10 { 401 } else { 429 };
        assert_eq!(
            r.status().as_u16(),
            want,
            "try {i}: the header of an untrusted peer is ignored"
        );
    }
}
