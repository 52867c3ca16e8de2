//! A restart of dockerd itself — killed (SIGKILL) or stopped (SIGTERM), while the server runs and
//! while it is down — is followed: the server takes up Docker's event stream again once dockerd
//! answers, every agent settles (dockerd stops the containers it finds at its restart, so running
//! agents fall asleep; nothing stays in a transient state), and starts, execs and outside changes
//! work as before.
//!
//! Restarting the engine that every other Docker test shares would break them, so this test runs
//! a second dockerd of its own ([`Engine`], in `common/engine.rs`). Needs Docker
//! (scripts/docker-setup.sh), root and a static sandboxd (scripts/build-sandboxd.sh).

use std::time::Duration;

use crate::common::docker::*;
use crate::common::engine::Engine;
use crate::common::process::{docker_sandbox_yaml, ServerConfig};
use nix::sys::signal::Signal;

/// Agents settle after a dockerd restart, which may take a while on a loaded machine.
const SETTLE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_dockerd_is_followed_again_and_every_agent_settles() {
    // The prefix, and on drop the removal of the server's host firewall rules.
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // The engine loads images onto the host's disk: no exclusive test measures it meanwhile.
    let _share = crate::common::Shared::take().await;
    let mut engine = Engine::new();
    // For a later run, should this one be interrupted: whose firewall rules to remove.
    engine.serves(&env.prefix);
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = docker_sandbox_yaml(
        &env.prefix,
        &engine.pool(),
        BUSYBOX_IMAGE,
        Some(&engine.socket()),
    );
    let server = ServerConfig::write(dir.path(), "0.0.0.0", &sandbox, SETTLE);
    let p = server.start().await;
    let a = server.create_agent("alpha").await;
    let b = server.create_agent("bravo").await;
    let c = server.create_agent("charlie").await;
    for id in [&a, &b, &c] {
        server.settles_to(id, "running", "after create").await;
    }
    server
        .exec_ok(&a, &["sh", "-c", "echo kept > /home/agent/mark"])
        .await;
    server.act(&c, "stop").await;
    server.wait_state(&c, "sleeping").await;

    // 1. dockerd killed while the server runs. At its restart it stops the containers it finds
    //    running (no live-restore), so the running agents fall asleep; the sleeping one stays.
    engine.restart_after(Signal::SIGKILL);
    for id in [&a, &b, &c] {
        server.wait_state(id, "sleeping").await;
    }
    assert_eq!(engine.running(&env.container(&a)), "false");
    // Starts and execs work on the restarted engine, with the home kept.
    server.act(&a, "start").await;
    server.settles_to(&a, "running", "started again").await;
    assert_eq!(
        server.exec_ok(&a, &["cat", "/home/agent/mark"]).await,
        "kept\n"
    );
    // The event stream is live again: an outside stop is seen.
    engine.docker(&["stop", "-t", "5", &env.container(&a)]);
    server.wait_state(&a, "sleeping").await;

    // 2. dockerd stopped gracefully while the server runs: it stops the containers itself.
    server.act(&b, "start").await;
    server
        .settles_to(&b, "running", "before the graceful restart")
        .await;
    engine.restart_after(Signal::SIGTERM);
    server.wait_state(&b, "sleeping").await;
    // An outside start after the reconnect is followed too: sandboxd says hello, it runs.
    engine.docker(&["start", &env.container(&b)]);
    server.wait_state(&b, "running").await;
    assert_eq!(server.exec_ok(&b, &["echo", "back"]).await, "back\n");

    // 3. dockerd killed and restarted while the server is down: settled at the server's start.
    //    And a create the server was killed in (made anew at its start), of an agent whose home
    //    exists but no container: Docker's first answer about that home after its restart lacks
    //    the labels, which must not make it look like somebody else's.
    p.kill();
    engine.docker(&["rm", "-f", &env.container(&c)]);
    engine.restart_after(Signal::SIGKILL);
    assert_eq!(engine.running(&env.container(&b)), "false");
    rusqlite::Connection::open(dir.path().join("data/agenthold.db"))
        .expect("open the database")
        .execute("UPDATE agents SET state = 'creating' WHERE id = ?1", [&c])
        .expect("c in the middle of its create");
    let p = server.start().await;
    for id in [&a, &b] {
        server
            .settles_to(
                id,
                "sleeping",
                "after dockerd restarted while the server was down",
            )
            .await;
    }
    server
        .settles_to(&c, "running", "its create made anew")
        .await;
    server.act(&b, "start").await;
    server
        .settles_to(&b, "running", "started after both restarts")
        .await;
    assert_eq!(server.exec_ok(&b, &["echo", "ok"]).await, "ok\n");

    engine.assert_main_engine_untouched();
    p.kill();
}
