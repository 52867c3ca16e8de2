//! The fake driver: every sandbox is sandboxd's channel code running inside the server, against
//! a home folder under the data directory. Terminals and commands run on the server's machine as
//! the server's user: for development and tests only.
//!
//! It still dials the server's real tunnel endpoint over a loopback WebSocket, so everything
//! above the driver is exercised exactly as with Docker.
//!
//! Images need nothing, except those under [`FAKE_REGISTRY`]: the first use of each in a server
//! pretends to pull it, reporting a short synthetic progress sequence, so that pull progress in
//! the API and the web UI can be seen and tested without Docker. A name under it that starts
//! with `missing` (`pull.invalid/missing:1`) fails like an image the registry does not have.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use agenthold_proto::boot::BootConfig;
use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{
    Driver, DriverError, DriverEvent, Limits, PullMeter, PullSink, SandboxInfo, SandboxSpec,
    SandboxStatus,
};
use crate::agents::runtimes::EngineRuntimes;

/// Environment variable that slows every driver operation down, so tests can crash the server
/// in the middle of one.
pub const OP_DELAY_ENV: &str = "AGENTHOLD_FAKE_OP_DELAY_MS";

/// Images whose name starts with this are pulled (in pretence) on first use; `.invalid` is a
/// name that no real registry can have.
pub const FAKE_REGISTRY: &str = "pull.invalid/";
/// The pretended pull: this many layers of this size, each downloaded in this many steps, one
/// step per interval (about a second in all: several throttled progress reports).
const FAKE_LAYERS: u64 = 3;
const FAKE_LAYER_BYTES: u64 = 4 << 20;
const FAKE_STEPS: u64 = 4;
const FAKE_STEP: Duration = Duration::from_millis(80);
/// The runtimes the fake engine pretends to have; a sandbox asking for another fails to start,
/// as under Docker. The runtime changes nothing else: it is recorded in the sandbox's folder
/// (file [`RUNTIME_FILE`]) for tests to read.
pub const FAKE_RUNTIMES: [&str; 2] = ["runc", "runsc"];
/// The file in a fake sandbox's folder (beside `home`) that names its runtime.
pub const RUNTIME_FILE: &str = "runtime";
/// A file in a fake sandbox's folder that holds a pause half-way until it is removed (tests).
pub const PAUSE_HOLD: &str = "pause.hold";
/// The file a held pause writes when it waits on [`PAUSE_HOLD`].
pub const PAUSE_WAITING: &str = "pause.waiting";

/// The file in a fake sandbox's folder holding its CPU and memory limits
/// (`cpus=1 memoryMb=512`), written at its making and at a resize, for tests to read.
pub const LIMITS_FILE: &str = "limits";

/// The file in a fake sandbox's folder holding the security options a container of its spec
/// gets (`no-new-privileges:true`, or nothing for an agent allowed root), for tests to read:
/// the fake has no container to hold them, and its commands run as the server's own user.
pub const SECURITY_OPT_FILE: &str = "security_opt";

struct Running {
    cancel: CancellationToken,
    task: JoinHandle<()>,
    /// Paused in pretence: an in-process sandboxd cannot be frozen, so it goes on answering;
    /// only [`Driver::inspect`] tells the difference.
    paused: bool,
}

pub struct FakeDriver {
    root: PathBuf,
    tunnel: SocketAddr,
    ping_interval: Duration,
    /// What [`Driver::sandbox_networks`] answers (see there).
    networks: Vec<ipnet::IpNet>,
    op_delay: Duration,
    running: Mutex<HashMap<String, Running>>,
    /// Images under [`FAKE_REGISTRY`] pulled so far.
    pulled: Mutex<HashSet<String>>,
}

impl FakeDriver {
    /// One folder per sandbox under `<data_dir>/fake`; `tunnel` is where the server's tunnel
    /// listens.
    pub fn new(config: &crate::config::Config, tunnel: SocketAddr) -> FakeDriver {
        tracing::warn!(
            "the fake driver runs every sandbox inside this server, as this server's user, with no \
             isolation: use it for development and tests only"
        );
        let op_delay = std::env::var(OP_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or_default();
        let tunnel = if tunnel.ip().is_unspecified() {
            SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), tunnel.port())
        } else {
            tunnel
        };
        FakeDriver {
            root: config.server.data_dir.join("fake"),
            tunnel,
            ping_interval: config.sandbox.ping_interval,
            // Its sandboxes share the server's loopback and have no network of their own. It
            // answers the pool Docker's sandboxes would come from all the same, so that a
            // server on it refuses and never dials what one on Docker would (and the API's
            // refusal can be tested without Docker).
            networks: vec![config.sandbox.docker.network_pool.into()],
            op_delay,
            running: Mutex::new(HashMap::new()),
            pulled: Mutex::new(HashSet::new()),
        }
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    async fn record_limits(&self, id: &str, limits: Limits) -> Result<(), DriverError> {
        let record = self.dir(id).join(LIMITS_FILE);
        let text = format!("cpus={} memoryMb={}", limits.cpus, limits.memory_mb);
        tokio::fs::write(&record, text)
            .await
            .map_err(|e| io_err(&format!("writing {}", record.display()), e))
    }

