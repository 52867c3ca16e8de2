//! SIGKILL the real server binary in the middle of each operation; after a restart, reconcile
//! settles every agent (fake driver) and nothing stays in a transient state.

use crate::common::process::ServerConfig;

fn config(dir: &std::path::Path) -> ServerConfig {
    ServerConfig::write(
        dir,
        "127.0.0.1",
        "  driver: fake\n",
        crate::common::DEADLINE,
    )
}

/// Slow driver calls, so each kill lands while an operation is under way.
const SLOW: &[(&str, &str)] = &[("AGENTHOLD_FAKE_OP_DELAY_MS", "1500")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_survives_a_sigkill_halfway() {
    let dir = tempfile::tempdir().unwrap();
    let server = config(dir.path());
    let p = server.start_with_env(SLOW).await;

    // Create: killed while the driver creates.
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
    p.kill();

    // Stop, rebuild and destroy, each killed halfway.
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
        let p = server.start_with_env(SLOW).await;
        let target = if op == "destroy" { &doomed } else { &id };
        // A fake sandbox does not outlive its server, so agents wake up sleeping after a
        // restart; stop needs a running one.
        if op == "stop" && server.settled(target).await.as_deref() == Some("sleeping") {
            server.act(target, "start").await;
            server.settles_to(target, "running", "before stop").await;
        }
        server.settled(target).await;
        let (st, body) = server.call(method, &path, None).await;
        assert_eq!(st, 202, "{op}: {body}");
        p.kill();
        let p = server.start().await;
        assert_eq!(server.settled(target).await.as_deref(), want, "after {op}");
        p.kill();
    }
    // The destroyed agent's sandbox folder is gone too.
    assert!(!dir.path().join("data/fake").join(&doomed).exists());
}
