//! One wake rule (docs/api.md, "Waking"): every operation that needs the sandbox wakes a
//! sleeping agent and waits for it, at most `server.wake_timeout` (then `503` with
//! `Retry-After`); listings the server can answer itself never wake it. A start that finds the
//! agent stopping waits for the stop to end. The same for files and exec on Docker is in
//! `docker::lifecycle`.

use serde_json::{json, Value};

use crate::common::client::query as q;
use crate::common::process::ServerConfig;
use crate::common::{read_until, send_keys, TestServer};

/// Every operation that needs the sandbox, by name, with the status it answers on an awake
/// agent with a file `note.txt` and a process tagged `old` that ended with the last sleep.
const NEEDS_THE_SANDBOX: &[(&str, u16)] = &[
    ("exec", 200),
    ("process start", 201),
    ("process get", 200),
    ("process output", 200),
    ("process wait", 200),
    // `old` was lost with the sleep: the sandbox's own answer, not a refusal to wake.
    ("process stdin", 400),
    ("process signal", 400),
    ("process remove", 204),
    ("fs list", 200),
    ("fs read", 200),
    ("fs write", 204),
    ("fs mkdir", 204),
    ("fs remove", 204),
];

/// The status, the body and the agent's state as the answer's `X-Agenthold-Agent-State` says it.
async fn run(s: &TestServer, id: &str, op: &str) -> (u16, String, Option<String>) {
    let agent = format!("/api/v1/agents/{id}");
    let r = match op {
        "exec" => s
            .post(&format!("{agent}/exec"))
            .json(&json!({"command": ["echo", "up"]})),
        "process start" => s
            .post(&format!("{agent}/processes"))
            .json(&json!({"command": ["true"]})),
        "process get" => s.get(&format!("{agent}/processes/old")),
        "process output" => s.get(&format!("{agent}/processes/old/output")),
        "process wait" => s.get(&format!("{agent}/processes/old/wait?timeoutMs=1000")),
        "process stdin" => s.post(&format!("{agent}/processes/old/stdin")).body("x"),
        "process signal" => s
            .post(&format!("{agent}/processes/old/signal"))
            .json(&json!({"signal": "TERM"})),
        "process remove" => s.delete(&format!("{agent}/processes/old")),
        "fs list" => s.get(&format!("{agent}/fs/list")),
        "fs read" => s.get(&format!("{agent}/fs/read?path=note.txt")),
        "fs write" => s
            .put(&format!("{agent}/fs/write?path=other.txt"))
            .body("written asleep"),
        "fs mkdir" => s.post(&format!("{agent}/fs/mkdir?path={}", q("a/b"))),
        "fs remove" => s.delete(&format!("{agent}/fs/remove?path=note.txt")),
        other => panic!("no operation {other}"),
    };
    let r = r.send().await.expect("the request failed");
    let status = r.status().as_u16();
    let state = r
        .headers()
        .get("x-agenthold-agent-state")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, r.text().await.unwrap_or_default(), state)
}

