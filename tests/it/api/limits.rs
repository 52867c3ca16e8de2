//! `GET /api/v1/limits`: what the server allows, and what its defaults make of a new agent.

use crate::common::TestServer;
use serde_json::{json, Value};

#[tokio::test]
async fn limits_tell_clients_what_the_server_allows() {
    let s = TestServer::start_with(|c| c.server.max_file_mb = 7).await;
    let l = s.get_json("/api/v1/limits").await;
    assert_eq!(l["maxFileMb"], 7);
    assert_eq!(l["maxCpus"], 8.0);
    assert_eq!(l["defaultImage"], "debian:bookworm-slim");
    assert_eq!(l["defaultDiskMb"], 10240);
    assert_eq!(l["maxDiskMb"], 102400);
    assert_eq!(l["tmpMb"], 1024);
    assert_eq!(
        l["rootfsMb"],
        Value::Null,
        "the fake driver limits no layer"
    );
    let r = s.http.get(s.url("/api/v1/limits")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn without_a_default_disk_new_agents_have_no_limit_unless_they_ask() {
    let s = TestServer::start_with(|c| c.sandbox.default_disk_mb = 0).await;
    let l = s.get_json("/api/v1/limits").await;
    assert_eq!(l["defaultDiskMb"], Value::Null);
    assert_eq!(l["maxDiskMb"], 102400);
    let a = s.created_agent("free").await;
    assert_eq!(a["diskMb"], Value::Null);
    let b = s
        .created_agent(json!({"name": "sized", "diskMb": 512}))
        .await;
    assert_eq!(b["diskMb"], 512);
    // A home made without a limit keeps it that way.
    let r = s
        .patch_agent(a["id"].as_str().unwrap(), json!({"diskMb": 1024}))
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "diskMb", "{body}");
}
