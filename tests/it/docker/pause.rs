//! Light sleep on the real engine: a paused agent's sandbox is frozen (`docker pause`), its
//! tunnel kept across a pause longer than the server's ping reaper allows, and on the first use
//! after it a background process goes on counting (no restart), a terminal session's shell
//! keeps its variables, a file written before is there. An outside `docker pause` and
//! `docker unpause` are taken in. An idle sandbox is frozen, then stopped after its
//! `deepSleepMinutes`; under memory pressure a frozen one is stopped and a running one is not. Needs Docker (scripts/docker-setup.sh) and a static sandboxd
//! (scripts/build-sandboxd.sh).

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::client::Client;
use crate::common::docker::*;
use crate::common::{process, read_until, send_keys, wait_for, TestServer, Ws, DEADLINE, TOKEN};

/// Pinged every second: three missed pings (3 s) would drop a session the reaper did not spare.
async fn server(env: &DockerEnv) -> TestServer {
    env.server_with(false, |c| {
        c.sandbox.ping_interval = Duration::from_secs(1);
    })
    .await
}

/// A small busybox agent named `name`, as most of these tests make.
fn small(name: &str) -> Value {
    json!({"name": name, "image": BUSYBOX_IMAGE, "cpus": 0.5})
}

fn paused_in_docker(env: &DockerEnv, id: &str) -> bool {
    docker(&[
        "inspect",
        "--format",
        "{{.State.Paused}}",
        &env.container(id),
    ]) == "true"
}

async fn terminal_at(s: &TestServer, id: &str, query: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal?{query}"));
    let mut req = url.into_client_request().expect("request");
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("header"),
    );
    tokio_tungstenite::connect_async(req)
        .await
        .expect("terminal")
        .0
}

/// The session id from the first control message.
async fn session_of(ws: &mut Ws) -> String {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("no session message in time");
        match msg {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).expect("control message");
                assert_eq!(v["type"], "session", "{v}");
                return v["id"].as_str().expect("session id").to_string();
            }
            Some(Ok(_)) => {}
            other => panic!("terminal ended before its session message: {other:?}"),
        }
    }
}

/// Starts process `counter` (a number a second) and waits until it has counted twice.
async fn start_counter(api: &Client, id: &str) {
    let (st, body) = api
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": ["sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); sleep 1; done"], "tag": "counter"})),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    wait_for("the counter counts", || async {
        counted(api, id).await.len() >= 2
    })
    .await;
}

/// The counter's output so far, as numbers (reading it is a use: it thaws a paused agent).
async fn counted(s: &Client, id: &str) -> Vec<u64> {
    let ndjson = s
        .get_text(&format!("/api/v1/agents/{id}/processes/counter/output"))
        .await;
    let text: String = ndjson
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|piece| piece["data"].as_str().map(str::to_string))
        .collect();
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_keeps_processes_terminals_files_and_the_tunnel() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = s.running_agent(small("frozen")).await;
    s.write_tree(&id, &[("note.txt", "written before")]).await;
    start_counter(&s, &id).await;
    let mut ws = terminal_at(&s, &id, "cols=80&rows=24").await;
    let session = session_of(&mut ws).await;
    send_keys(&mut ws, "KEPT=across; echo set$((40+2))\r").await;
    read_until(&mut ws, "set42").await;
    drop(ws);
    let conn = s.lc.tunnels().conn_id(&id).expect("the agent's tunnel");
    let before = counted(&s, &id).await;

    s.pause(&id).await;
    assert!(paused_in_docker(&env, &id), "the container is not paused");
    // Frozen for well past three missed pings: the reaper must not drop the session. (Time
    // passing is the point here, not an outcome waited for.)
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(s.state(&id).await, "paused");
    s.assert_same_tunnel(&id, conn);

    // The first use thaws it and is answered at once, over the same tunnel.
    let text = s
        .get_text(&format!("/api/v1/agents/{id}/fs/read?path=note.txt"))
        .await;
    assert_eq!(text, "written before");
    assert_eq!(s.state(&id).await, "running");
    assert!(!paused_in_docker(&env, &id));
    s.assert_same_tunnel(&id, conn);

    // The counter goes on from where it was: it did not restart, and it counted on without a gap
    // (a sleep cut short by the freeze ends at once; the count is not of seconds).
    let last = *before.last().expect("counted before the pause");
    wait_for("the counter counts on", || async {
        counted(&s, &id).await.last().is_some_and(|n| *n > last + 1)
    })
    .await;
    let after = counted(&s, &id).await;
    assert_eq!(after.iter().filter(|n| **n == 0).count(), 1, "{after:?}");
    assert!(
        after.windows(2).all(|w| w[1] == w[0] + 1),
        "the count jumped or went back: {after:?}"
    );

    // The terminal session's shell kept its variable; attaching to it thaws a paused agent too.
    let (st, _) = s
        .call("POST", &format!("/api/v1/agents/{id}/pause"), None)
        .await;
    assert_eq!(st, 202);
    let mut ws = terminal_at(&s, &id, &format!("session={session}")).await;
    assert_eq!(session_of(&mut ws).await, session);
    send_keys(&mut ws, "echo \"still-$KEPT\"\r").await;
    read_until(&mut ws, "still-across").await;
    assert_eq!(s.state(&id).await, "running");
    drop(ws);

    // A stop takes a paused agent to sleep.
    s.call("POST", &format!("/api/v1/agents/{id}/pause"), None)
        .await;
    s.stop_sleeping(&id).await;
    s.destroy(&id).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_docker_pause_and_unpause_are_taken_in() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = s.running_agent(small("outside")).await;
    docker(&["pause", &env.container(&id)]);
    s.wait_state(&id, "paused").await;
    docker(&["unpause", &env.container(&id)]);
    s.wait_state(&id, "running").await;
    assert_eq!(s.exec_ok(&id, &["echo", "on"]).await.trim(), "on");
    s.destroy(&id).await;
    s.stop().await;
}

