//! Changes made to sandboxes outside agenthold (`docker stop`, `kill`, `start`, `rm -f`) while the
//! server runs are picked up from Docker's event stream within seconds. Needs Docker; fails,
//! never skips, without it.

mod common;
#[path = "common/docker.rs"]
mod dk;

use dk::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_stop_start_kill_and_remove_are_followed() {
    let env = DockerEnv::new();
    let s = env.server(false).await;
    let id = running_agent_with(&s, "outside", AGENT_IMAGE).await;
    let container = env.container(&id);
    exec_ok(&s, &id, &["sh", "-c", "echo still-here > /home/agent/mark"]).await;

    // docker stop: the agent sleeps.
    docker(&["stop", "-t", "5", &container]);
    s.wait_state(&id, "sleeping").await;

    // docker start: sandboxd boots with the token it has, says hello, the agent runs.
    docker(&["start", &container]);
    s.wait_state(&id, "running").await;
    assert_eq!(
        exec_ok(&s, &id, &["cat", "/home/agent/mark"]).await.trim(),
        "still-here"
    );

    // docker kill: sleeping again.
    docker(&["kill", &container]);
    s.wait_state(&id, "sleeping").await;

    // Started again through the API, then removed from outside: sleeping, and the next start
    // makes the container anew with the same home.
    let r = s
        .post(&format!("/api/v1/agents/{id}/start"))
        .send()
        .await
        .expect("start");
    assert_eq!(r.status(), 202);
    s.wait_state(&id, "running").await;
    let first = docker(&["inspect", "--format", "{{.Id}}", &container]);
    docker(&["rm", "-f", &container]);
    s.wait_state(&id, "sleeping").await;
    let r = s
        .post(&format!("/api/v1/agents/{id}/start"))
        .send()
        .await
        .expect("start");
    assert_eq!(r.status(), 202);
    s.wait_state(&id, "running").await;
    assert_ne!(
        docker(&["inspect", "--format", "{{.Id}}", &container]),
        first
    );
    assert_eq!(
        exec_ok(&s, &id, &["cat", "/home/agent/mark"]).await.trim(),
        "still-here"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_an_agent_whose_container_runs_gives_it_a_fresh_token() {
    // An agent in `error` whose container still runs (say sandboxd was slow to say hello):
    // start must restart it with a new boot.json, and the stop inside that start must not be
    // mistaken for an outside stop.
    let env = DockerEnv::new();
    let s = env.server(false).await;
    let id = running_agent_with(&s, "restart", BUSYBOX_IMAGE).await;
    s.lc.store
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
    let r = s
        .post(&format!("/api/v1/agents/{id}/start"))
        .send()
        .await
        .expect("start");
    assert_eq!(r.status(), 202);
    s.wait_state(&id, "running").await;
    let after = docker(&[
        "inspect",
        "--format",
        "{{.State.StartedAt}}",
        &env.container(&id),
    ]);
    assert_ne!(before, after, "the container was not restarted");
    // It stays running: no late `die` event turns it to sleeping.
    exec_ok(&s, &id, &["sh", "-c", "true"]).await;
    assert_eq!(s.state(&id).await, "running");
    s.stop().await;
}
