//! The real server binary run as a process of its own, on a config file and data folder that
//! outlive it, for the tests that SIGKILL it and start it again (`crash`, `docker::crash`,
//! `docker::daemon_restart`, `docker::repair`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::share::Shared;
use crate::common::{free_port, Client, TOKEN};

/// A server's config file and how to reach it. Each [`ServerConfig::start`] runs one server
/// process on it; agents and data carry over from one to the next.
pub struct ServerConfig {
    pub path: PathBuf,
    /// The tunnel's port (on the `tunnel_ip` given to [`ServerConfig::write`]).
    pub tunnel_port: u16,
    /// The API at `http://127.0.0.1:PORT`; its deadline is how long the server may take to come
    /// up (reconcile runs first), and an agent to settle.
    pub api: Client,
    /// The share of the machine (see [`crate::common::exclusive`]) of the servers run on this
    /// config, taken at the first start and kept until the config is dropped, so that no
    /// exclusive test runs between a kill and the restart.
    share: std::sync::Mutex<Option<Shared>>,
}

impl std::ops::Deref for ServerConfig {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.api
    }
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
            "server:\n  listen: 127.0.0.1:{api}\n  data_dir: {data}\n  admin_token: {TOKEN}\n  previews:\n    listen: 127.0.0.1:0\n\
             sandbox:\n  tunnel_listen: {tunnel_ip}:{tunnel}\n  egress:\n    port: 0\n    dns_port: 0\n{sandbox}",
            data = dir.join("data").display(),
        );
        let path = dir.join("config.yaml");
        std::fs::write(&path, yaml).expect("write config.yaml");
        ServerConfig {
            path,
            tunnel_port: tunnel,
            api: Client::new(format!("http://127.0.0.1:{api}"), settle),
            share: std::sync::Mutex::new(None),
        }
    }

    /// Starts `agenthold serve` on this config and waits until its API answers.
    pub async fn start(&self) -> ServerProcess {
        self.start_with_env(&[]).await
    }

    /// [`ServerConfig::start`] with extra environment variables.
    pub async fn start_with_env(&self, env: &[(&str, &str)]) -> ServerProcess {
        self.start_inner(env, Stdio::inherit()).await
    }

    /// [`ServerConfig::start`] with the server's log (its stderr) written to `log`.
    pub async fn start_logging_to(&self, log: &Path) -> ServerProcess {
        self.start_logging_to_with_env(log, &[]).await
    }

    /// [`ServerConfig::start_logging_to`] with extra environment variables.
    pub async fn start_logging_to_with_env(
        &self,
        log: &Path,
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let file = std::fs::File::create(log).expect("create the server's log file");
        self.start_inner(env, Stdio::from(file)).await
    }

    async fn start_inner(&self, env: &[(&str, &str)], stderr: Stdio) -> ServerProcess {
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
            .stderr(stderr);
        // A test killed halfway (Ctrl-C, a CI timeout) must not leave its server running: the
        // kernel kills the server with the test's thread that started it.
        // SAFETY: prctl is async-signal-safe, as code between fork and exec must be.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let held = self
            .share
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if !held {
            let share = Shared::take().await;
            *self.share.lock().unwrap_or_else(|e| e.into_inner()) = share;
        }
        let child = cmd.spawn().expect("spawn the server");
        let mut p = ServerProcess { child };
        let http = reqwest::Client::new();
        // Reconcile runs before the API answers, and on Docker it may redo a create and a start.
        let deadline = Instant::now() + self.deadline;
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
                self.deadline
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the server `signal` (`SIGHUP` to make it read its config again).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).expect("a pid"));
        nix::sys::signal::kill(pid, signal).expect("signal the server");
    }

    /// Whether the process still runs (it has not exited, nor been restarted).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
