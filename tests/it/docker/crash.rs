//! The crash matrix (`crate::crash`) on the Docker driver: SIGKILL the real server binary right
//! after it accepts each operation; after a restart on the same config, reconcile settles every
//! agent, and Docker ends up holding exactly what the agents need: nothing missing while they
//! exist, nothing left once they are destroyed. Changes made to sandboxes from outside while the
//! server is down (`docker stop`, `docker start`, `docker rm -f`) are settled at its next start.

use std::process::Command;
use std::time::Duration;

use crate::common::docker::*;
use crate::common::process::{docker_sandbox_yaml, ServerConfig};

/// Docker operations on a loaded machine are slower than the fake driver's: a restart may
/// redo a create and a start.
const SETTLE: Duration = Duration::from_secs(90);

/// A server on the main engine with this test's prefix and pool, agents made from busybox.
fn config(dir: &std::path::Path, env: &DockerEnv) -> ServerConfig {
    let sandbox = docker_sandbox_yaml(&env.prefix, &env.pool, BUSYBOX_IMAGE, None);
    ServerConfig::write(dir, "0.0.0.0", &sandbox, SETTLE)
}

/// The container, volume and network of `id` all exist (and the container runs or not).
fn holds(env: &DockerEnv, id: &str, running: bool) {
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.State.Running}}",
            &env.container(id)
        ]),
        running.to_string(),
        "container of {id}"
    );
    docker(&["volume", "inspect", &env.volume(id)]);
    docker(&["network", "inspect", &env.network(id)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_operations_survive_a_sigkill_right_after_they_are_accepted() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = config(dir.path(), &env);

    let driver = crate::crash::Driver {
        slow: &[],
        sandboxes_outlive_the_server: true,
    };
    // Each agent created has all its objects, its container running.
    let (id, doomed) = crate::crash::sigkill_matrix(&server, driver, |a| {
        holds(&env, &a, true);
        async {}
    })
    .await;

    // Nothing missing: the running agent has all it needs; nothing of the destroyed one is left.
    let p = server.start().await;
    server
        .settles_to(&id, "running", "phoenix at the end")
        .await;
    holds(&env, &id, true);
    for kind in [&["ps", "-a"][..], &["volume", "ls"], &["network", "ls"]] {
        let left: Vec<String> = env
            .objects(kind)
            .into_iter()
            .filter(|o| o.contains(&doomed))
            .collect();
        assert!(left.is_empty(), "{kind:?} of the destroyed agent: {left:?}");
    }
    // It answers, through a sandboxd that reconnected to the restarted server.
    assert_eq!(server.exec_ok(&id, &["echo", "ok"]).await, "ok\n");

    // Destroying it through the API leaves nothing behind.
    let (st, _) = server
        .call("DELETE", &format!("/api/v1/agents/{id}"), None)
        .await;
    assert_eq!(st, 202);
    assert_eq!(server.settled(&id).await, None);
    for kind in [&["ps", "-a"][..], &["volume", "ls"], &["network", "ls"]] {
        assert_eq!(env.objects(kind), Vec::<String>::new(), "{kind:?} left");
    }
    let rules = Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
        .expect("iptables");
    let tag = format!("agenthold:{}:", env.prefix);
    assert!(
        !String::from_utf8_lossy(&rules.stdout).contains(&tag),
        "host firewall rules outlived the agents"
    );
    p.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_stop_start_and_remove_while_the_server_is_down_are_settled_at_boot() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = config(dir.path(), &env);
    let p = server.start().await;
    let stopped = server.create_agent("stopped").await;
    let woken = server.create_agent("woken").await;
    let removed = server.create_agent("removed").await;
    for id in [&stopped, &woken, &removed] {
        server.settles_to(id, "running", "after create").await;
        server
            .exec_ok(
                id,
                &["sh", "-c", &format!("echo home-of-{id} > /home/agent/mark")],
            )
            .await;
    }
    server.act(&woken, "stop").await;
    server
        .settles_to(&woken, "sleeping", "woken, stopped through the API")
        .await;
    p.kill();

    // While nobody watches: one running sandbox stopped, one sleeping one started, one running
    // one removed (its home volume stays, as `docker rm -f` keeps named volumes).
    docker(&["stop", "-t", "5", &env.container(&stopped)]);
    docker(&["start", &env.container(&woken)]);
    let first = docker(&["inspect", "--format", "{{.Id}}", &env.container(&removed)]);
    docker(&["rm", "-f", &env.container(&removed)]);

    let p = server.start().await;
    // Stopped outside: asleep, nothing else changed.
    server
        .settles_to(&stopped, "sleeping", "stopped outside")
        .await;
    holds(&env, &stopped, false);
    // Started outside: its sandboxd still has the boot token of its last start, which the
    // server keeps for exactly this; it says hello and the agent runs.
    server
        .settles_to(&woken, "running", "started outside")
        .await;
    let mark = server.exec_ok(&woken, &["cat", "/home/agent/mark"]).await;
    assert_eq!(mark.trim(), format!("home-of-{woken}"));
    // Removed outside: asleep, and the next start makes the container anew on the kept home.
    server
        .settles_to(&removed, "sleeping", "removed outside")
        .await;
    assert!(
        docker_try(&["inspect", &env.container(&removed)]).is_err(),
        "reconcile must not make the removed container again by itself"
    );
    docker(&["volume", "inspect", &env.volume(&removed)]);
    for id in [&stopped, &removed] {
        server.act(id, "start").await;
        server.settles_to(id, "running", "started again").await;
        let mark = server.exec_ok(id, &["cat", "/home/agent/mark"]).await;
        assert_eq!(mark.trim(), format!("home-of-{id}"), "the home survived");
    }
    assert_ne!(
        docker(&["inspect", "--format", "{{.Id}}", &env.container(&removed)]),
        first,
        "the removed container was made anew"
    );
    p.kill();
}
