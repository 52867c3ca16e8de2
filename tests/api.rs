//! The agent API over real HTTP: auth, validation of hostile input, errors, OpenAPI, SSE.

mod common;
#[path = "common/sse.rs"]
mod sse;

use common::{expect_error, TestServer, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

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

#[tokio::test]
async fn bad_bodies_are_400_with_a_message() {
    let s = TestServer::start().await;
    let cases: Vec<(&str, String)> = vec![
        ("not json", "{".into()),
        ("wrong type", r#"{"name": 7}"#.into()),
        ("unknown field", r#"{"name": "a", "colour": "red"}"#.into()),
        ("missing name", "{}".into()),
        ("empty name", r#"{"name": ""}"#.into()),
        ("huge name", json!({"name": "a".repeat(10_000)}).to_string()),
        ("not dns-safe", r#"{"name": "Bad_Name"}"#.into()),
        ("negative cpus", r#"{"name": "a", "cpus": -1}"#.into()),
        ("too many cpus", r#"{"name": "a", "cpus": 1000}"#.into()),
        ("negative memory", r#"{"name": "a", "memoryMb": -5}"#.into()),
        (
            "too much memory",
            r#"{"name": "a", "memoryMb": 99999999}"#.into(),
        ),
        (
            "idle too long",
            r#"{"name": "a", "idleMinutes": 99999999}"#.into(),
        ),
        (
            "image with spaces",
            r#"{"name": "a", "image": "debian bookworm"}"#.into(),
        ),
    ];
    for (what, body) in cases {
        let r = s
            .post("/api/v1/agents")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{what}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid", "{what}: {body}");
    }
    // The field a form should mark.
    let r = s
        .post("/api/v1/agents")
        .json(&json!({"name": "ok", "cpus": 99}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "cpus");
    // Still healthy, and nothing was created.
    let agents: Vec<Value> = s
        .get("/api/v1/agents")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(agents.is_empty());
}

#[tokio::test]
async fn unknown_agents_and_routes_are_404() {
    let s = TestServer::start().await;
    for (method, path) in [
        ("GET", "/api/v1/agents/nosuchagent"),
        ("POST", "/api/v1/agents/nosuchagent/start"),
        ("POST", "/api/v1/agents/nosuchagent/stop"),
        ("POST", "/api/v1/agents/nosuchagent/rebuild"),
        ("DELETE", "/api/v1/agents/nosuchagent"),
        ("GET", "/api/v1/agents/nosuchagent/fs/list?path=."),
        ("GET", "/api/v1/nothing-here"),
    ] {
        let r = s
            .http
            .request(method.parse().unwrap(), s.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        expect_error(r, 404, "not_found").await;
    }
}

#[tokio::test]
async fn names_are_unique_and_defaults_apply() {
    let s = TestServer::start().await;
    let r = s
        .post("/api/v1/agents")
        .json(&json!({"name": "builder"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["state"], "creating");
    assert_eq!(a["image"], "debian:bookworm-slim");
    assert_eq!(a["cpus"], 2.0);
    assert_eq!(a["memoryMb"], 4096);
    assert_eq!(a["idleMinutes"], 15);
    assert_eq!(a["needsRebuild"], false);
    let id = a["id"].as_str().unwrap();
    assert!(id
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    let r = s
        .post("/api/v1/agents")
        .json(&json!({"name": "builder"}))
        .send()
        .await
        .unwrap();
    expect_error(r, 409, "conflict").await;
}

#[tokio::test]
async fn changing_image_or_resources_needs_a_rebuild() {
    let s = TestServer::start().await;
    let a: Value = s
        .post("/api/v1/agents")
        .json(&json!({"name": "p"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = a["id"].as_str().unwrap();
    let r = s
        .patch(&format!("/api/v1/agents/{id}"))
        .json(&json!({"name": "q", "idleMinutes": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["name"], "q");
    assert_eq!(a["idleMinutes"], 5);
    assert_eq!(a["needsRebuild"], false);
    let a: Value = s
        .patch(&format!("/api/v1/agents/{id}"))
        .json(&json!({"memoryMb": 2048}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(a["memoryMb"], 2048);
    assert_eq!(a["needsRebuild"], true);
    let r = s
        .patch(&format!("/api/v1/agents/{id}"))
        .json(&json!({"cpus": 0}))
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "invalid").await;
}

#[tokio::test]
async fn openapi_describes_every_route() {
    let s = TestServer::start().await;
    let doc: Value = s
        .get("/api/v1/openapi.json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/health",
        "/api/v1/agents",
        "/api/v1/agents/{id}",
        "/api/v1/agents/{id}/start",
        "/api/v1/agents/{id}/stop",
        "/api/v1/agents/{id}/rebuild",
        "/api/v1/agents/{id}/exec",
        "/api/v1/agents/{id}/terminal",
        "/api/v1/agents/{id}/terminals",
        "/api/v1/agents/{id}/terminals/{sid}",
        "/api/v1/agents/{id}/fs/list",
        "/api/v1/agents/{id}/fs/read",
        "/api/v1/agents/{id}/fs/write",
        "/api/v1/agents/{id}/fs/mkdir",
        "/api/v1/agents/{id}/fs/remove",
        "/api/v1/events",
        "/api/v1/limits",
    ] {
        assert!(paths.contains_key(p), "{p} is not described");
    }
    assert!(doc["components"]["schemas"]["Agent"].is_object());
    assert!(doc["components"]["schemas"]["TerminalSession"].is_object());
    let terminal = &paths["/api/v1/agents/{id}/terminal"]["get"]["description"];
    assert!(
        terminal
            .as_str()
            .unwrap_or_default()
            .contains("\"type\":\"redraw\""),
        "the terminal route documents its protocol: {terminal}"
    );
}

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

/// Signs in with `token` and returns the `name=value` of the session cookie.
async fn sign_in(s: &TestServer, token: &str) -> String {
    let cookie = sign_in_cookie(s, token).await;
    cookie.split(';').next().unwrap().to_string()
}

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

#[tokio::test]
async fn web_sessions_survive_a_restart_but_not_a_new_admin_token_or_sign_out() {
    let s = TestServer::start().await;
    let kept = sign_in(&s, TOKEN).await;
    let signed_out = sign_in(&s, TOKEN).await;
    let r = s
        .http
        .delete(s.url("/api/v1/session"))
        .header("cookie", &signed_out)
        .send()
        .await
        .unwrap();
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
    let pair = cookie.split(';').next().unwrap().to_string();
    assert_eq!(status_with_cookie(&s, &pair).await, 200);
    common::wait_for("the session to end", || async {
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
    let pair = cookie.split(';').next().unwrap().to_string();
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = s
        .http
        .delete(s.url("/api/v1/session"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = s
        .http
        .get(s.url("/api/v1/agents"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn limits_tell_clients_what_the_server_allows() {
    let s = TestServer::start_with(|c| c.server.max_file_mb = 7).await;
    let l: Value = s
        .get("/api/v1/limits")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(l["maxFileMb"], 7);
    assert_eq!(l["maxCpus"], 8.0);
    assert_eq!(l["defaultImage"], "debian:bookworm-slim");
    let r = s.http.get(s.url("/api/v1/limits")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_every_state_change_and_the_deletion() {
    use futures::StreamExt;
    let s = TestServer::start().await;
    let r = s.get("/api/v1/events").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = r.bytes_stream();
    let id = s.running_agent("watched").await;
    let r = s
        .delete(&format!("/api/v1/agents/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let mut text = String::new();
    let mut states = Vec::new();
    let deadline = tokio::time::Instant::now() + common::DEADLINE;
    while !text.contains("event: deleted") {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("no deleted event")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    for block in text.split("\n\n") {
        if block.contains("event: agent") {
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let a: Value = serde_json::from_str(data).unwrap();
            if a["id"] == id.as_str() {
                states.push(a["state"].as_str().unwrap().to_string());
            }
        }
    }
    for want in ["creating", "starting", "running", "destroying"] {
        assert!(
            states.iter().any(|s| s == want),
            "{want} missing from {states:?}"
        );
    }
    assert!(text.contains(&format!("{{\"id\":\"{id}\"}}")), "{text}");
}

#[tokio::test]
async fn the_web_ui_is_served_and_api_paths_never_fall_back_to_it() {
    let s = TestServer::start().await;
    let r = s.http.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let r = s.http.get(s.url("/agents/some-page")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = s.get("/api/v1/not-a-route").send().await.unwrap();
    expect_error(r, 404, "not_found").await;
}

/// The fake driver pretends to pull images under `pull.invalid/` (see `driver::fake`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pulls_are_announced_as_pull_events_and_shown_on_the_agent() {
    let s = TestServer::start().await;
    let mut events = sse::Events::open(&s).await;
    let image = "pull.invalid/tools:1";
    let r = s
        .post("/api/v1/agents")
        .json(&json!({"name": "pulling", "image": image}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    assert!(
        created.get("pull").is_some(),
        "pull is always present: {created}"
    );

    let first = events
        .about_until(&id, |kind, d| {
            kind == "pull" && d["percent"].as_u64() > Some(0)
        })
        .await;
    let agent = s.agent(&id).await;
    assert_eq!(agent["state"], "creating");
    assert_eq!(agent["pull"]["status"], "pulling", "{agent}");
    assert_eq!(agent["pull"]["image"], image);
    let rest = events
        .about_until(&id, |kind, d| kind == "agent" && d["state"] == "running")
        .await;
    let all: Vec<_> = first.into_iter().chain(rest).collect();
    let pulls = sse::pulls(&all);
    let keys: Vec<&str> = pulls[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = vec![
        "bytesDone",
        "bytesTotal",
        "error",
        "id",
        "image",
        "layersDone",
        "layersTotal",
        "percent",
        "status",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(pulls[0]["status"], "pulling");
    assert_eq!(pulls[0]["percent"], 0);
    let done = pulls.last().unwrap();
    assert_eq!(done["status"], "done");
    assert_eq!(done["percent"], 100);
    assert_eq!(done["layersDone"], 3);
    assert_eq!(done["bytesDone"], done["bytesTotal"]);
    assert!(pulls.len() >= 3, "{pulls:?}");
    for pair in pulls.windows(2) {
        assert!(
            pair[1]["percent"].as_u64() >= pair[0]["percent"].as_u64(),
            "{pulls:?}"
        );
    }
    assert_eq!(s.agent(&id).await["pull"], Value::Null);

    // The image is here now: another agent made from it pulls nothing.
    let r = s
        .post("/api/v1/agents")
        .json(&json!({"name": "second", "image": image}))
        .send()
        .await
        .unwrap();
    let second: Value = r.json().await.unwrap();
    let second = second["id"].as_str().unwrap().to_string();
    let seen = events
        .about_until(&second, |kind, d| {
            kind == "agent" && d["state"] == "running"
        })
        .await;
    assert!(sse::pulls(&seen).is_empty(), "{seen:?}");

    // A missing image: `error` with the reason, and a `failed` pull event carrying it.
    let missing = "pull.invalid/missing:1";
    let r = s
        .post("/api/v1/agents")
        .json(&json!({"name": "missing", "image": missing}))
        .send()
        .await
        .unwrap();
    let broken: Value = r.json().await.unwrap();
    let broken = broken["id"].as_str().unwrap().to_string();
    let seen = events
        .about_until(&broken, |kind, d| kind == "agent" && d["state"] == "error")
        .await;
    let pulls = sse::pulls(&seen);
    let failed = pulls.last().unwrap();
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["image"], missing);
    let agent = s.agent(&broken).await;
    let error = agent["error"].as_str().unwrap();
    assert!(error.contains(missing), "{error}");
    assert!(error.contains(failed["error"].as_str().unwrap()), "{error}");
    assert!(error.contains("no such image or tag"), "{error}");
}

/// `GET /metrics` as a Prometheus scraper sees it, with a `label` filter on one line.
async fn metric(s: &TestServer, line_start: &str) -> Option<f64> {
    let text = s
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
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
    common::wait_for("the create is timed", || async {
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
    common::wait_for("the destroy is timed", || async {
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