    fn home(&self, id: &str) -> PathBuf {
        self.dir(id).join("home")
    }

    async fn delay(&self) {
        if !self.op_delay.is_zero() {
            tokio::time::sleep(self.op_delay).await;
        }
    }

    /// Pretends to pull `image` the first time it is used, when it is under [`FAKE_REGISTRY`].
    async fn ensure_image(&self, image: &str, sink: &PullSink) -> Result<(), DriverError> {
        let Some(name) = image.strip_prefix(FAKE_REGISTRY) else {
            return Ok(());
        };
        if self
            .pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(image)
        {
            return Ok(());
        }
        let mut meter = PullMeter::start(sink.clone(), image);
        if name.starts_with("missing") {
            let why =
                format!("the registry has no such image or tag (the fake registry has no {name})");
            meter.finish(Err(why.clone()));
            return Err(DriverError::ImageMissing {
                image: image.to_string(),
                why,
            });
        }
        let layers: Vec<String> = (1..=FAKE_LAYERS).map(|n| format!("layer{n}")).collect();
        for layer in &layers {
            meter.layer(layer);
        }
        for layer in &layers {
            for step in 1..=FAKE_STEPS {
                tokio::time::sleep(FAKE_STEP).await;
                let done = FAKE_LAYER_BYTES * step / FAKE_STEPS;
                meter.downloading(layer, done, Some(FAKE_LAYER_BYTES));
                meter.flush();
            }
            meter.complete(layer);
            meter.flush();
        }
        meter.finish(Ok(()));
        self.pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(image.to_string());
        Ok(())
    }

    fn take(&self, id: &str) -> Option<Running> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }

    /// Pauses or thaws (in pretence) the running sandbox `id`.
    fn set_paused(&self, id: &str, paused: bool) -> Result<(), DriverError> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        match running.get_mut(id) {
            Some(r) if !r.task.is_finished() => {
                r.paused = paused;
                Ok(())
            }
            // Thawing what does not run leaves it as it is, as under Docker.
            _ if !paused => Ok(()),
            _ => Err(DriverError::Failed(format!("sandbox {id} is not running"))),
        }
    }

    async fn halt(&self, id: &str) {
        if let Some(r) = self.take(id) {
            r.cancel.cancel();
            // sandboxd kills its processes before `run` returns.
            let _ = r.task.await;
        }
    }
}

fn io_err(what: &str, e: std::io::Error) -> DriverError {
    DriverError::Failed(format!("{what}: {e}"))
}

#[async_trait]
impl Driver for FakeDriver {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn sandbox_networks(&self) -> Vec<ipnet::IpNet> {
        self.networks.clone()
    }

    fn runtimes(&self) -> EngineRuntimes {
        EngineRuntimes {
            names: FAKE_RUNTIMES.map(String::from).to_vec(),
            default: FAKE_RUNTIMES[0].to_string(),
        }
    }

