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