fn running_in_docker(env: &DockerEnv, id: &str) -> bool {
    docker(&[
        "inspect",
        "--format",
        "{{.State.Running}}",
        &env.container(id),
    ]) == "true"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sandbox_is_frozen_then_stopped_after_its_deep_sleep() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // An `idleMinutes` unit of a second, checked often.
    let s = env
        .server_with(false, |c| {
            c.sandbox.ping_interval = Duration::from_secs(1);
            c.sandbox.idle_minute = Duration::from_secs(1);
            c.sandbox.idle_check_interval = Duration::from_millis(200);
        })
        .await;
    // Paused after a second unused, stopped six seconds after that.
    let id = s
        .running_agent(json!({"name": "dozy", "image": BUSYBOX_IMAGE, "cpus": 0.5, "idleMinutes": 1, "deepSleepMinutes": 6}))
        .await;
    s.wait_state(&id, "paused").await;
    assert!(paused_in_docker(&env, &id), "the idle sandbox is frozen");
    s.wait_state(&id, "sleeping").await;
    assert!(
        !running_in_docker(&env, &id),
        "after its deep sleep the sandbox is stopped"
    );
    s.destroy(&id).await;
    s.stop().await;
}

/// Under memory pressure (more free memory asked for than any host has) the frozen sandbox is
/// stopped and the running one left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_memory_pressure_a_frozen_sandbox_is_stopped_and_a_running_one_is_not() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.sandbox.idle_check_interval = Duration::from_millis(200);
            c.sandbox.min_free_memory_mb = u64::MAX / 2;
        })
        .await;
    let busy = s.running_agent(small("busy")).await;
    let frozen = s.running_agent(small("frozen")).await;
    s.pause(&frozen).await;
    s.wait_state(&frozen, "sleeping").await;
    assert!(!running_in_docker(&env, &frozen), "the frozen one stopped");
    assert_eq!(s.state(&busy).await, "running");
    assert!(running_in_docker(&env, &busy) && !paused_in_docker(&env, &busy));
    s.destroy(&busy).await;
    s.destroy(&frozen).await;
    s.stop().await;
}

/// A destroyed paused agent leaves nothing behind (its frozen container is thawed before the
/// removal; Docker 20.10 removes a frozen one as well, so this holds either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroying_a_paused_agent_leaves_nothing() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = s.running_agent(small("frozen")).await;
    s.pause(&id).await;
    assert!(paused_in_docker(&env, &id));
    s.destroy(&id).await;
    for kind in [&["ps", "-a"][..], &["volume", "ls"], &["network", "ls"]] {
        assert_eq!(env.objects(kind), Vec::<String>::new(), "{kind:?} left");
    }
    s.stop().await;
}

