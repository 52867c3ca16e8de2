//! Previews through real containers: the app (`scripts/preview-app.py`, Python's standard library
//! only) runs in a sandbox of the ready agent image and is reached through the preview listener
//! and the tunnel (docs/api.md, "Ports and previews"). Needs Docker (scripts/docker-setup.sh),
//! the ready agent image (scripts/build-agent-image.sh) and a static sandboxd
//! (scripts/build-sandboxd.sh).

use serde_json::{json, Value};

use crate::common::docker::*;
use crate::common::{wait_for_value, TestServer};
use agenthold::config::AGENT_IMAGE as DEV_IMAGE;

/// The app every test serves, copied into the sandbox's home.
const APP: &str = include_str!("../../../scripts/preview-app.py");
const APP_FILE: &str = "/home/agent/preview-app.py";

/// The ready agent image (it has python3); its absence fails the test.
async fn dev_agent(s: &TestServer, name: &str) -> String {
    if docker_try(&["image", "inspect", DEV_IMAGE]).is_err() {
        panic!("image {DEV_IMAGE} is missing; run scripts/build-agent-image.sh first");
    }
    s.running_agent((name, DEV_IMAGE)).await
}

/// What listens in agent `id`'s sandbox, as `GET …/ports` answers.
async fn ports(s: &TestServer, id: &str) -> Vec<Value> {
    let listed = s.get_json(&format!("/api/v1/agents/{id}/ports")).await;
    serde_json::from_value(listed).expect("a list of ports")
}

/// The listing's entry for `port`, if it listens.
async fn listed(s: &TestServer, id: &str, port: u16) -> Option<Value> {
    ports(s, id).await.into_iter().find(|p| p["port"] == port)
}

/// Starts `command` as a background process of agent `id` and waits until `port` listens.
async fn serve(s: &TestServer, id: &str, command: &[&str], port: u16) -> Value {
    let (status, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": command, "cwd": "/home/agent"})),
        )
        .await;
    assert_eq!(status, 201, "starting {command:?}: {body}");
    let pid = body["id"].as_str().expect("process id").to_string();
    wait_for_value(&format!("port {port} listening in {id}"), || async {
        if let Some(p) = listed(s, id, port).await {
            return Some(p);
        }
        // A process that ended will never listen: say why.
        let p = s
            .get_json(&format!("/api/v1/agents/{id}/processes/{pid}"))
            .await;
        assert_eq!(p["state"], "running", "{command:?} ended: {p}");
        None
    })
    .await
}

/// Copies the app into agent `id` and serves it on `address` at `port`; the listing's entry.
async fn serve_app(s: &TestServer, id: &str, port: u16, address: &str) -> Value {
    s.write_tree(id, &[("preview-app.py", APP)]).await;
    let port_arg = port.to_string();
    serve(
        s,
        id,
        &["python3", APP_FILE, port_arg.as_str(), address],
        port,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_lists_the_apps_listeners_with_their_process_and_nothing_while_asleep() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "ports").await;
    assert_eq!(listed(&s, &id, 8123).await, None);

    let on_loopback = serve_app(&s, &id, 8123, "127.0.0.1").await;
    assert_eq!(
        on_loopback,
        json!({"port": 8123, "address": "127.0.0.1", "process": "python3"})
    );
    let on_all = serve_app(&s, &id, 8124, "0.0.0.0").await;
    assert_eq!(
        on_all,
        json!({"port": 8124, "address": "0.0.0.0", "process": "python3"})
    );
    // By port, each (port, address) once.
    let all = ports(&s, &id).await;
    let listed_ports: Vec<u64> = all
        .iter()
        .map(|p| p["port"].as_u64().expect("port"))
        .collect();
    let mut sorted = listed_ports.clone();
    sorted.sort_unstable();
    assert_eq!(listed_ports, sorted, "{all:?}");

    // Asleep: nothing is listed, and the listing does not wake the agent.
    s.stop_sleeping(&id).await;
    assert_eq!(ports(&s, &id).await, Vec::<Value>::new());
    assert_eq!(s.state(&id).await, "sleeping");
    s.stop().await;
}
