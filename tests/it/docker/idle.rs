//! The sleeper on a real engine: an unused agent goes to sleep by itself; a CPU-busy one and one
//! with an open terminal stay awake. Idle times are seconds long through `sandbox.idle_minute`.
//! Needs Docker (scripts/docker-setup.sh) and a static sandboxd (scripts/build-sandboxd.sh).

use std::time::{Duration, Instant};

use crate::common::docker::*;
use crate::common::{TestServer, DEADLINE};
use serde_json::{json, Value};

/// A server whose `idleMinutes` unit lasts `idle_minute`, checked every second.
async fn server(env: &DockerEnv, idle_minute: Duration) -> TestServer {
    env.server_with(false, move |c| {
        c.sandbox.idle_minute = idle_minute;
        c.sandbox.idle_check_interval = Duration::from_secs(1);
        // Stopped straight away, as these tests are about the stop (pausing is docker::pause's).
        c.sandbox.default_deep_sleep_minutes = 0;
    })
    .await
}

/// Creates an agent with `idleMinutes` and waits until it runs.
async fn agent(s: &TestServer, name: &str, image: &str, idle_minutes: u32) -> String {
    s.running_agent(json!({"name": name, "image": image, "cpus": 0.5, "idleMinutes": idle_minutes}))
        .await
}

fn time(agent: &Value, key: &str) -> chrono::DateTime<chrono::Utc> {
    agent[key]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("{key} is not a time: {agent}"))
        .to_utc()
}

/// Asserts, poll after poll, that the agent stays `running` for all of `window`.
async fn stays_running(s: &TestServer, id: &str, window: Duration, why: &str) {
    let end = Instant::now() + window;
    while Instant::now() < end {
        let a = s.agent(id).await;
        assert_eq!(a["state"], "running", "{why}: the agent left running: {a}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits, with a deadline well beyond `idle`, until the sleeper has put the agent to sleep.
async fn falls_asleep(s: &TestServer, id: &str, idle: Duration) {
    let deadline = Instant::now() + DEADLINE + 2 * idle;
    loop {
        let a = s.agent(id).await;
        match a["state"].as_str().unwrap_or_default() {
            "sleeping" => return,
            "running" | "stopping" => {}
            _ => panic!("the agent should be falling asleep: {a}"),
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not sleep within {:?}: {a}",
            DEADLINE + 2 * idle
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_agent_falls_asleep_and_wakes_on_exec() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // idleMinutes 1 = 2 s.
    let s = server(&env, Duration::from_secs(2)).await;
    let id = agent(&s, "dozy", BUSYBOX_IMAGE, 1).await;

    // sleepsAt counts in idle_minute units, not real minutes.
    let a = s.agent(&id).await;
    if a["state"] == "running" {
        let left = time(&a, "sleepsAt") - time(&a, "lastActivityAt");
        assert_eq!(left, chrono::Duration::seconds(2), "{a}");
    }

    // Nobody uses it: the sleeper stops it by itself (reading the agent is no use of it).
    falls_asleep(&s, &id, Duration::from_secs(2)).await;
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.State.Running}}",
            &env.container(&id)
        ]),
        "false"
    );
    assert!(s.agent(&id).await["sleepsAt"].is_null());

    // An exec wakes it.
    assert_eq!(s.exec_ok(&id, &["echo", "awake"]).await.trim(), "awake");
    assert_eq!(s.state(&id).await, "running");
    s.destroy(&id).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_busy_agent_stays_awake_until_its_work_ends() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // sandboxd reports CPU every 5 s: an idle time of 12 s (idleMinutes 2 x 6 s) leaves room for
    // a late report or two on a loaded machine.
    let idle = Duration::from_secs(12);
    let s = server(&env, Duration::from_secs(6)).await;
    let id = agent(&s, "busy", AGENT_IMAGE, 2).await;

    // A busy loop in its own session, so it outlives the exec (whose process group is killed
    // when the command ends); the exec returns once the loop has left the group.
    let out = s
        .exec_ok(
            &id,
            &[
                "sh",
                "-c",
                "rm -f /tmp/busy.pid; \
             setsid sh -c 'echo $$ > /tmp/busy.pid; while :; do :; done' \
               </dev/null >/dev/null 2>&1 & \
             while [ ! -s /tmp/busy.pid ]; do sleep 0.1; done; echo started",
            ],
        )
        .await;
    assert_eq!(out.trim(), "started");
    assert_eq!(
        s.exec_ok(
            &id,
            &["sh", "-c", "kill -0 $(cat /tmp/busy.pid) && echo alive"]
        )
        .await
        .trim(),
        "alive"
    );

    stays_running(&s, &id, 3 * idle, "a busy loop runs").await;

    // Once the loop ends, the agent is idle and sleeps.
    s.exec_ok(&id, &["sh", "-c", "kill $(cat /tmp/busy.pid)"])
        .await;
    falls_asleep(&s, &id, idle).await;
    s.destroy(&id).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_terminal_keeps_an_agent_awake_until_it_closes() {
    use futures::{SinkExt, StreamExt};
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // idleMinutes 2 = 4 s.
    let idle = Duration::from_secs(4);
    let s = server(&env, Duration::from_secs(2)).await;
    let id = agent(&s, "watched", AGENT_IMAGE, 2).await;

    let mut ws = s.terminal(&id, 80, 24).await;
    // The shell is up; from here on nobody types.
    crate::common::send_keys(&mut ws, "echo te''rm-ready\r").await;
    crate::common::read_until(&mut ws, "term-ready").await;
    let (mut sink, mut stream) = ws.split();
    // Keep reading, so the socket never backs up while the test watches the state.
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = stream.next().await {} });

    stays_running(&s, &id, 3 * idle, "a terminal is open").await;
    let a = s.agent(&id).await;
    assert!(
        time(&a, "sleepsAt") > chrono::Utc::now(),
        "an open terminal pushes sleepsAt ahead: {a}"
    );

    // The socket closes: the agent is idle from then on and sleeps.
    sink.send(tokio_tungstenite::tungstenite::Message::Close(None))
        .await
        .expect("close the terminal");
    drop(sink);
    tokio::time::timeout(DEADLINE, reader)
        .await
        .expect("the terminal socket closes")
        .expect("reader task");
    falls_asleep(&s, &id, idle).await;
    s.destroy(&id).await;
    s.stop().await;
}
