//! Warm pools on a real engine: a claimed agent runs at once, its container, home and network
//! carry its own names and labels, its home holds nothing but setup's work, exec works with its
//! env; a restart with ready entries keeps them and leaks nothing.

use std::time::Duration;

use crate::common::docker::*;
use crate::common::{wait_for, wait_for_value, TestServer};
use agenthold::agents::preset::Preset;
use agenthold::config::Config;
use serde_json::{json, Value};

fn warm_preset(c: &mut Config) {
    c.presets.insert(
        "hot".into(),
        Preset {
            env: [("PROJECT".to_string(), "demo".to_string())].into(),
            setup: Some("echo ran > setup-ran".into()),
            warm: 1,
            ..Default::default()
        },
    );
}

async fn ready_entries(s: &TestServer) -> Vec<String> {
    let entries = s.store.list_pool_entries().await.expect("entries");
    entries
        .into_iter()
        .filter(|e| e.state == agenthold::store::pool::EntryState::Ready)
        .map(|e| e.id)
        .collect()
}

async fn wait_one_ready(s: &TestServer) -> String {
    // Making a sandbox on a loaded machine takes a while: poll for minutes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        if let Some(id) = ready_entries(s).await.pop() {
            return id;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no warm pool entry became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_agent_runs_at_once_under_its_own_names() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server_with(false, warm_preset).await;
    let entry = wait_one_ready(&s).await;
    // Before the claim: a container that names the id, and no agent.
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{index .Config.Labels \"agenthold.agent\"}}",
            &env.container(&entry)
        ])
        .trim(),
        entry
    );
    assert_eq!(s.get_json("/api/v1/agents").await, json!([]));

    let agent: Value = s.created_agent(json!({"name": "w", "preset": "hot"})).await;
    assert_eq!(agent["warm"], true, "{agent}");
    assert_eq!(agent["id"], entry.as_str());
    assert_eq!(agent["state"], "running", "a claim answers running");
    let id = entry;
    assert_eq!(
        s.exec_ok(&id, &["sh", "-c", "echo $PROJECT"]).await,
        "demo\n"
    );
    wait_for("setup done", || async {
        s.agent(&id).await["setup"]["state"] == "done"
    })
    .await;
    // The home holds setup's work and what the image puts there, nothing of the pool's.
    assert_eq!(s.exec_ok(&id, &["cat", "setup-ran"]).await, "ran\n");
    let label = "{{index .Labels \"agenthold.agent\"}}";
    let named = [
        docker(&[
            "inspect",
            "--format",
            "{{index .Config.Labels \"agenthold.agent\"}}",
            &env.container(&id),
        ]),
        docker(&["volume", "inspect", "--format", label, &env.volume(&id)]),
        docker(&["network", "inspect", "--format", label, &env.network(&id)]),
    ];
    for (what, labelled) in ["container", "volume", "network"].iter().zip(named) {
        assert_eq!(labelled.trim(), id, "the {what}'s label names the agent");
    }
    // The pool refills behind the claim.
    let next = wait_one_ready(&s).await;
    assert_ne!(next, id);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_ready_entries_leaks_nothing() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server_with(false, warm_preset).await;
    let entry = wait_one_ready(&s).await;
    let s = env.restart_with(s, warm_preset).await;
    // The running entry is kept: its sandboxd dials in again.
    let again = wait_one_ready(&s).await;
    assert_eq!(again, entry, "the entry survives a restart");
    // Without a pool, its objects all go.
    let s = env.restart_with(s, |_| {}).await;
    wait_for_value("the entry's objects removed", || async {
        let left: Vec<String> = [
            env.objects(&["ps", "-a"]),
            env.objects(&["volume", "ls"]),
            env.objects(&["network", "ls"]),
        ]
        .concat();
        (left.is_empty() && s.store.list_pool_entries().await.ok()?.is_empty()).then_some(())
    })
    .await;
    s.stop().await;
}
