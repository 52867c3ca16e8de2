//! Changes made to sandboxes outside agenthold (`docker stop`, `kill`, `start`, `rm -f`) while the
//! server runs are picked up from Docker's event stream within seconds, and a sandbox that dies
//! while its agent is `starting` fails the start with its exit code and last log lines. Needs
//! Docker.

use crate::common::docker::*;
use crate::common::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_stop_start_kill_and_remove_are_followed() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("outside", AGENT_IMAGE)).await;
    let container = env.container(&id);
    s.exec_ok(&id, &["sh", "-c", "echo still-here > /home/agent/mark"])
        .await;

    // docker stop: the agent sleeps.
    docker(&["stop", "-t", "5", &container]);
    s.wait_state(&id, "sleeping").await;

    // docker start: sandboxd boots with the token it has, says hello, the agent runs.
    docker(&["start", &container]);
    s.wait_state(&id, "running").await;
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/mark"]).await.trim(),
        "still-here"
    );

    // docker kill: sleeping again.
    docker(&["kill", &container]);
    s.wait_state(&id, "sleeping").await;

    // Started again through the API, then removed from outside: sleeping, and the next start
    // makes the container anew with the same home.
    s.start_running(&id).await;
    let first = docker(&["inspect", "--format", "{{.Id}}", &container]);
    docker(&["rm", "-f", &container]);
    s.wait_state(&id, "sleeping").await;
    s.start_running(&id).await;
    assert_ne!(
        docker(&["inspect", "--format", "{{.Id}}", &container]),
        first
    );
    assert_eq!(
        s.exec_ok(&id, &["cat", "/home/agent/mark"]).await.trim(),
        "still-here"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_an_agent_whose_container_runs_gives_it_a_fresh_token() {
    // An agent in `error` whose container still runs (say sandboxd was slow to say hello):
    // start must restart it with a new boot.json, and the stop inside that start must not be
    // mistaken for an outside stop.
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("restart", BUSYBOX_IMAGE)).await;
    s.store
        .fail(
            &id,
            &[agenthold::model::AgentState::Running],
            "made up for the test",
        )
        .await
        .expect("fail");
    let before = docker(&[
        "inspect",
        "--format",
        "{{.State.StartedAt}}",
        &env.container(&id),
    ]);
    s.start_running(&id).await;
    let after = docker(&[
        "inspect",
        "--format",
        "{{.State.StartedAt}}",
        &env.container(&id),
    ]);
    assert_ne!(before, after, "the container was not restarted");
    // It stays running: no late `die` event turns it to sleeping.
    s.exec_ok(&id, &["sh", "-c", "true"]).await;
    assert_eq!(s.state(&id).await, "running");
    s.stop().await;
}

/// An image this test builds, removed again when dropped (on a panic too).
struct TestImage(String);

impl Drop for TestImage {
    fn drop(&mut self) {
        let _ = docker_try(&["rmi", "-f", &self.0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxd_that_exits_at_boot_fails_the_start_and_says_why() {
    // An image with an `agent` account but no home folder: the fresh home volume belongs to
    // root, and without CHOWN sandboxd cannot hand it over, so it exits at once, inside the
    // driver's own start. That death must still reach the agent, long before the start's 60 s
    // wait for hello would end.
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let ctx = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        ctx.path().join("passwd"),
        "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n",
    )
    .expect("passwd");
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM {BUSYBOX_IMAGE}\nCOPY passwd /etc/passwd\n"),
    )
    .expect("Dockerfile");
    let image = TestImage(format!("{}-nohome:latest", env.prefix));
    docker(&[
        "build",
        "-q",
        "-t",
        &image.0,
        &ctx.path().display().to_string(),
    ]);
    let s = env
        .server_with(false, |c| c.sandbox.docker.cap_drop.push("CHOWN".into()))
        .await;
    let id = s.create_agent(("no-chown", image.0.as_str())).await;
    let agent = s.wait_state(&id, &["error"]).await;
    let error = agent["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("stopped before sandboxd said hello") && error.contains("exit code 1"),
        "{agent}"
    );
    assert!(
        error.contains("cannot hand /home/agent"),
        "sandboxd's last words: {agent}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_sandboxd_while_the_agent_starts_fails_the_start_and_says_why() {
    // The tunnel listens on loopback only, so sandboxd keeps dialling in vain and the agent
    // stays `starting` until sandboxd is killed from outside.
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.sandbox.tunnel_listen = "127.0.0.1:0".parse().expect("addr")
        })
        .await;
    let id = s.create_agent(("unreachable", BUSYBOX_IMAGE)).await;
    let container = env.container(&id);
    wait_for("the sandbox runs", || async {
        docker_try(&["inspect", "--format", "{{.State.Running}}", &container]).as_deref()
            == Ok("true")
    })
    .await;
    assert_eq!(s.state(&id).await, "starting");
    // The container counts as running as soon as its init runs; sandboxd comes a moment later.
    wait_for("sandboxd runs under the container's init", || async {
        sandboxd_pid(&container).is_some()
    })
    .await;
    let sandboxd = sandboxd_pid(&container).expect("sandboxd's pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sandboxd),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill sandboxd");
    let agent = s.wait_state(&id, &["error"]).await;
    let error = agent["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("stopped before sandboxd said hello") && error.contains("exit code 137"),
        "{agent}"
    );
    // Its log says what it was doing: dialling the tunnel.
    assert!(error.contains("last log lines:"), "{agent}");
    s.stop().await;
}

/// The `iptables -S INPUT` lines that carry `tag`.
fn input_rules_tagged(tag: &str) -> Vec<String> {
    let out = std::process::Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
        .expect("iptables -S INPUT");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(tag))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_firewall_rules_of_a_gone_agent_are_removed_at_start() {
    // What a server killed between removing a sandbox's objects and its rules leaves behind.
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let tag = format!("agenthold:{}:gonegonegone", env.prefix);
    iptables(&[
        "-I",
        "INPUT",
        "1",
        "-i",
        "br-ahgone",
        "-m",
        "comment",
        "--comment",
        &tag,
        "-j",
        "DROP",
    ]);
    assert_eq!(input_rules_tagged(&tag).len(), 1);

    let s = env.server(false).await;
    wait_for("the orphan rule is removed", || async {
        input_rules_tagged(&tag).is_empty()
    })
    .await;
    // The server still works after its cleanup.
    let id = s.running_agent(("after-cleanup", BUSYBOX_IMAGE)).await;
    assert_eq!(s.exec_ok(&id, &["echo", "ok"]).await, "ok\n");
}

fn iptables(args: &[&str]) {
    let args: Vec<&str> = std::iter::once("-w").chain(args.iter().copied()).collect();
    crate::common::docker::tool("iptables", &args);
}
