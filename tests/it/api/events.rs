//! `GET /api/v1/events`: every state change of an agent, its deletion, and the progress of its
//! image pull, as server-sent events.

use crate::common::{sse, TestServer, DEADLINE};
use serde_json::Value;

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
    let deadline = tokio::time::Instant::now() + DEADLINE;
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

/// The fake driver pretends to pull images under `pull.invalid/` (see `driver::fake`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pulls_are_announced_as_pull_events_and_shown_on_the_agent() {
    let s = TestServer::start().await;
    let mut events = sse::Events::open(&s).await;
    let image = "pull.invalid/tools:1";
    let created = s.created_agent(("pulling", image)).await;
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
    let second = s.create_agent(("second", image)).await;
    let seen = events
        .about_until(&second, |kind, d| {
            kind == "agent" && d["state"] == "running"
        })
        .await;
    assert!(sse::pulls(&seen).is_empty(), "{seen:?}");

    // A missing image: `error` with the reason, and a `failed` pull event carrying it.
    let missing = "pull.invalid/missing:1";
    let broken = s.create_agent(("missing", missing)).await;
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
