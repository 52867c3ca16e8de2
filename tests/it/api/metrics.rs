//! `GET /metrics`: behind the API's auth or a scraper's own token, counting agents, operations
//! and tunnel connections.

use crate::common::{expect_error, wait_for, TestServer};

/// The value on the line of `GET /metrics` that starts with `line_start` (a name and its
/// labels), as a Prometheus scraper reads it.
async fn metric(s: &TestServer, line_start: &str) -> Option<f64> {
    let text = s.get_text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

#[tokio::test]
async fn metrics_count_agents_and_operations_behind_auth() {
    let s = TestServer::start_with(|c| c.server.metrics_token = Some("scrape-only".into())).await;
    // Behind the API's auth...
    let r = s.http.get(s.url("/metrics")).send().await.unwrap();
    expect_error(r, 401, "unauthorized").await;
    let r = s.get("/metrics").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/openmetrics-text")));
    // ...and the scraper's token opens it and nothing else.
    let scrape = |path: &str| {
        s.http
            .get(s.url(path))
            .header("authorization", "bearer scrape-only")
            .send()
    };
    assert_eq!(scrape("/metrics").await.unwrap().status(), 200);
    let r = scrape("/api/v1/agents").await.unwrap();
    expect_error(r, 401, "unauthorized").await;

    assert_eq!(
        metric(&s, "agenthold_agents{state=\"running\"}").await,
        Some(0.0)
    );
    let id = s.running_agent("counted").await;
    assert_eq!(
        metric(&s, "agenthold_agents{state=\"running\"}").await,
        Some(1.0)
    );
    wait_for("the create is timed", || async {
        metric(
            &s,
            "agenthold_operation_seconds_count{kind=\"create\",outcome=\"ok\"}",
        )
        .await
            == Some(1.0)
    })
    .await;
    assert_eq!(metric(&s, "agenthold_tunnel_connections").await, Some(1.0));
    let r = s
        .delete(&format!("/api/v1/agents/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    wait_for("the destroy is timed", || async {
        metric(
            &s,
            "agenthold_operation_seconds_count{kind=\"destroy\",outcome=\"ok\"}",
        )
        .await
            == Some(1.0)
    })
    .await;
    assert_eq!(
        metric(&s, "agenthold_agents{state=\"running\"}").await,
        Some(0.0)
    );
}