    async fn create(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError> {
        self.delay().await;
        if !FAKE_RUNTIMES.contains(&spec.runtime.as_str()) {
            return Err(DriverError::Failed(super::missing_runtime(
                &spec.runtime,
                &self.runtimes().names,
            )));
        }
        self.ensure_image(&spec.image, pull).await?;
        let home = self.home(&spec.id);
        tokio::fs::create_dir_all(&home)
            .await
            .map_err(|e| io_err(&format!("creating {}", home.display()), e))?;
        let record = self.dir(&spec.id).join(RUNTIME_FILE);
        tokio::fs::write(&record, &spec.runtime)
            .await
            .map_err(|e| io_err(&format!("writing {}", record.display()), e))?;
        self.record_limits(&spec.id, spec.limits()).await?;
        let record = self.dir(&spec.id).join(SECURITY_OPT_FILE);
        let opts = if spec.no_new_privileges(true) {
            "no-new-privileges:true"
        } else {
            ""
        };
        tokio::fs::write(&record, opts)
            .await
            .map_err(|e| io_err(&format!("writing {}", record.display()), e))
    }

    async fn start(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DriverError> {
        self.halt(&spec.id).await;
        self.create(spec, pull).await?;
        let boot = BootConfig {
            agent_id: spec.id.clone(),
            token: token.to_string(),
            tunnel_url: format!("ws://{}{}", self.tunnel, agenthold_proto::boot::TUNNEL_PATH),
            // Its sandboxes share the server's loopback, where the proxy cannot tell them
            // apart: they get no proxy.
            env: Default::default(),
            // Its sandboxd runs on this machine, whose trust store is not the server's to change.
            ca_certificates: None,
        };
        let opts = sandboxd::SandboxOptions {
            ping_interval: self.ping_interval,
            // Beside the home, out of the commands' reach as a container's would be.
            upload_records: Some(self.dir(&spec.id).join("uploads")),
            process_dir: Some(self.dir(&spec.id).join("processes")),
            ..sandboxd::SandboxOptions::fake(self.home(&spec.id))
        };
        let cancel = CancellationToken::new();
        let id = spec.id.clone();
        let task = tokio::spawn({
            let cancel = cancel.clone();
            async move {
                if let Err(e) = sandboxd::run(boot, opts, cancel).await {
                    tracing::warn!(agent = id, "fake sandbox ended: {e}");
                }
            }
        });
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                spec.id.clone(),
                Running {
                    cancel,
                    task,
                    paused: false,
                },
            );
        Ok(())
    }

    async fn stop(&self, id: &str) -> Result<(), DriverError> {
        self.delay().await;
        self.halt(id).await;
        Ok(())
    }

    async fn pause(&self, id: &str) -> Result<(), DriverError> {
        // Tests hold a pause half-way (to race a use against it) with a file `pause.hold` in
        // the sandbox's folder: the pause marks `pause.waiting` and waits until it is gone.
        let hold = self.dir(id).join(PAUSE_HOLD);
        if hold.exists() {
            let _ = std::fs::write(self.dir(id).join(PAUSE_WAITING), b"");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while hold.exists() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.set_paused(id, true)
    }

    async fn unpause(&self, id: &str) -> Result<(), DriverError> {
        self.set_paused(id, false)
    }

    async fn resize(&self, id: &str, limits: Limits) -> Result<(), DriverError> {
        if !self.dir(id).is_dir() {
            return Err(DriverError::Failed(format!("no sandbox {id}")));
        }
        self.record_limits(id, limits).await
    }

    async fn rebuild(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError> {
        self.stop(&spec.id).await?;
        // A new container starts with no background processes.
        match tokio::fs::remove_dir_all(self.dir(&spec.id).join("processes")).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing the sandbox's processes", e)),
        }
        self.create(spec, pull).await
    }

    async fn destroy(&self, id: &str) -> Result<(), DriverError> {
        self.stop(id).await?;
        match tokio::fs::remove_dir_all(self.dir(id)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("removing the sandbox folder", e)),
        }
    }

    async fn inspect(&self, id: &str) -> Result<SandboxStatus, DriverError> {
        let alive = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .filter(|r| !r.task.is_finished())
            .map(|r| r.paused);
        Ok(if let Some(paused) = alive {
            if paused {
                SandboxStatus::Paused
            } else {
                SandboxStatus::Running
            }
        } else if self.dir(id).exists() {
            SandboxStatus::Stopped
        } else {
            SandboxStatus::Missing
        })
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>, DriverError> {
        let mut out = Vec::new();
        let mut dir = match tokio::fs::read_dir(&self.root).await {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err("listing the fake sandboxes", e)),
        };
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| io_err("listing the fake sandboxes", e))?
        {
            let id = entry.file_name().to_string_lossy().into_owned();
            let status = self.inspect(&id).await?;
            out.push(SandboxInfo { id, status });
        }
        Ok(out)
    }

    async fn shutdown(&self) {
        // In-process sandboxes end with the server; their shells and commands must not outlive it.
        let ids: Vec<String> = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for id in ids {
            self.halt(&id).await;
        }
    }

    fn events(&self) -> BoxStream<'static, (DriverEvent, std::time::SystemTime)> {
        // Fake sandboxes change only through the calls above.
        Box::pin(futures::stream::pending())
    }
}