/// Makes what the operations act on, then puts the agent to sleep.
async fn prepare(s: &TestServer, id: &str) {
    s.write_tree(id, &[("note.txt", "hello")]).await;
    let (st, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": ["sleep", "1000"], "tag": "old", "stdin": true})),
        )
        .await;
    if st != 201 && st != 409 {
        panic!("starting the process: {st} {body}");
    }
    s.stop_sleeping(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_that_needs_the_sandbox_wakes_a_sleeping_agent() {
    let s = TestServer::start().await;
    let id = s.running_agent("sleepy").await;
    for &(op, want) in NEEDS_THE_SANDBOX {
        prepare(&s, &id).await;
        assert_eq!(s.state(&id).await, "sleeping", "before {op}");
        let (status, body, told) = run(&s, &id, op).await;
        assert_eq!(status, want, "{op} on a sleeping agent: {body}");
        assert_eq!(s.state(&id).await, "running", "after {op}");
        // The answer says so itself, so that a client's handle follows without asking.
        assert_eq!(told.as_deref(), Some("running"), "{op}'s answer");
        if op == "exec" {
            assert_eq!(
                serde_json::from_str::<Value>(&body).unwrap()["stdout"],
                "up\n"
            );
        }
        if op == "fs read" {
            assert_eq!(body, "hello");
        }
    }
    // The terminal too.
    s.stop_sleeping(&id).await;
    let mut ws = s.terminal(&id, 80, 24).await;
    send_keys(&mut ws, "echo woken-'by'-a-terminal\r").await;
    read_until(&mut ws, "woken-by-a-terminal").await;
    assert_eq!(s.state(&id).await, "running", "after a terminal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_never_wake_an_agent() {
    let s = TestServer::start().await;
    let id = s.running_agent("lister").await;
    let (st, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": ["sleep", "1000"], "tag": "server"})),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    let (st, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": ["sh", "-c", "exit 3"], "tag": "done"})),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    let (st, body) = s
        .call(
            "GET",
            &format!("/api/v1/agents/{id}/processes/done/wait"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{body}");
    s.stop_sleeping(&id).await;

    for _ in 0..3 {
        let (st, list) = s
            .call("GET", &format!("/api/v1/agents/{id}/processes"), None)
            .await;
        assert_eq!(st, 200, "{list}");
        let list = list.as_array().expect("a list");
        let state_of = |tag: &str| {
            list.iter()
                .find(|p| p["tag"] == tag)
                .map(|p| p["state"].clone())
        };
        // What the server last heard: the running one was lost with the sleep.
        assert_eq!(state_of("server"), Some(json!("lost")), "{list:?}");
        assert_eq!(state_of("done"), Some(json!("exited")), "{list:?}");
        let (st, terminals) = s
            .call("GET", &format!("/api/v1/agents/{id}/terminals"), None)
            .await;
        assert_eq!((st, terminals), (200, json!([])));
        // Kernels end with the sleep: there are no code contexts to list.
        let (st, contexts) = s
            .call("GET", &format!("/api/v1/agents/{id}/code/contexts"), None)
            .await;
        assert_eq!((st, contexts), (200, json!([])));
        assert_eq!(s.state(&id).await, "sleeping");
    }
    // A listing's answer says the agent sleeps still; an agent that is not there has no state.
    let r = s
        .get(&format!("/api/v1/agents/{id}/processes"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-agenthold-agent-state"], "sleeping");
    let r = s
        .get("/api/v1/agents/nosuchagent0/processes")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers().get("x-agenthold-agent-state").is_none());
    // A removed process is no longer listed while the agent sleeps.
    let (st, body) = s
        .call(
            "DELETE",
            &format!("/api/v1/agents/{id}/processes/done"),
            None,
        )
        .await;
    assert_eq!(st, 204, "{body}");
    s.stop_sleeping(&id).await;
    let (_, list) = s
        .call("GET", &format!("/api/v1/agents/{id}/processes"), None)
        .await;
    let tags: Vec<&Value> = list.as_array().unwrap().iter().map(|p| &p["tag"]).collect();
    assert_eq!(tags, [&json!("server")], "{list}");
    assert_eq!(s.state(&id).await, "sleeping");
    // An unknown agent is still 404.
    let (st, _) = s.call("GET", "/api/v1/agents/nope/processes", None).await;
    assert_eq!(st, 404);
}

/// A server on the fake driver whose every driver call takes 1.5 s (a process of its own: the
/// delay is read from its environment), with `server.wake_timeout` set to `wake_timeout`.
async fn slow_server(dir: &std::path::Path, wake_timeout: &str) -> ServerConfig {
    let server = ServerConfig::write(
        dir,
        "127.0.0.1",
        "  driver: fake\n",
        crate::common::DEADLINE,
    );
    let yaml = std::fs::read_to_string(&server.path).unwrap();
    let yaml = yaml.replacen(
        "server:\n",
        &format!("server:\n  wake_timeout: {wake_timeout}\n"),
        1,
    );
    std::fs::write(&server.path, yaml).unwrap();
    server
}

const SLOW: &[(&str, &str)] = &[("AGENTHOLD_FAKE_OP_DELAY_MS", "1500")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_that_takes_longer_than_wake_timeout_answers_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let server = slow_server(dir.path(), "1s").await;
    let _p = server.start_with_env(SLOW).await;
    let id = server.create_agent("slow").await;
    server.settles_to(&id, "running", "after create").await;
    server.stop_sleeping(&id).await;
    let r = server
        .post(&format!("/api/v1/agents/{id}/exec"))
        .json(&json!({"command": ["true"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("wake_timeout"), "{msg}");
    // The start goes on: the agent wakes all the same, and the next try succeeds.
    server.settles_to(&id, "running", "after the wake").await;
    server.wait_exec_works(&id, "after the wake").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_of_a_stopping_agent_waits_for_the_stop_then_starts() {
    let dir = tempfile::tempdir().unwrap();
    let server = slow_server(dir.path(), "60s").await;
    let _p = server.start_with_env(SLOW).await;
    let id = server.create_agent("restless").await;
    server.settles_to(&id, "running", "after create").await;
    let (st, body) = server
        .call("POST", &format!("/api/v1/agents/{id}/stop"), None)
        .await;
    assert_eq!((st, &body["state"]), (202, &json!("stopping")), "{body}");
    // The stop takes 1.5 s: the start comes while it is under way, waits, then starts.
    let (st, body) = server
        .call("POST", &format!("/api/v1/agents/{id}/start"), None)
        .await;
    assert_eq!(st, 202, "{body}");
    assert_eq!(body["state"], "starting", "{body}");
    server.settles_to(&id, "running", "after the start").await;
    // An exec on a stopping agent waits for the stop too, then wakes it.
    let (st, body) = server
        .call("POST", &format!("/api/v1/agents/{id}/stop"), None)
        .await;
    assert_eq!(st, 202, "{body}");
    let (st, body) = server
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            Some(json!({"command": ["echo", "again"]})),
        )
        .await;
    assert_eq!((st, &body["stdout"]), (200, &json!("again\n")), "{body}");
}
