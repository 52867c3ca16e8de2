//! Who may use the API: the health check with no token, the admin token and its scheme, and
//! requests from the sandboxes' own network refused whatever they carry.

use crate::common::{expect_error, TestServer, TOKEN};
use serde_json::Value;

#[tokio::test]
async fn health_needs_no_token_and_names_the_driver() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/api/v1/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["driver"], "fake");
    assert!(body["version"].as_str().is_some());
}

#[tokio::test]
async fn missing_or_wrong_token_is_401() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/api/v1/agents")).send().await.unwrap();
    expect_error(r, 401, "unauthorized").await;
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("authorization", "Basic Zm9vOmJhcg==")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
    assert_eq!(s.get("/api/v1/agents").send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn the_bearer_scheme_may_be_written_in_any_case() {
    let s = TestServer::start().await;
    // RFC 9110 11.1: the scheme is case-insensitive; some clients send it in lower case.
    for scheme in ["bearer", "BEARER", "bEaReR"] {
        let r = s
            .http
            .get(s.url("/api/v1/agents"))
            .header("authorization", format!("{scheme} {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
    }
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("authorization", format!("bearer wrong-{TOKEN}"))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;
}

#[tokio::test]
async fn requests_from_the_sandbox_pool_are_forbidden_whatever_the_token() {
    let s = TestServer::start_with(|c| {
        c.sandbox.docker.network_pool = "127.0.0.0/8".parse().unwrap();
    })
    .await;
    for path in ["/api/v1/health", "/api/v1/agents", "/api/v1/openapi.json"] {
        let r = s.get(path).send().await.unwrap();
        expect_error(r, 403, "forbidden").await;
    }
}
