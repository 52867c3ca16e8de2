//! SIGKILL the real server binary in the middle of each operation; after a restart, reconcile
//! settles every agent (fake driver) and nothing stays in a transient state.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{DEADLINE, TOKEN};
use serde_json::{json, Value};

struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_config(dir: &Path) -> (std::path::PathBuf, String) {
    let api = free_port();
    let tunnel = free_port();
    let path = dir.join("config.yaml");
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:{api}\n  data_dir: {}\n  admin_token: {TOKEN}\n\
         sandbox:\n  driver: fake\n  tunnel_listen: 127.0.0.1:{tunnel}\n",
        dir.join("data").display()
    );
    std::fs::write(&path, yaml).unwrap();
    (path, format!("http://127.0.0.1:{api}"))
}

async fn start(config: &Path, base: &str, op_delay_ms: u64) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["serve", "--config"])
        .arg(config)
        .env("AGENTHOLD_FAKE_OP_DELAY_MS", op_delay_ms.to_string())
        .env("AGENTHOLD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let p = Proc { child };
    let http = reqwest::Client::new();
    common::wait_for("server up", || async {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
    })
    .await;
    p
}

fn kill(mut p: Proc) {
    // SIGKILL: no shutdown code runs.
    p.child.kill().unwrap();
    p.child.wait().unwrap();
}

async fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let mut req = http
        .request(method.parse().unwrap(), format!("{base}{path}"))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn settled(base: &str, id: &str) -> Option<String> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, a) = call(base, "GET", &format!("/api/v1/agents/{id}"), None).await;
        if status == 404 {
            return None;
        }
        let state = a["state"].as_str().unwrap().to_string();
        if ["running", "sleeping", "error"].contains(&state.as_str()) {
            return Some(state);
        }
        assert!(
            Instant::now() < deadline,
            "agent {id} stuck in {state} after restart"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_survives_a_sigkill_halfway() {
    let dir = tempfile::tempdir().unwrap();
    let (config, base) = write_config(dir.path());
    // Slow driver calls, so each kill lands while an operation is under way.
    let p = start(&config, &base, 1500).await;

    // Create: killed while the driver creates.
    let (st, a) = call(
        &base,
        "POST",
        "/api/v1/agents",
        Some(json!({"name": "phoenix"})),
    )
    .await;
    assert_eq!(st, 201);
    let id = a["id"].as_str().unwrap().to_string();
    let (st2, b) = call(
        &base,
        "POST",
        "/api/v1/agents",
        Some(json!({"name": "doomed"})),
    )
    .await;
    assert_eq!(st2, 201);
    let doomed = b["id"].as_str().unwrap().to_string();
    kill(p);
    let p = start(&config, &base, 0).await;
    assert_eq!(settled(&base, &id).await.as_deref(), Some("running"));
    assert_eq!(settled(&base, &doomed).await.as_deref(), Some("running"));
    kill(p);

    // Stop, rebuild and destroy, each killed halfway.
    for (op, method, path, want) in [
        (
            "stop",
            "POST",
            format!("/api/v1/agents/{id}/stop"),
            Some("sleeping"),
        ),
        (
            "start",
            "POST",
            format!("/api/v1/agents/{id}/start"),
            Some("running"),
        ),
        (
            "rebuild",
            "POST",
            format!("/api/v1/agents/{id}/rebuild"),
            Some("running"),
        ),
        (
            "destroy",
            "DELETE",
            format!("/api/v1/agents/{doomed}"),
            None,
        ),
    ] {
        let p = start(&config, &base, 1500).await;
        let target = if op == "destroy" { &doomed } else { &id };
        // A fake sandbox does not outlive its server, so agents wake up sleeping after a
        // restart; stop needs a running one.
        if op == "stop" && settled(&base, target).await.as_deref() == Some("sleeping") {
            let (st, _) = call(
                &base,
                "POST",
                &format!("/api/v1/agents/{target}/start"),
                None,
            )
            .await;
            assert_eq!(st, 202);
            assert_eq!(settled(&base, target).await.as_deref(), Some("running"));
        }
        settled(&base, target).await;
        let (st, _) = call(&base, method, &path, None).await;
        assert_eq!(st, 202, "{op}");
        kill(p);
        let p = start(&config, &base, 0).await;
        assert_eq!(settled(&base, target).await.as_deref(), want, "after {op}");
        kill(p);
    }
    // The destroyed agent's sandbox folder is gone too.
    assert!(!dir.path().join("data/fake").join(&doomed).exists());
}