/// A pause outlives the server: killed while an agent is paused, the server finds it paused at
/// its next start (the container still frozen, not stopped), and the first use thaws it, its
/// process counting on where it was and sandboxd dialling the new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_agent_stays_paused_across_a_server_kill_and_thaws_on_use() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = process::docker_sandbox_yaml(&env.prefix, &env.pool, BUSYBOX_IMAGE, None);
    let server =
        process::ServerConfig::write(dir.path(), "0.0.0.0", &sandbox, Duration::from_secs(90));
    let running = server.start().await;
    let id = server
        .running_agent(json!({"name": "kept", "cpus": 0.5}))
        .await;
    start_counter(&server, &id).await;
    server.pause(&id).await;
    running.kill();

    let _running = server.start().await;
    assert_eq!(server.state(&id).await, "paused");
    assert!(
        paused_in_docker(&env, &id),
        "the restart unpaused or stopped the container"
    );

    // Reading the output is a use: it thaws the agent, and sandboxd, whose old connection died
    // with the server, dials the new one.
    let before = counted(&server, &id).await;
    assert_eq!(server.state(&id).await, "running");
    let last = *before.last().expect("counted before the pause");
    wait_for("the counter counts on", || async {
        counted(&server, &id)
            .await
            .last()
            .is_some_and(|n| *n > last + 1)
    })
    .await;
    let after = counted(&server, &id).await;
    assert_eq!(
        after.iter().filter(|n| **n == 0).count(),
        1,
        "it restarted: {after:?}"
    );
    server.destroy(&id).await;
}

/// An outside `docker pause` and `docker unpause` made while the server is down are taken in
/// at its next start: the one frozen outside is `paused` (and a use thaws it), the one thawed
/// outside is `running` (its sandboxd dials the new server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_pause_and_unpause_while_the_server_is_down_are_settled_at_boot() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = process::docker_sandbox_yaml(&env.prefix, &env.pool, BUSYBOX_IMAGE, None);
    let server =
        process::ServerConfig::write(dir.path(), "0.0.0.0", &sandbox, Duration::from_secs(90));
    let running = server.start().await;
    let frozen = server
        .running_agent(json!({"name": "frozen-outside", "cpus": 0.5}))
        .await;
    let thawed = server
        .running_agent(json!({"name": "thawed-outside", "cpus": 0.5}))
        .await;
    server.pause(&thawed).await;
    running.kill();

    docker(&["pause", &env.container(&frozen)]);
    docker(&["unpause", &env.container(&thawed)]);
    let _running = server.start().await;
    server
        .settles_to(&frozen, "paused", "frozen while the server was down")
        .await;
    server
        .settles_to(&thawed, "running", "thawed while the server was down")
        .await;
    assert_eq!(server.exec_ok(&thawed, &["echo", "on"]).await.trim(), "on");
    assert_eq!(server.exec_ok(&frozen, &["echo", "on"]).await.trim(), "on");
    assert_eq!(server.state(&frozen).await, "running");
    assert!(!paused_in_docker(&env, &frozen));
    server.destroy(&frozen).await;
    server.destroy(&thawed).await;
}

/// Hostile: a sandbox with a thousand processes is paused and thawed a hundred times in a row
/// (each thaw by a use that must be answered); it comes out of every one with its tunnel, the
/// same processes and nothing left frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_processes_through_a_hundred_pauses_stay_and_answer() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env).await;
    let id = s.running_agent(small("crowd")).await;
    // The thousand alone: execs and sandboxd's own helpers come and go beside them.
    let count = "ps -o comm= | grep -cx sleep || true";
    // A background process (an exec's children end with it) that forks the thousand and waits.
    let (st, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": ["sh", "-c", "for i in $(seq 1000); do sleep 3600 & done; wait"], "tag": "crowd"})),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    let processes = || async {
        s.exec_ok(&id, &["sh", "-c", count])
            .await
            .trim()
            .parse::<u64>()
            .expect("a count")
    };
    wait_for("a thousand processes", || async {
        processes().await == 1000
    })
    .await;
    let conn = s.lc.tunnels().conn_id(&id).expect("the agent's tunnel");
    // All hundred in CI too: they take a few seconds.
    for i in 0..100 {
        let (st, body) = s
            .call("POST", &format!("/api/v1/agents/{id}/pause"), None)
            .await;
        assert_eq!(st, 202, "pause {i}: {body}");
        assert_eq!(
            s.exec_ok(&id, &["echo", "up"]).await.trim(),
            "up",
            "thaw {i}"
        );
    }
    assert!(!paused_in_docker(&env, &id));
    assert_eq!(s.state(&id).await, "running");
    s.assert_same_tunnel(&id, conn);
    assert_eq!(
        processes().await,
        1000,
        "processes came or went across the pauses"
    );
    s.destroy(&id).await;
    s.stop().await;
}
