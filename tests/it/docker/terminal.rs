//! Terminal sessions on the Docker driver survive a server restart: sandboxd keeps the shell in
//! the container, and `agenthold shell` reattaches by itself once the server is back. Needs
//! Docker (scripts/docker-setup.sh) and a static sandboxd (scripts/build-sandboxd.sh).

use std::path::Path;
use std::process::Stdio;

use crate::common::docker::*;
use crate::common::{free_port, DEADLINE, TOKEN};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

fn write_config(dir: &Path, env: &DockerEnv, api: u16, tunnel: u16) -> std::path::PathBuf {
    let sandboxd = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sandboxd/sandboxd");
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:{api}\n  data_dir: {data}\n  admin_token: {TOKEN}\n  previews:\n    listen: 127.0.0.1:0\n\
         sandbox:\n  driver: docker\n  tunnel_listen: 0.0.0.0:{tunnel}\n  egress:\n    port: 0\n    dns_port: 0\n  default_image: {AGENT_IMAGE}\n\
         \x20 default_cpus: 1\n  default_memory_mb: 256\n  sandboxd_path: {sandboxd}\n\
         \x20 docker:\n    name_prefix: {prefix}\n    network_pool: {pool}\n",
        data = dir.join("data").display(),
        sandboxd = sandboxd.display(),
        prefix = env.prefix,
        pool = env.pool,
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

async fn serve(config: &Path, base: &str) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["serve", "--config"])
        .arg(config)
        .env("AGENTHOLD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    crate::common::wait_for("server up", || async {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
    })
    .await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_session_survives_a_server_restart() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (api, tunnel) = (free_port(), free_port());
    let config = write_config(dir.path(), &env, api, tunnel);
    let base = format!("http://127.0.0.1:{api}");
    let mut server = serve(&config, &base).await;

    let http = reqwest::Client::new();
    let r = http
        .post(format!("{base}/api/v1/agents"))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "restart"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let agent: Value = r.json().await.unwrap();
    let id = agent["id"].as_str().unwrap().to_string();
    crate::common::wait_for("agent running", || async {
        let a: Value = http
            .get(format!("{base}/api/v1/agents/{id}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_ne!(a["state"], "error", "{a}");
        a["state"] == "running"
    })
    .await;

    let mut shell = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["shell", "restart"])
        .env("AGENTHOLD_URL", &base)
        .env("AGENTHOLD_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = shell.stdin.take().unwrap();
    let mut stdout = shell.stdout.take().unwrap();
    let mut out = String::new();
    stdin
        .write_all(b"echo started-'now'; sleep 12; echo done-'after-sleep'\n")
        .await
        .unwrap();
    crate::common::read_output_until(&mut stdout, &mut out, "started-now", 2 * DEADLINE).await;

    // The server goes away hard and comes back on the same ports and data.
    server.kill().await.unwrap();
    let _server = serve(&config, &base).await;

    // The CLI reattaches and sees what the shell printed after the restart.
    crate::common::read_output_until(&mut stdout, &mut out, "done-after-sleep", 2 * DEADLINE).await;
    stdin.write_all(b"exit\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(DEADLINE, shell.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{out}");
}
