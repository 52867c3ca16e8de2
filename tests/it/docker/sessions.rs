//! Agent sessions in real sandboxes: the harness (the model-free ACP agent, mounted read-only
//! into each sandbox) runs as the sandbox's `agent` account, the files it asks for are read and
//! written as that account, a prompt thaws an agent paused with its harness in it, and a turn waiting on an approval survives a SIGKILL of the server:
//! the restarted server reads on from where the last one stopped, and the answer completes the
//! turn. Needs Docker (scripts/docker-setup.sh), a static sandboxd (scripts/build-sandboxd.sh)
//! and the static test agent (scripts/build-acp-test-agent.sh).

use std::time::Duration;

use serde_json::json;

use crate::common::acp::{harness, test_agent, Chat};
use crate::common::docker::*;
use crate::common::process;

/// Where the test agent's folder is mounted in every sandbox.
const MOUNTED: &str = "/opt/acp";

fn agent_dir() -> String {
    test_agent()
        .parent()
        .expect("the agent's folder")
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_runs_as_the_agent_account_and_its_files_are_the_agents() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.sandbox.docker.host_mounts = vec![format!("{}:{MOUNTED}:ro", agent_dir())];
            c.harnesses.insert(
                "test".into(),
                harness(&format!("{MOUNTED}/acp-test-agent"), &[]),
            );
            c.sandbox.default_harness = Some("test".into());
        })
        .await;
    let id = s.running_agent(("talker", AGENT_IMAGE)).await;
    let chat = Chat::open(&s, &id, json!({})).await;
    assert_eq!(
        Chat::text(&chat.ask("hello from docker").await),
        "hello from docker"
    );

    let events = chat
        .ask("fs-write /home/agent/note.txt written by the harness")
        .await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    assert!(Chat::text(&events).starts_with("wrote "), "{events:?}");
    let owner = s
        .exec_ok(&id, &["stat", "-c", "%U", "/home/agent/note.txt"])
        .await;
    assert_eq!(owner.trim(), "agent");
    let events = chat.ask("fs-read /home/agent/note.txt").await;
    assert_eq!(Chat::text(&events), "written by the harness");
    // The agent account cannot read what only root can.
    let events = chat.ask("fs-read /etc/shadow").await;
    assert!(
        Chat::text(&events).starts_with("fs/read_text_file failed"),
        "{events:?}"
    );

    // The harness process is the agent's.
    let pid = chat.session().await["processId"]
        .as_str()
        .expect("process")
        .to_string();
    let process = s
        .get_json(&format!("/api/v1/agents/{id}/processes/{pid}"))
        .await;
    assert_eq!(process["state"], "running");
    let leader = process["pid"].as_i64().expect("pid");
    let user = s
        .exec_ok(&id, &["stat", "-c", "%U", &format!("/proc/{leader}")])
        .await;
    assert_eq!(user.trim(), "agent");

    // Paused (frozen, harness and all) between turns: the next prompt thaws it, and the same
    // harness answers.
    s.pause(&id).await;
    let frozen = docker(&[
        "inspect",
        "--format",
        "{{.State.Paused}}",
        &env.container(&id),
    ]);
    assert_eq!(frozen.trim(), "true");
    let events = chat.ask("after the pause").await;
    assert_eq!(Chat::text(&events), "after the pause");
    assert_eq!(s.state(&id).await, "running");
    assert_eq!(
        chat.session().await["processId"].as_str(),
        Some(pid.as_str()),
        "the same harness, not a new one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_waiting_on_an_approval_survives_a_server_sigkill() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut yaml = process::docker_sandbox_yaml(&env.prefix, &env.pool, AGENT_IMAGE, None);
    yaml.push_str(&format!(
        "    host_mounts: [\"{}:{MOUNTED}:ro\"]\n  default_harness: test\n\
         harnesses:\n  test:\n    command: [{MOUNTED}/acp-test-agent]\n",
        agent_dir()
    ));
    let server =
        process::ServerConfig::write(dir.path(), "0.0.0.0", &yaml, Duration::from_secs(90));
    let running = server.start().await;
    let id = server.create_agent("survivor").await;
    server.wait_state(&id, "running").await;
    let chat = Chat::open(&server, &id, json!({})).await;
    assert_eq!(Chat::text(&chat.ask("before").await), "before");
    let turn = chat.prompt("tool").await;
    let asked = chat.pending_approval().await;

    running.kill();
    let _running = server.start().await;

    // The approval waits on, and its answer reaches the harness through the new server.
    let again = chat.pending_approval().await;
    assert_eq!(again["id"], asked["id"]);
    assert_eq!(chat.session().await["state"], "running");
    let (status, body) = server
        .call(
            "POST",
            &format!("/api/v1/approvals/{}", asked["id"].as_str().expect("id")),
            Some(json!({"optionId": "a2"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let events = chat.turn(turn).await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    let tool = events
        .iter()
        .rev()
        .find(|(_, e, d)| e == "update" && d["sessionUpdate"] == "tool_call_update")
        .expect("the tool call's end");
    assert_eq!(tool.2["status"], "completed");
    // Nothing the harness said before the kill was recorded twice.
    let all = chat.events(0).await;
    let permissions = all.iter().filter(|(_, e, _)| e == "permission").count();
    assert_eq!(permissions, 1);
    let seqs: Vec<u64> = all.iter().map(|(s, _, _)| *s).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    // And the conversation goes on with the same harness.
    assert_eq!(Chat::text(&chat.ask("after").await), "after");
}
