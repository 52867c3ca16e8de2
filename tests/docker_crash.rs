//! SIGKILL the real server binary right after it accepts each operation on the Docker driver;
//! after a restart on the same config, reconcile settles every agent, and Docker ends up holding
//! exactly what the agents need: nothing missing while they exist, nothing left once they are
//! destroyed. Needs Docker (scripts/docker-setup.sh) and a static sandboxd
//! (scripts/build-sandboxd.sh); fails, never skips, without them.

mod common;
#[path = "common/docker.rs"]
mod dk;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TOKEN;
use dk::*;
use serde_json::{json, Value};

/// Docker operations on a loaded machine are slower than the fake driver's: a restart may
/// redo a create and a start.
const SETTLE: Duration = Duration::from_secs(90);

struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn write_config(dir: &Path, env: &DockerEnv) -> (PathBuf, String) {
    let api = free_port();
    let tunnel = free_port();
    let sandboxd = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sandboxd/sandboxd");
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:{api}\n  data_dir: {data}\n  admin_token: {TOKEN}\n\
         sandbox:\n  driver: docker\n  tunnel_listen: 0.0.0.0:{tunnel}\n  default_image: {BUSYBOX_IMAGE}\n\
         \x20 default_cpus: 1\n  default_memory_mb: 128\n  sandboxd_path: {sandboxd}\n\
         \x20 docker:\n    name_prefix: {prefix}\n    network_pool: {pool}\n",
        data = dir.join("data").display(),
        sandboxd = sandboxd.display(),
        prefix = env.prefix,
        pool = env.pool,
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    (path, format!("http://127.0.0.1:{api}"))
}

async fn start(config: &Path, base: &str) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["serve", "--config"])
        .arg(config)
        // AGENTHOLD_TEST_LOG=info shows what each restart's reconcile found.
        .env(
            "AGENTHOLD_LOG",
            std::env::var("AGENTHOLD_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the server");
    let p = Proc { child };
    let http = reqwest::Client::new();
    // Reconcile runs before the API answers; it may redo Docker work.
    let deadline = Instant::now() + SETTLE;
    loop {
        if http
            .get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
        {
            return p;
        }
        assert!(Instant::now() < deadline, "the server did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn kill(mut p: Proc) {
    // SIGKILL: no shutdown code runs.
    p.child.kill().expect("kill");
    p.child.wait().expect("wait");
}

async fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let mut req = http
        .request(method.parse().expect("method"), format!("{base}{path}"))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Waits until the agent is in a settled state (`None` once it is gone) and returns it; an
/// agent in `error` is returned as `error: <message>`.
async fn settled(base: &str, id: &str) -> Option<String> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let (status, a) = call(base, "GET", &format!("/api/v1/agents/{id}"), None).await;
        if status == 404 {
            return None;
        }
        let state = a["state"].as_str().unwrap_or_default().to_string();
        match state.as_str() {
            "running" | "sleeping" => return Some(state),
            "error" => return Some(format!("error: {}", a["error"])),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "agent {id} stuck in {state} after restart: {a}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create(base: &str, name: &str) -> String {
    let (st, a) = call(base, "POST", "/api/v1/agents", Some(json!({"name": name}))).await;
    assert_eq!(st, 201, "{a}");
    a["id"].as_str().expect("id").to_string()
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
    let env = DockerEnv::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, base) = write_config(dir.path(), &env);

    // Create: killed while the driver makes the first objects.
    let p = start(&config, &base).await;
    let id = create(&base, "phoenix").await;
    let doomed = create(&base, "doomed").await;
    kill(p);
    let p = start(&config, &base).await;
    assert_eq!(settled(&base, &id).await.as_deref(), Some("running"));
    assert_eq!(settled(&base, &doomed).await.as_deref(), Some("running"));
    holds(&env, &id, true);
    holds(&env, &doomed, true);
    kill(p);

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
        let p = start(&config, &base).await;
        let target = if op == "destroy" { &doomed } else { &id };
        // Containers outlive the server, so the agent is as the last round left it.
        assert!(
            settled(&base, target)
                .await
                .is_some_and(|s| !s.starts_with("error")),
            "before {op}"
        );
        let (st, body) = call(&base, method, &path, None).await;
        assert_eq!(st, 202, "{op}: {body}");
        kill(p);
        let p = start(&config, &base).await;
        assert_eq!(settled(&base, target).await.as_deref(), want, "after {op}");
        // The other agent was not disturbed.
        let other = if op == "destroy" { &id } else { &doomed };
        assert_eq!(
            settled(&base, other).await.as_deref(),
            Some("running"),
            "the other agent after {op}"
        );
        kill(p);
    }

    // Nothing missing: the running agent has all it needs; nothing of the destroyed one is left.
    let p = start(&config, &base).await;
    assert_eq!(settled(&base, &id).await.as_deref(), Some("running"));
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
    let (st, out) = call(
        &base,
        "POST",
        &format!("/api/v1/agents/{id}/exec"),
        Some(json!({"command": ["echo", "ok"], "timeoutMs": 20000})),
    )
    .await;
    assert_eq!((st, out["stdout"].as_str()), (200, Some("ok\n")), "{out}");

    // Destroying it through the API leaves nothing behind.
    let (st, _) = call(&base, "DELETE", &format!("/api/v1/agents/{id}"), None).await;
    assert_eq!(st, 202);
    assert_eq!(settled(&base, &id).await, None);
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
    kill(p);
}
