//! Lifetimes on a real engine: an agent whose `ttlMinutes` is up is destroyed with its
//! container, home volume and network, running or sleeping. A `ttlMinutes` unit is a second
//! long through `sandbox.idle_minute`. Needs Docker (scripts/docker-setup.sh) and a static
//! sandboxd (scripts/build-sandboxd.sh).

use std::time::Duration;

use crate::common::docker::*;
use crate::common::wait_for;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_agent_leaves_no_container_volume_or_network() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| {
            c.sandbox.idle_minute = Duration::from_secs(1);
            c.sandbox.idle_check_interval = Duration::from_millis(500);
            c.sandbox.default_deep_sleep_minutes = 0;
        })
        .await;
    // Long enough to be made and started on a loaded machine; the sleeping one is kept alive
    // until it sleeps, so that its own deadline finds it asleep.
    let running = s
        .running_agent(
            json!({"name": "ttl-run", "image": BUSYBOX_IMAGE, "cpus": 0.5, "ttlMinutes": 20}),
        )
        .await;
    let sleeping = s
        .running_agent(
            json!({"name": "ttl-sleep", "image": BUSYBOX_IMAGE, "cpus": 0.5, "ttlMinutes": 20}),
        )
        .await;
    s.stop_sleeping(&sleeping).await;
    let r = s
        .send(
            "POST",
            &format!("/api/v1/agents/{sleeping}/keep-alive"),
            &json!({"ttlMinutes": 3}),
        )
        .await;
    assert_eq!(r.status(), 200);
    for id in [&running, &sleeping] {
        assert!(docker_try(&["container", "inspect", &env.container(id)]).is_ok());
        assert!(docker_try(&["volume", "inspect", &env.volume(id)]).is_ok());
        assert!(docker_try(&["network", "inspect", &env.network(id)]).is_ok());
    }
    for id in [&sleeping, &running] {
        wait_for(&format!("agent {id} destroyed at its deadline"), || async {
            s.get(&format!("/api/v1/agents/{id}"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 404)
        })
        .await;
        assert!(docker_try(&["container", "inspect", &env.container(id)]).is_err());
        assert!(docker_try(&["volume", "inspect", &env.volume(id)]).is_err());
        assert!(docker_try(&["network", "inspect", &env.network(id)]).is_err());
    }
}
