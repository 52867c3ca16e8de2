//! The agenthold server the benchmark starts for itself: a child process on a temporary data
//! directory, with its own name prefix and address range, so its memory can be measured alone.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

use crate::cli::ApiClient;

pub struct ServerProc {
    child: Child,
    pub client: ApiClient,
    pub base: String,
    /// The preview listener (`server.previews.listen`).
    pub previews: SocketAddr,
    pub token: String,
    config: PathBuf,
    log: PathBuf,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The made-up name of the benchmark's test servers (`sandbox.egress.resolve` maps it to
/// 127.0.0.1).
pub const EGRESS_NAME: &str = "bench.test";

/// `sandbox.process_output_kb` of the benchmark's server: the most there is (1 GiB), so a
/// follower of the biggest output measured here is never skipped ahead (see the processes case).
/// Kept on the sandbox's disk, not in memory, and only by processes that write that much.
pub const OUTPUT_KIB: u64 = agenthold_proto::process::MAX_OUTPUT / 1024;

/// Where the folder holding the test agent (`acp-test-agent/`) is mounted in the benchmark's
/// sandboxes, when the sessions case runs.
pub const TEST_AGENT_MOUNT: &str = "/opt/acp";

/// Writes the benchmark server's config into `dir`. With `test_agent` (a folder holding only
/// the static `acp-test-agent`), every sandbox gets that folder at [`TEST_AGENT_MOUNT`], and the
/// agent is the server's default harness. Returns the config's path, the API's base URL and the
/// preview listener's address.
pub fn write_config(
    dir: &Path,
    prefix: &str,
    image: &str,
    test_agent: Option<&Path>,
) -> anyhow::Result<(PathBuf, String, SocketAddr)> {
    let api = free_port()?;
    let tunnel = free_port()?;
    let previews = free_port()?;
    // 160 streams per agent: the previews case holds 100 WebSockets at once, more than the
    // previews' share of the default 128 (all but 32, which stay the API's).
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:{api}\n  data_dir: {data}\n  previews:\n    listen: 127.0.0.1:{previews}\n\
         sandbox:\n  driver: docker\n  default_image: {image}\n  default_cpus: 1\n  default_memory_mb: 512\n  \
         process_output_kb: {process_kib}\n  max_streams_per_agent: 160\n  warm_max: 64\n  \
         tunnel_listen: 0.0.0.0:{tunnel}\n  egress:\n    port: 0\n    dns_port: 0\n    resolve: {{{name}: 127.0.0.1, {secret_name}: 127.0.0.1}}\n    ca_certificates: {ca}\n  docker:\n    name_prefix: {prefix}\n    network_pool: 10.214.0.0/16\n",
        data = dir.join("data").display(),
        name = EGRESS_NAME,
        secret_name = crate::bench::servers::SECRET_NAME,
        ca = serde_json::to_string(&dir.join(crate::bench::servers::CA_FILE))?,
        process_kib = OUTPUT_KIB,
    );
    // "The internet" over HTTPS, trusted by the proxy and every sandbox (the secrets case).
    crate::bench::servers::write_internet_pki(dir, &[EGRESS_NAME])?;
    if let Some(folder) = test_agent {
        // JSON strings are YAML strings: the folder's path needs no quoting rules of its own.
        let mount = serde_json::to_string(&format!("{}:{TEST_AGENT_MOUNT}:ro", folder.display()))?;
        yaml.push_str(&format!(
            "    host_mounts: [{mount}]\n  default_harness: bench\n\
             harnesses:\n  bench:\n    command: [{TEST_AGENT_MOUNT}/acp-test-agent]\n    \
             description: \"the model-free ACP test agent (acp-test-agent/)\"\n"
        ));
    }
    // One warm pool entry, for the create case's pooled row (idle otherwise); the presets come
    // last, for [`ServerProc::set_extra_presets`] to add to.
    yaml.push_str(&format!(
        "presets:\n  {}:\n    warm: 1\n",
        crate::bench::cases::create::POOL_PRESET
    ));
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml)?;
    Ok((
        path,
        format!("http://127.0.0.1:{api}"),
        SocketAddr::from(([127, 0, 0, 1], previews)),
    ))
}

impl ServerProc {
    pub async fn start(
        config: &Path,
        base: &str,
        previews: SocketAddr,
        token: &str,
        log: &Path,
    ) -> anyhow::Result<ServerProc> {
        let exe = std::env::current_exe().context("finding the agenthold binary")?;
        let logfile = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = Command::new(exe)
            .args(["serve", "--config"])
            .arg(config)
            .env("AGENTHOLD_ADMIN_TOKEN", token)
            // Warnings only, unless the caller asks for more (e.g. `agenthold::driver=debug` for
            // the create steps) by setting AGENTHOLD_LOG, which the child inherits.
            .env(
                "AGENTHOLD_LOG",
                std::env::var("AGENTHOLD_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logfile)
            .kill_on_drop(true)
            .spawn()
            .context("starting the benchmark's server")?;
        let client = ApiClient::new(base, Some(token))?;
        let mut p = ServerProc {
            child,
            client,
            base: base.to_string(),
            previews,
            token: token.to_string(),
            config: config.to_path_buf(),
            log: log.to_path_buf(),
        };
        p.wait_healthy(Duration::from_secs(60)).await?;
        Ok(p)
    }

    async fn wait_healthy(&mut self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if self.client.health().await.is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the benchmark's server exited ({status}); its log is {}",
                    self.log.display()
                );
            }
            if Instant::now() > deadline {
                bail!("the benchmark's server did not answer within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Puts `presets` (lines under `presets:`, indented by two spaces; empty: none) beside the
    /// config's own presets, in place of those a call before added, and has the server read
    /// its config again.
    pub async fn set_extra_presets(&self, presets: &str) -> anyhow::Result<()> {
        const MARK: &str = "  # added by a benchmark case\n";
        let text = std::fs::read_to_string(&self.config)
            .with_context(|| format!("reading {}", self.config.display()))?;
        let own = text.split(MARK).next().unwrap_or_default();
        std::fs::write(&self.config, format!("{own}{MARK}{presets}"))
            .with_context(|| format!("writing {}", self.config.display()))?;
        self.client.reload_config().await?;
        Ok(())
    }

    /// Resident memory of the server process, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid()?)
    }

    /// Stops the server (SIGTERM, then SIGKILL after 10 s) and starts it again on the same data.
    /// Returns how long the start took until the API answered.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        let fresh = ServerProc::start(
            &self.config,
            &self.base,
            self.previews,
            &self.token,
            &self.log,
        )
        .await?;
        *self = fresh;
        Ok(())
    }

    pub async fn stop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}

/// `VmRSS` of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The pids of `pid`'s children.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}
