//! SIGKILL the real server binary in the middle of each operation; after a restart, reconcile
//! settles every agent and nothing stays in a transient state. [`sigkill_matrix`] is the matrix
//! of operations; it runs here on the fake driver and in `docker::crash` on Docker.

use std::future::Future;

use crate::common::process::ServerConfig;

/// What the matrix needs to know of a driver.
pub struct Driver<'a> {
    /// Extra environment of the server runs that are killed halfway (slow driver calls).
    pub slow: &'a [(&'a str, &'a str)],
    /// Whether sandboxes outlive their server (Docker's do; the fake driver's end with it, so
    /// its agents wake up sleeping after a restart).
    pub sandboxes_outlive_the_server: bool,
}

/// Creates two agents and kills the server while the driver creates them, then stops, starts,
/// rebuilds (the first) and destroys (the second), each accepted and killed halfway; after each
/// restart the agent settles where the operation leads. `check_created` looks at each agent
/// once the restart after the create has settled it. Returns the ids of the surviving agent
/// and the destroyed one.
pub async fn sigkill_matrix<F: Future<Output = ()>>(
    server: &ServerConfig,
    driver: Driver<'_>,
    check_created: impl Fn(String) -> F,
) -> (String, String) {
    // Create: killed while the driver creates.
    let p = server.start_with_env(driver.slow).await;
    let id = server.create_agent("phoenix").await;
    let doomed = server.create_agent("doomed").await;
    p.kill();
    let p = server.start().await;
    server
        .settles_to(&id, "running", "phoenix after create")
        .await;
    server
        .settles_to(&doomed, "running", "doomed after create")
        .await;
    check_created(id.clone()).await;
    check_created(doomed.clone()).await;
    p.kill();

    // Stop, start, rebuild and destroy, each killed halfway.
    for (op, method, path, want) in [
        (
            "stop",
            "POST",
            format!("/api/v1/agents/{id}/stop"),
            Some("sleeping"),
        ),
        (
            "start",
            "POST",
            format!("/api/v1/agents/{id}/start"),
            Some("running"),
        ),
        (
            "rebuild",
            "POST",
            format!("/api/v1/agents/{id}/rebuild"),
            Some("running"),
        ),
        (
            "destroy",
            "DELETE",
            format!("/api/v1/agents/{doomed}"),
            None,
        ),
    ] {
        let p = server.start_with_env(driver.slow).await;
        let target = if op == "destroy" { &doomed } else { &id };
        let before = server.settled(target).await;
        if driver.sandboxes_outlive_the_server {
            // The agent is as the last round left it.
            assert!(
                before.is_some_and(|s| !s.starts_with("error")),
                "before {op}"
            );
        } else if op == "stop" && before.as_deref() == Some("sleeping") {
            // Stop needs a running agent.
            server.act(target, "start").await;
            server.settles_to(target, "running", "before stop").await;
        }
        let (st, body) = server.call(method, &path, None).await;
        assert_eq!(st, 202, "{op}: {body}");
        p.kill();
        let p = server.start().await;
        assert_eq!(server.settled(target).await.as_deref(), want, "after {op}");
        if driver.sandboxes_outlive_the_server {
            // The other agent was not disturbed.
            let other = if op == "destroy" { &id } else { &doomed };
            server
                .settles_to(other, "running", &format!("the other agent after {op}"))
                .await;
        }
        p.kill();
    }
    (id, doomed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_survives_a_sigkill_halfway() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerConfig::write(
        dir.path(),
        "127.0.0.1",
        "  driver: fake\n",
        crate::common::DEADLINE,
    );
    let driver = Driver {
        // Slow driver calls, so each kill lands while an operation is under way.
        slow: &[("AGENTHOLD_FAKE_OP_DELAY_MS", "1500")],
        sandboxes_outlive_the_server: false,
    };
    let (_, doomed) = sigkill_matrix(&server, driver, |_| async {}).await;
    // The destroyed agent's sandbox folder is gone too.
    assert!(!dir.path().join("data/fake").join(&doomed).exists());
}
