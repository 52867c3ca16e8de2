//! The engine connection and what it offers: where dockerd listens, which API version both
//! sides speak, and which container runtimes it has. Kept apart from the sandbox operations so
//! that `connect`'s one-time setup (placement, disks, layer limit) reads as one story.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bollard::Docker;

use super::disk::Disks;
use super::events::OwnOps;
use super::firewall::Firewall;
use super::names::Names;
use super::{layer, placement, DockerDriver, DockerError, Placement};
use crate::agents::runtimes::EngineRuntimes;
use crate::config::{Config, DockerConfig};
use crate::metrics::Repairs;
use crate::store::SubnetBook;

/// How long each Docker API call may take to answer.
const API_TIMEOUT_SECS: u64 = 120;

/// The runtimes `docker info` lists; an engine that lists none has only runc.
fn engine_runtimes(info: &bollard::models::SystemInfo) -> EngineRuntimes {
    let mut names: Vec<String> = info
        .runtimes
        .as_ref()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default();
    let default = info
        .default_runtime
        .clone()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "runc".to_string());
    if !names.contains(&default) {
        names.push(default.clone());
    }
    names.sort();
    EngineRuntimes { names, default }
}

impl DockerDriver {
    /// Connects to the engine, works out where sandboxd comes from, and (in a container) fills
    /// the sandboxd volume. Fails with a clear message when the engine or sandboxd is missing.
    pub async fn connect(
        config: &Config,
        subnets: std::sync::Arc<dyn SubnetBook>,
        tunnel: SocketAddr,
        egress_port: u16,
        dns_port: Option<u16>,
        repairs: Repairs,
        egress_ca: &str,
    ) -> Result<DockerDriver, DockerError> {
        let cfg = config.sandbox.docker.clone();
        let docker = connect_engine(&cfg).await?;
        let info = docker.info().await.map_err(DockerError::api(
            "asking the engine for its storage driver and runtimes",
        ))?;
        let layer = match config.sandbox.rootfs_mb {
            0 => layer::LayerLimit::off(),
            mb => layer::LayerLimit::new(mb, &info),
        };
        let runtimes = engine_runtimes(&info);
        tracing::info!(
            runtimes = runtimes.names.join(","),
            default = runtimes.default,
            "container runtimes"
        );
        let names = Names::new(&cfg.name_prefix);
        let host_mounts = cfg
            .parsed_host_mounts()
            .map_err(|e| DockerError::Other(format!("sandbox.docker.host_mounts {e}")))?;
        for m in &host_mounts {
            tracing::warn!(
                host = %m.host.display(),
                container = %m.container.display(),
                read_only = m.read_only,
                "host mount: every sandbox can reach this host path (a host-access risk)"
            );
        }
        // Read once: a change of the file takes a restart, like the rest of `sandbox.egress`.
        // The installation CA goes with them: sandboxes trust what the proxy signs when it
        // intercepts a destination of a granted secret.
        let extra = config
            .sandbox
            .egress
            .read_ca_certificates()
            .map_err(|e| DockerError::Other(format!("sandbox.egress.ca_certificates: {e}")))?;
        let ca_certificates = Some(match extra {
            Some(extra) => format!("{}\n{egress_ca}", extra.trim_end()),
            None => egress_ca.to_string(),
        });
        let binary = placement::locate_sandboxd(config.sandbox.sandboxd_path.as_deref())?;
        let server = placement::detect_server_container(&docker, cfg.server_container()).await?;
        let (placement, firewall) = match server {
            Some(server) => {
                let volume = cfg.sandboxd_volume_name();
                placement::fill_sandboxd_volume(&docker, &names, &server, &volume, &binary).await?;
                // No host firewall rules from in here: the agent bridges get no host address
                // instead (see `create_network`), so the host is out of a sandbox's reach anyway.
                (Placement::Container { server, volume }, None)
            }
            None => {
                let dir =
                    placement::stage_sandboxd(&binary, &config.server.data_dir.join("sandboxd"))?;
                (
                    Placement::Host { dir },
                    Some(Firewall::new(&cfg.name_prefix)),
                )
            }
        };
        let disks = match &placement {
            Placement::Host { .. } => Disks::open(config.server.data_dir.join("disks"))
                .await
                .map_err(|e| e.to_string()),
            Placement::Container { .. } => Err(
                "disk limits need the server on the host (it loop-mounts an ext4 image per \
                 agent, which a server in a container cannot)"
                    .to_string(),
            ),
        };
        if let Err(why) = &disks {
            if config.sandbox.default_disk_mb > 0 {
                return Err(DockerError::Disk(format!(
                    "sandbox.default_disk_mb is {} but {why}; set it to 0 to run without disk \
                     limits",
                    config.sandbox.default_disk_mb
                )));
            }
            tracing::warn!("agents get no disk limits: {why}");
        }
        tracing::info!(?placement, sandboxd = %binary.display(), "docker driver ready");
        Ok(DockerDriver {
            docker,
            subnets,
            names,
            pids_limit: config.sandbox.pids_limit,
            nofile: config.sandbox.nofile,
            repairs,
            host_mounts,
            disks,
            tmp_mb: config.sandbox.tmp_mb,
            layer,
            placement,
            firewall,
            tunnel_port: tunnel.port(),
            egress_port,
            dns_port,
            ca_certificates,
            cfg,
            alloc: tokio::sync::Mutex::new(()),
            ops: OwnOps::default(),
            started_at: SystemTime::now(),
            staged: Default::default(),
            runtimes: std::sync::Mutex::new(runtimes),
        })
    }

    /// Fails when the engine lacks `runtime`, before a container asks for it (Docker's own
    /// answer, "unknown runtime", comes only at start and names no remedy). The engine may have
    /// gained it since the driver connected (dockerd rereads its runtimes on SIGHUP).
    pub(super) async fn check_runtime(&self, runtime: &str) -> Result<(), DockerError> {
        let has = |r: &EngineRuntimes| r.names.iter().any(|n| n == runtime);
        if has(&self.runtimes.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(());
        }
        let info = self
            .docker
            .info()
            .await
            .map_err(DockerError::api("asking the engine for its runtimes"))?;
        let now = engine_runtimes(&info);
        let found = has(&now);
        let names = now.names.clone();
        *self.runtimes.lock().unwrap_or_else(|e| e.into_inner()) = now;
        if found {
            Ok(())
        } else {
            Err(DockerError::Other(crate::driver::missing_runtime(
                runtime, &names,
            )))
        }
    }
}

/// Connects to `socket` (a path or URL) or, if unset, to `DOCKER_HOST` or the default socket,
/// and agrees on an API version the engine speaks.
async fn connect_engine(cfg: &DockerConfig) -> Result<Docker, DockerError> {
    let (endpoint, docker) = match cfg.socket() {
        Some(s) if s.starts_with('/') => (
            s.to_string(),
            Docker::connect_with_unix(s, API_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION),
        ),
        Some(s) => (s.to_string(), Docker::connect_with_host(s)),
        None => (
            std::env::var("DOCKER_HOST").unwrap_or_else(|_| "/var/run/docker.sock".to_string()),
            Docker::connect_with_defaults(),
        ),
    };
    let connect_err = |source| DockerError::Connect {
        endpoint: format!(" at {endpoint}"),
        source,
    };
    let docker = docker.map_err(connect_err)?;
    let docker = docker.negotiate_version().await.map_err(connect_err)?;
    let docker = docker.with_timeout(Duration::from_secs(API_TIMEOUT_SECS));
    Ok(docker)
}
