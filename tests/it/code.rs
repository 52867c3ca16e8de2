//! `POST …/code` and `/code/contexts` on the fake driver: what a run may ask for, decided before
//! any kernel starts. Runs in a real kernel are `docker::code`'s (the dev image has ipykernel).

use serde_json::{json, Value};

use crate::common::TestServer;

async fn run(s: &TestServer, id: &str, body: Value) -> (u16, Value) {
    s.call("POST", &format!("/api/v1/agents/{id}/code"), Some(body))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_huge_or_hostile_runs_are_refused_with_the_field_named() {
    let s = TestServer::start().await;
    let id = s.running_agent("coder").await;
    let cases = [
        (json!({"code": "1", "language": "r"}), 400, "language"),
        (json!({"code": "x".repeat(1024 * 1024 + 1)}), 413, "code"),
        (json!({"code": "1", "context": "../../etc"}), 400, "context"),
        (
            json!({"code": "1", "context": "a".repeat(100_000)}),
            400,
            "context",
        ),
        (json!({"code": "1", "timeoutMs": 0}), 400, "timeoutMs"),
    ];
    for (body, status, field) in cases {
        let (st, answer) = run(&s, &id, body.clone()).await;
        assert_eq!(st, status, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    for body in [
        json!({}),
        json!({"code": 1}),
        json!({"code": "1", "shell": true}),
    ] {
        let (st, answer) = run(&s, &id, body).await;
        assert_eq!(st, 400, "{answer}");
    }
    // A context nobody made: the sandbox's answer, before any kernel starts.
    let (st, answer) = run(&s, &id, json!({"code": "1", "context": "abcdefghjkmnpqrs"})).await;
    assert_eq!(st, 404, "{answer}");
    let base = format!("/api/v1/agents/{id}/code/contexts");
    let (st, answer) = s
        .call("POST", &format!("{base}/abcdefghjkmnpqrs/restart"), None)
        .await;
    assert_eq!(st, 404, "{answer}");
    let (st, answer) = s
        .call("DELETE", &format!("{base}/not%20an%20id"), None)
        .await;
    assert_eq!(
        (st, &answer["error"]["field"]),
        (400, &json!("cid")),
        "{answer}"
    );
    let (st, list) = s.call("GET", &base, None).await;
    assert_eq!((st, list), (200, json!([])));
    let (st, _) = run(&s, "nope", json!({"code": "1"})).await;
    assert_eq!(st, 404);
}
