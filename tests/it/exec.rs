//! Exec over the real tunnel: output, exit codes, stdin, timeouts that leave no process behind,
//! NDJSON streaming, and bad requests.

use crate::common::{env_refusal, expect_error, TestServer};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_stderr_exit_code_and_stdin() {
    let s = TestServer::start().await;
    let id = s.running_agent("exec").await;
    let r = s
        .exec(&id, &["sh", "-c", "echo out; echo err >&2; exit 7"])
        .await;
    assert_eq!(r["stdout"], "out\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["exitCode"], 7);
    assert_eq!(r["timedOut"], false);
    assert_eq!(r["truncated"], false);
    assert!(r["durationMs"].as_u64().is_some());

    let r: Value = s
        .post(&format!("/api/v1/agents/{id}/exec"))
        .json(
            &json!({"command": ["sh", "-c", "tr a-z A-Z; echo \"$GREETING\"; pwd"],
                      "stdin": "quiet\n", "env": {"GREETING": "hi there"}, "cwd": "/home/agent"}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let out = r["stdout"].as_str().unwrap();
    assert!(out.starts_with("QUIET\nhi there\n"), "{out}");

    let r = s.exec(&id, &["no-such-program-here"]).await;
    assert_eq!(r["exitCode"], 127);
}

/// True while any process's command line contains `marker`.
fn process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_whole_process_group() {
    let s = TestServer::start().await;
    let id = s.running_agent("slow").await;
    let marker = format!("agenthold-timeout-{}", std::process::id());
    let script = format!("(exec -a {marker}-bg sleep 1000) & exec -a {marker} sleep 1001");
    let r: Value = s
        .send(
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            &json!({"command": ["bash", "-c", script], "timeoutMs": 300}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["timedOut"], true, "{r}");
    assert_ne!(r["exitCode"], 0);
    crate::common::wait_for("no process left behind", || async {
        !process_with(&marker)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_request_kills_the_command() {
    let s = TestServer::start().await;
    let id = s.running_agent("cancel").await;
    let marker = format!("agenthold-cancel-{}", std::process::id());
    let script = format!("exec -a {marker} sleep 1000");
    let req = s
        .post(&format!("/api/v1/agents/{id}/exec"))
        .json(&json!({"command": ["bash", "-c", script]}))
        .send();
    let handle = tokio::spawn(req);
    crate::common::wait_for("command started", || async { process_with(&marker) }).await;
    handle.abort();
    crate::common::wait_for("command killed", || async { !process_with(&marker) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_beyond_the_cap_is_truncated() {
    let s = TestServer::start_with(|c| c.server.exec_output_cap_kb = 4).await;
    let id = s.running_agent("cap").await;
    let r = s
        .exec(&id, &["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a"])
        .await;
    assert_eq!(r["truncated"], true);
    assert_eq!(r["stdout"].as_str().unwrap().len(), 4096);
    assert_eq!(r["exitCode"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ndjson_streams_lines_and_ends_with_the_exit() {
    let s = TestServer::start().await;
    let id = s.running_agent("stream").await;
    let r = s
        .post(&format!("/api/v1/agents/{id}/exec"))
        .header("accept", "application/x-ndjson")
        .json(&json!({"command": ["sh", "-c", "for i in 1 2 3; do echo line$i; done; echo oops >&2; exit 2"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stdout: String = lines
        .iter()
        .filter(|l| l["stream"] == "stdout")
        .map(|l| l["data"].as_str().unwrap())
        .collect();
    let stderr: String = lines
        .iter()
        .filter(|l| l["stream"] == "stderr")
        .map(|l| l["data"].as_str().unwrap())
        .collect();
    assert_eq!(stdout, "line1\nline2\nline3\n");
    assert_eq!(stderr, "oops\n");
    let last = lines.last().unwrap();
    assert_eq!(last["exitCode"], 2);
    assert_eq!(last["timedOut"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_wakes_a_sleeping_agent() {
    let s = TestServer::start().await;
    let id = s.sleeping_agent("wake").await;
    let r = s.exec(&id, &["echo", "up"]).await;
    assert_eq!(r["stdout"], "up\n");
    assert_eq!(s.state(&id).await, "running");
}

#[tokio::test]
async fn bad_exec_requests_are_400() {
    let s = TestServer::start().await;
    let id = s.create_agent("x").await;
    for body in [
        json!({"command": []}),
        json!({"command": [""]}),
        json!({"command": "ls"}),
        json!({"command": ["ls"], "timeoutMs": 0}),
        json!({"command": ["ls"], "timeoutMs": -5}),
        json!({"command": ["ls"], "timeoutMs": 1e30}),
        json!({"command": ["ls"], "env": {"A=B": "c"}}),
        json!({"command": ["a\u{0}b"]}),
        json!({"command": ["ls"], "bogus": true}),
    ] {
        let r = s
            .send("POST", &format!("/api/v1/agents/{id}/exec"), &body)
            .await;
        expect_error(r, 400, "invalid").await;
    }
}

/// One rule for an `env`'s names, wherever it is sent: a reserved name is refused by exec with
/// the message an agent's `env` gets, before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refuses_reserved_env_names_as_agents_do() {
    let s = TestServer::start().await;
    let id = s.running_agent("env").await;
    for name in ["HTTP_PROXY", "no_proxy", "AGENTHOLD_TOKEN", "1X", "A-B"] {
        let env = json!({ name: "x" });
        let agent = env_refusal(
            &s,
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            json!({ "env": env }),
        )
        .await;
        let exec = env_refusal(
            &s,
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            json!({"command": ["true"], "env": env}),
        )
        .await;
        assert_eq!(exec, agent, "{name}");
        assert!(exec.starts_with("env: "), "{exec}");
    }
    let reserved = env_refusal(
        &s,
        "POST",
        &format!("/api/v1/agents/{id}/exec"),
        json!({"command": ["true"], "env": {"HTTP_PROXY": "x"}}),
    )
    .await;
    assert!(reserved.contains("reserved"), "{reserved}");
}

/// `start` and then arguments of at most 130,000 bytes, so that the command counts `total`
/// bytes the way the limit does (each argument with a NUL).
fn command_of(start: &[&str], total: usize) -> Vec<String> {
    let mut command: Vec<String> = start.iter().map(|a| a.to_string()).collect();
    let mut left = total - command.iter().map(|a| a.len() + 1).sum::<usize>();
    while left > 0 {
        let len = (left - 1).min(130_000);
        command.push("a".repeat(len));
        left -= len + 1;
    }
    command
}

async fn exec_body(s: &TestServer, id: &str, body: Value) -> reqwest::Response {
    s.send("POST", &format!("/api/v1/agents/{id}/exec"), &body)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_commands_and_environments_run() {
    let s = TestServer::start().await;
    let id = s.running_agent("large").await;

    // Exactly 1 MiB, the limit, in arguments below Linux's 131,071 bytes per argument.
    let command = command_of(
        &["sh", "-c", "for a; do printf '%s ' ${#a}; done", "sh"],
        1 << 20,
    );
    let want: String = command[4..]
        .iter()
        .map(|a| format!("{} ", a.len()))
        .collect();
    let r: Value = exec_body(&s, &id, json!({ "command": command }))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["stdout"], want, "{r}");

    // A 200 KB script: one argument too long for Linux, so it goes on stdin.
    let script = format!("x={}; echo ${{#x}}\n", "a".repeat(200_000));
    let r: Value = exec_body(&s, &id, json!({"command": ["sh"], "stdin": script}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["stdout"], "200000\n", "{r}");

    let env: serde_json::Map<String, Value> = (0..10_000)
        .map(|i| (format!("V{i}"), json!("x".repeat(50))))
        .collect();
    let r: Value = exec_body(
        &s,
        &id,
        json!({"command": ["sh", "-c", "env | grep -c '^V[0-9]*=x'"], "env": env}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(r["stdout"], "10000\n", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_over_the_limits_are_413_before_the_sandbox_is_woken() {
    let s = TestServer::start().await;
    let id = s.sleeping_agent("toolarge").await;

    let command = command_of(&["true"], (1 << 20) + 1024);
    let r = exec_body(&s, &id, json!({ "command": command })).await;
    let msg = expect_error(r, 413, "too_large").await;
    assert!(
        msg.contains("1049600 bytes") && msg.contains("1048576"),
        "{msg}"
    );

    let script = format!("x={}; echo ${{#x}}", "a".repeat(200_000));
    let r = exec_body(&s, &id, json!({"command": ["sh", "-c", script]})).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_large", "{body}");
    assert_eq!(body["error"]["field"], "command");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("131071") && msg.contains("stdin"), "{msg}");

    let env = json!({"BIG": "v".repeat(200_000)});
    let r = exec_body(&s, &id, json!({"command": ["env"], "env": env})).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "env", "{body}");

    // Refused up front: none of these woke the agent.
    assert_eq!(s.state(&id).await, "sleeping");
}
