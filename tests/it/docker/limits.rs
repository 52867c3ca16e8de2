//! Resource limits on a real engine: a fork bomb is stopped by `pids_limit`, a memory hog by the
//! agent's memory limit, and neither takes the server, another agent or the agent itself down. A
//! sandbox that dies of lack of memory ends in `error` saying so. Needs Docker
//! (scripts/docker-setup.sh) and a static sandboxd (scripts/build-sandboxd.sh).

use std::time::{Duration, Instant};

use crate::common::docker::*;
use crate::common::{TestServer, DEADLINE};
use serde_json::{json, Value};

const PIDS_LIMIT: i64 = 64;

async fn agent(s: &TestServer, name: &str, image: &str, memory_mb: u64) -> String {
    s.running_agent(json!({"name": name, "image": image, "memoryMb": memory_mb}))
        .await
}

/// Runs `command` with a timeout, returning the HTTP status and body, whatever they are.
async fn exec_raw(s: &TestServer, id: &str, command: &[&str], timeout_ms: u64) -> (u16, Value) {
    let r = s
        .send(
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            &json!({"command": command, "timeoutMs": timeout_ms}),
        )
        .await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls `echo ok` in the agent until it works (leftovers may take a moment to be reaped).
async fn answers_echo(s: &TestServer, id: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, out) = exec_raw(s, id, &["echo", "ok"], 20_000).await;
        if status == 200 && out["exitCode"] == 0 && out["stdout"] == "ok\n" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "agent {id} does not answer echo: {status} {out}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn healthy(s: &TestServer) {
    let r = s.get("/api/v1/health").send().await.expect("health");
    assert_eq!(r.status(), 200, "the server is unwell during the test");
}

/// Tasks (processes and threads) in the container's pids cgroup, read by the host.
fn pids_in(container: &str) -> Option<u64> {
    let full = docker(&["inspect", "--format", "{{.Id}}", container]);
    [
        format!("/sys/fs/cgroup/pids/docker/{full}/pids.current"),
        format!("/sys/fs/cgroup/pids/system.slice/docker-{full}.scope/pids.current"),
        format!("/sys/fs/cgroup/docker/{full}/pids.current"),
        format!("/sys/fs/cgroup/system.slice/docker-{full}.scope/pids.current"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .or_else(|| docker_try(&["stats", "--no-stream", "--format", "{{.PIDs}}", container]).ok())
    .and_then(|t| t.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_hits_the_pids_limit_and_harms_nobody() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| c.sandbox.pids_limit = PIDS_LIMIT)
        .await;
    let bystander = agent(&s, "bystander", BUSYBOX_IMAGE, 64).await;
    let id = agent(&s, "bomber", AGENT_IMAGE, 256).await;
    let container = env.container(&id);
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.HostConfig.PidsLimit}}",
            &container
        ]),
        PIDS_LIMIT.to_string()
    );
    // With the pids limit, the open-files limit bounds what one sandbox can take of the
    // host's file handles (sandbox.nofile, 4096 soft / 8192 hard by default).
    assert_eq!(
        s.exec_ok(&bystander, &["sh", "-c", "ulimit -n; ulimit -Hn"])
            .await,
        "4096\n8192\n"
    );

    // The bomb keeps its exec busy until the timeout kills its whole process group.
    let bomb = {
        let http = s.http.clone();
        let url = s.url(&format!("/api/v1/agents/{id}/exec"));
        tokio::spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(crate::common::TOKEN)
                .json(&json!({
                    "command": ["bash", "-c", "b() { b | b & }; b; sleep 600"],
                    "timeoutMs": 15_000,
                }))
                .send()
                .await
                .expect("bomb request");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        })
    };
    // It reaches the limit and no further.
    let mut most = 0;
    let watch_until = Instant::now() + DEADLINE;
    while !bomb.is_finished() && Instant::now() < watch_until {
        if let Some(n) = pids_in(&container) {
            most = most.max(n);
            assert!(n <= PIDS_LIMIT as u64, "{n} tasks in the container");
        }
        if most + 4 >= PIDS_LIMIT as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        most + 4 >= PIDS_LIMIT as u64,
        "the bomb never came near the limit ({most} tasks at most)"
    );
    // Meanwhile the server and the other agent carry on.
    healthy(&s).await;
    assert_eq!(s.exec_ok(&bystander, &["echo", "ok"]).await, "ok\n");

    let (status, out) = tokio::time::timeout(DEADLINE + Duration::from_secs(15), bomb)
        .await
        .expect("the bomb's exec returns")
        .expect("bomb task");
    // A timeout (the group killed), or a failure to run: either way it returned.
    assert!(
        status != 200 || out["timedOut"] == true || out["exitCode"] != 0,
        "{status} {out}"
    );
    healthy(&s).await;
    answers_echo(&s, &id).await;
    assert_eq!(s.state(&id).await, "running");
    assert_eq!(s.exec_ok(&bystander, &["echo", "ok"]).await, "ok\n");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_killed_and_the_agent_lives_on() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = agent(&s, "hog", AGENT_IMAGE, 64).await;
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.HostConfig.Memory}}",
            &env.container(&id)
        ]),
        (64u64 * 1024 * 1024).to_string()
    );
    // `tail` keeps a whole newline-free input in memory: 600 MiB against a 64 MiB limit.
    let (status, out) = exec_raw(
        &s,
        &id,
        &["sh", "-c", "head -c 629145600 /dev/zero | tail"],
        60_000,
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["timedOut"], false, "{out}");
    assert_eq!(out["exitCode"], 137, "killed by SIGKILL: {out}");
    // Only the command died: the sandbox runs on (Docker's OOMKilled stays false until the
    // container itself stops), and its agent stays running.
    assert_eq!(s.state(&id).await, "running");
    assert_eq!(s.exec_ok(&id, &["echo", "ok"]).await, "ok\n");
    healthy(&s).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_runs_out_of_memory_ends_in_error_saying_so() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    // debian:bookworm-slim runs commands as root, which may make sandboxd the OOM killer's
    // first choice (raising a score needs no privilege over one's own processes).
    let id = agent(&s, "fragile", DEBIAN_IMAGE, 64).await;
    let script = "for p in /proc/[0-9]*; do \
                    [ \"$(cat $p/comm 2>/dev/null)\" = sandboxd ] && echo 1000 > $p/oom_score_adj; \
                  done; \
                  head -c 629145600 /dev/zero | tail";
    // The sandbox dies under the command: the exec fails or reports a kill.
    let (status, out) = exec_raw(&s, &id, &["sh", "-c", script], 60_000).await;
    assert!(
        status != 200 || out["exitCode"] != 0,
        "the hog finished: {out}"
    );

    let deadline = Instant::now() + DEADLINE;
    let agent = loop {
        let a = s.agent(&id).await;
        if a["state"] == "error" {
            break a;
        }
        assert!(
            ["running", "starting"].contains(&a["state"].as_str().unwrap_or_default()),
            "{a}"
        );
        assert!(Instant::now() < deadline, "the agent did not fail: {a}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let msg = agent["error"].as_str().unwrap_or_default();
    assert!(msg.contains("ran out of memory"), "{msg}");
    assert!(msg.contains("64 MiB"), "{msg}");
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.State.OOMKilled}} {{.State.Running}}",
            &env.container(&id)
        ]),
        "true false"
    );

    // Starting it again works.
    s.start_running(&id).await;
    assert_eq!(s.exec_ok(&id, &["echo", "ok"]).await, "ok\n");
    s.stop().await;
}
