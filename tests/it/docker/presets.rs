//! The `dev` preset on a real engine: the ready agent image (images/agent, built by
//! scripts/build-agent-image.sh) has its tools and runs as the `agent` account, the preset's
//! limits reach Docker, and its setup script runs once, as that account, in the home. Needs
//! Docker (scripts/docker-setup.sh), the image and a static sandboxd (scripts/build-sandboxd.sh).

use std::time::{Duration, Instant};

use crate::common::docker::*;
use crate::common::{TestServer, DEADLINE};
use agenthold::agents::preset::Preset;
use agenthold::config::{Config, AGENT_IMAGE as DEV_IMAGE};
use serde_json::{json, Value};

fn dev_preset(c: &mut Config) {
    c.presets.insert(
        "dev".into(),
        Preset {
            image: Some(DEV_IMAGE.into()),
            cpus: Some(0.5),
            memory_mb: Some(300),
            env: [("PROJECT".to_string(), "demo".to_string())].into(),
            setup: Some("echo \"$(id -un) $PROJECT\" >> setup-ran".into()),
            ..Default::default()
        },
    );
    c.sandbox.default_preset = Some("dev".into());
}

async fn wait_setup_done(s: &TestServer, id: &str) -> Value {
    let deadline = Instant::now() + DEADLINE * 4;
    loop {
        let setup = s.agent(id).await["setup"].clone();
        if setup["state"] == "done" {
            return setup;
        }
        assert_ne!(setup["state"], "failed", "{setup}");
        assert!(Instant::now() < deadline, "setup did not finish: {setup}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_from_the_dev_preset_has_its_tools_limits_and_setup() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    if docker_try(&["image", "inspect", DEV_IMAGE]).is_err() {
        panic!("image {DEV_IMAGE} is missing; run scripts/build-agent-image.sh first");
    }
    let s = env.server_with(false, dev_preset).await;
    let r = s
        .send("POST", "/api/v1/agents", &json!({"name": "dev"}))
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let agent: Value = r.json().await.unwrap();
    let id = agent["id"].as_str().unwrap().to_string();
    assert_eq!(
        (agent["preset"].as_str(), agent["image"].as_str()),
        (Some("dev"), Some(DEV_IMAGE))
    );
    s.wait_state(&id, "running").await;

    // The preset's limits, as Docker holds them.
    let container = env.container(&id);
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}",
            &container
        ]),
        format!("{} {}", 500_000_000u64, 300u64 * 1024 * 1024)
    );

    assert_eq!(s.exec_ok(&id, &["id", "-un"]).await, "agent\n");
    assert!(s
        .exec_ok(&id, &["git", "--version"])
        .await
        .starts_with("git version"));
    assert!(s.exec_ok(&id, &["vi", "--version"]).await.contains("VIM"));
    for tool in [
        "curl", "jq", "less", "ps", "top", "ssh", "unzip", "make", "gcc", "pip3",
    ] {
        s.exec_ok(&id, &["sh", "-c", &format!("command -v {tool}")])
            .await;
    }
    // A venv installs pip too: on half a CPU of a loaded machine that takes longer than the
    // 20 s `exec_ok` allows, so this exec has minutes.
    let command = "python3 -m venv v && v/bin/python -c 'import sys; print(sys.prefix)'";
    let venv: Value = s
        .send(
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            &json!({"command": ["sh", "-c", command], "timeoutMs": 300_000}),
        )
        .await
        .json()
        .await
        .expect("exec json");
    assert_eq!(venv["exitCode"], 0, "{venv}");
    assert_eq!(venv["stdout"], "/home/agent/v\n");
    // The home belongs to the account.
    assert_eq!(
        s.exec_ok(&id, &["stat", "-c", "%U %u", "/home/agent"])
            .await,
        "agent 1000\n"
    );

    // Setup ran once, as the account, in the home, with the agent's env.
    wait_setup_done(&s, &id).await;
    assert_eq!(s.exec_ok(&id, &["cat", "setup-ran"]).await, "agent demo\n");
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    assert_eq!(s.exec_ok(&id, &["echo", "up"]).await, "up\n");
    // Had the start run it again, it would have written a second line by the time a rerun
    // (which runs after any start-time run) is done.
    let r = s
        .post(&format!("/api/v1/agents/{id}/setup"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let deadline = Instant::now() + DEADLINE * 2;
    loop {
        let lines = s.exec_ok(&id, &["sh", "-c", "wc -l < setup-ran"]).await;
        if lines.trim() == "2" && s.agent(&id).await["setup"]["state"] == "done" {
            break;
        }
        assert!(
            ["1", "2"].contains(&lines.trim()),
            "setup ran again at the start: {lines}"
        );
        assert!(Instant::now() < deadline, "the rerun did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.stop().await;
}
