//! With no admin token configured, the first start makes one, prints it once and keeps only its
//! hash; later starts accept the same token and print nothing.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &std::path::Path) -> (Proc, std::process::ChildStderr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["serve", "--config"])
        .arg(config)
        .env_remove("AGENTHOLD_ADMIN_TOKEN")
        .env("AGENTHOLD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    (Proc(child), stderr)
}

/// Reads the server's stderr until the serving line, returning the token if one was printed.
fn printed_token(stderr: std::process::ChildStderr) -> Option<String> {
    let mut token = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if let Some(t) = line.trim().strip_prefix("export AGENTHOLD_TOKEN=") {
            token = Some(t.split_whitespace().next().unwrap().to_string());
        }
        let trimmed = line.trim();
        if token.is_none() && trimmed.len() == 64 && trimmed.chars().all(|c| c.is_ascii_hexdigit())
        {
            token = Some(trimmed.to_string());
        }
        if line.contains("fake driver") {
            // The driver's warning comes after the token would have been printed.
            return token;
        }
    }
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_token_is_shown_once_and_kept_as_a_hash() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("config.yaml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "server:\n  listen: 127.0.0.1:{port}\n  data_dir: {}\nsandbox:\n  driver: fake\n  tunnel_listen: 127.0.0.1:0\n  egress:\n    port: 0\n    dns_port: 0\n",
            data.display()
        ),
    )
    .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();

    let (p, stderr) = start(&config);
    let token = tokio::task::spawn_blocking(move || printed_token(stderr))
        .await
        .unwrap()
        .expect("the first start prints a token");
    common::wait_for("server up", || async {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
    })
    .await;
    let ok = http
        .get(format!("{base}/api/v1/agents"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // Only the hash is on disk.
    let db = std::fs::read(data.join("agenthold.db")).unwrap();
    let wal = std::fs::read(data.join("agenthold.db-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(!bytes.windows(token.len()).any(|w| w == token.as_bytes()));
    }
    drop(p);

    let (p, stderr) = start(&config);
    let again = tokio::task::spawn_blocking(move || printed_token(stderr))
        .await
        .unwrap();
    assert_eq!(again, None, "the token was printed a second time");
    common::wait_for("server up again", || async {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
    })
    .await;
    let ok = http
        .get(format!("{base}/api/v1/agents"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let bad = http
        .get(format!("{base}/api/v1/agents"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    drop(p);
}
