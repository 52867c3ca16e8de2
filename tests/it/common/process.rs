//! The real server binary run as a process of its own, on a config file and data folder that
//! outlive it, for the tests that SIGKILL it and start it again (`crash.rs`, `docker_crash.rs`,
//! `docker_daemon_restart.rs`).

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::TOKEN;

/// A port free on loopback right now (the server binds it a moment later).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A server's config file and how to reach it. Each [`ServerConfig::start`] runs one server
/// process on it; agents and data carry over from one to the next.
pub struct ServerConfig {
    pub path: PathBuf,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// How long the server may take to come up (reconcile runs first), and an agent to settle.
    pub settle: Duration,
}

/// The `sandbox:` lines for the Docker driver with a test's own prefix and address pool, the
/// static sandboxd of `scripts/build-sandboxd.sh`, and `socket` as the engine (`None`: the
/// default one).
pub fn docker_sandbox_yaml(prefix: &str, pool: &str, image: &str, socket: Option<&Path>) -> String {
    let sandboxd = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sandboxd/sandboxd");
    let mut yaml = format!(
        "  driver: docker\n  default_image: {image}\n  default_cpus: 1\n  default_memory_mb: 128\n\
         \x20 sandboxd_path: {sandboxd}\n  docker:\n    name_prefix: {prefix}\n    network_pool: {pool}\n",
        sandboxd = sandboxd.display(),
    );
    if let Some(socket) = socket {
        yaml.push_str(&format!("    socket: {}\n", socket.display()));
    }
    yaml
}

impl ServerConfig {
    /// Writes `dir/config.yaml`: the API on a free loopback port, the tunnel on a free port of
    /// `tunnel_ip` (sandboxes in containers dial a bridge address, so Docker needs `0.0.0.0`),
    /// data in `dir/data`, the test token, and `sandbox` (lines under `sandbox:`, indented by
    /// two spaces).
    pub fn write(dir: &Path, tunnel_ip: &str, sandbox: &str, settle: Duration) -> ServerConfig {
        let api = free_port();
        let tunnel = free_port();
        let yaml = format!(
            "server:\n  listen: 127.0.0.1:{api}\n  data_dir: {data}\n  admin_token: {TOKEN}\n\
             sandbox:\n  tunnel_listen: {tunnel_ip}:{tunnel}\n  egress:\n    port: 0\n    dns_port: 0\n{sandbox}",
            data = dir.join("data").display(),
        );
        let path = dir.join("config.yaml");
        std::fs::write(&path, yaml).expect("write config.yaml");
        ServerConfig {
            path,
            base: format!("http://127.0.0.1:{api}"),
            settle,
        }
    }

    /// Starts `agenthold serve` on this config and waits until its API answers.
    pub async fn start(&self) -> ServerProcess {
        self.start_with_env(&[]).await
    }

    /// [`ServerConfig::start`] with extra environment variables.
    pub async fn start_with_env(&self, env: &[(&str, &str)]) -> ServerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agenthold"));
        cmd.args(["serve", "--config"])
            .arg(&self.path)
            // AGENTHOLD_TEST_LOG=info shows what each restart's reconcile found.
            .env(
                "AGENTHOLD_LOG",
                std::env::var("AGENTHOLD_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // A test killed halfway (Ctrl-C, a CI timeout) must not leave its server running: the
        // kernel kills the server with the test's thread that started it.
        // SAFETY: prctl is async-signal-safe, as code between fork and exec must be.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().expect("spawn the server");
        let mut p = ServerProcess { child };
        let http = reqwest::Client::new();
        // Reconcile runs before the API answers, and on Docker it may redo a create and a start.
        let deadline = Instant::now() + self.settle;
        loop {
            if http
                .get(format!("{}/api/v1/health", self.base))
                .send()
                .await
                .is_ok()
            {
                return p;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("the server exited ({status}) before its API answered; see its log above");
            }
            assert!(
                Instant::now() < deadline,
                "the server did not answer within {:?}",
                self.settle
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One API request with the test token: the status and the JSON body (`null` if none).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let http = reqwest::Client::new();
        let mut req = http
            .request(
                method.parse().expect("method"),
                format!("{}{path}", self.base),
            )
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Creates an agent (with the default image unless `image` names one) and returns its id.
    pub async fn create(&self, name: &str, image: Option<&str>) -> String {
        let mut body = json!({ "name": name });
        if let Some(image) = image {
            body["image"] = json!(image);
        }
        let (st, a) = self.call("POST", "/api/v1/agents", Some(body)).await;
        assert_eq!(st, 201, "create {name}: {a}");
        a["id"].as_str().expect("id").to_string()
    }

    /// Asks for `op` (`start`, `stop`, `rebuild`) and expects it accepted.
    pub async fn op(&self, id: &str, op: &str) {
        let (st, a) = self
            .call("POST", &format!("/api/v1/agents/{id}/{op}"), None)
            .await;
        assert_eq!(st, 202, "{op} {id}: {a}");
    }

    /// Waits until the agent is in a settled state and returns it (`None` once it is gone); an
    /// agent in `error` is returned as `error: <message>`. Fails the test when it stays in a
    /// transient state longer than [`ServerConfig::settle`].
    pub async fn settled(&self, id: &str) -> Option<String> {
        let deadline = Instant::now() + self.settle;
        loop {
            let (status, a) = self
                .call("GET", &format!("/api/v1/agents/{id}"), None)
                .await;
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
                "agent {id} stuck in {state} for {:?}: {a}",
                self.settle
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the agent is in `want`, whatever it passes through on the way, and returns
    /// it; `error` fails the test unless wanted.
    pub async fn wait_state(&self, id: &str, want: &str) -> Value {
        let deadline = Instant::now() + self.settle;
        loop {
            let (status, a) = self
                .call("GET", &format!("/api/v1/agents/{id}"), None)
                .await;
            assert_eq!(status, 200, "agent {id}: {a}");
            let state = a["state"].as_str().unwrap_or_default();
            if state == want {
                return a;
            }
            assert_ne!(
                state, "error",
                "agent {id} failed while waiting for {want}: {a}"
            );
            assert!(
                Instant::now() < deadline,
                "agent {id} did not become {want} within {:?}: {a}",
                self.settle
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the agent is `want` (a settled state); fails on any other settled state.
    pub async fn settles_to(&self, id: &str, want: &str, what: &str) {
        assert_eq!(self.settled(id).await.as_deref(), Some(want), "{what}");
    }

    /// Runs `command` in the agent through the exec API; returns stdout, failing unless it
    /// exits 0.
    pub async fn exec_ok(&self, id: &str, command: &[&str]) -> String {
        let (st, out) = self
            .call(
                "POST",
                &format!("/api/v1/agents/{id}/exec"),
                Some(json!({"command": command, "timeoutMs": 20000})),
            )
            .await;
        assert_eq!(
            (st, &out["exitCode"]),
            (200, &json!(0)),
            "exec {command:?}: {out}"
        );
        out["stdout"].as_str().unwrap_or_default().to_string()
    }
}

/// A running server process; dropping it kills it.
pub struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    /// SIGKILL: no shutdown code runs, as in a crash.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL the server");
        self.child.wait().expect("wait for the server");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
