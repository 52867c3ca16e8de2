//! The Docker driver: one container, one home volume and one internal network per agent, on a
//! real engine through bollard.
//!
//! - container `<prefix>-<id>`: entrypoint sandboxd (read-only at `/opt/agenthold`), `--init`,
//!   CPU, memory and PID limits, optional runtime, no-new-privileges and dropped capabilities;
//! - volume `<prefix>-home-<id>` at `/home/agent`: a plain volume, or, for an agent with a disk
//!   limit, one that binds the agent's loop-mounted ext4 image (see [`disk`]);
//! - `/tmp` and `/var/tmp` on size-limited `tmpfs` (they count toward the memory limit);
//! - network `<prefix>-net-<id>`: internal bridge on a subnet of `network_pool`, recorded in the
//!   store so no two agents ever share one; containers take addresses from its upper half.
//!
//! Every object carries our labels (see [`names`]), which is how `list`, reconcile and the event
//! stream find exactly this installation's objects. Every method is idempotent.
//!
//! This file holds the driver's state and its [`Driver`] face; the work lives by job: [`engine`]
//! (connecting), [`container`] and [`spec`] (making the container), [`home`], [`network`],
//! [`start`] (start and stop), [`boot`], [`inventory`] (list and destroy), [`peers`].

mod boot;
mod container;
mod disk;
mod engine;
mod error;
mod events;
mod exit;
mod files;
mod firewall;
mod home;
mod inventory;
mod layer;
mod names;
mod network;
mod peers;
mod placement;
mod pull;
mod spec;
mod start;
mod subnet;

use std::collections::HashMap;
use std::time::SystemTime;

use async_trait::async_trait;
use bollard::Docker;
use futures::stream::BoxStream;

use super::{
    Driver, DriverError, DriverEvent, Limits, PullSink, SandboxInfo, SandboxSpec, SandboxStatus,
};
use crate::agents::runtimes::EngineRuntimes;
use crate::config::{DockerConfig, HostMount, NofileLimit};
use crate::metrics::Repairs;
use crate::store::SubnetBook;
use disk::Disks;

pub use error::DockerError;
use events::OwnOps;
pub use files::is_static_elf;
use firewall::Firewall;
use home::Home;
use names::Names;
pub use placement::{locate_sandboxd, Placement};

pub struct DockerDriver {
    docker: Docker,
    subnets: std::sync::Arc<dyn SubnetBook>,
    names: Names,
    cfg: DockerConfig,
    pids_limit: i64,
    nofile: NofileLimit,
    /// Counts what the driver finds out of place and puts right (`/metrics`).
    repairs: Repairs,
    host_mounts: Vec<HostMount>,
    /// The agents' disk images, or why this server cannot make them.
    disks: Result<Disks, String>,
    /// Size of the `tmpfs` at `/tmp` and `/var/tmp`; 0 leaves them on the container's layer.
    tmp_mb: u64,
    /// The size of each container's writable layer, where the engine can enforce one.
    layer: layer::LayerLimit,
    placement: Placement,
    /// Host mode only: keeps sandboxes away from the host's own addresses.
    firewall: Option<Firewall>,
    tunnel_port: u16,
    /// The egress proxy's port, on the same addresses as the tunnel.
    egress_port: u16,
    /// The egress resolver's (UDP) port when transparent mode is on.
    dns_port: Option<u16>,
    /// `sandbox.egress.ca_certificates`, as the file has them (checked at load), and the
    /// installation CA's certificate.
    ca_certificates: Option<String>,
    /// Serialises subnet allocation within this server (the store's unique index guards the
    /// rest).
    alloc: tokio::sync::Mutex<()>,
    ops: OwnOps,
    started_at: SystemTime,
    /// Boot tokens already in stopped containers (see `stage_boot`), by agent: the container
    /// they went into (Docker's id, which a re-created container does not share) and the token.
    staged: std::sync::Mutex<HashMap<String, (String, String)>>,
    /// The engine's runtimes, as it last said.
    runtimes: std::sync::Mutex<EngineRuntimes>,
}

/// How long one step of a create or a start took, for `AGENTHOLD_LOG=agenthold::driver=debug`:
/// where the time of "create → shell" goes.
fn log_step(agent: &str, step: &str, since: std::time::Instant) {
    tracing::debug!(
        agent,
        step,
        ms = since.elapsed().as_secs_f64() * 1000.0,
        "sandbox step"
    );
}

#[async_trait]
impl Driver for DockerDriver {
    fn kind(&self) -> &'static str {
        "docker"
    }

    async fn sandbox_from(&self, peer: std::net::IpAddr) -> Option<(String, std::net::IpAddr)> {
        self.agent_from(peer).await
    }

    async fn sandbox_at(&self, local: std::net::IpAddr, peer: std::net::IpAddr) -> Option<String> {
        self.agent_at(local, peer).await
    }

    fn sandbox_networks(&self) -> Vec<ipnet::IpNet> {
        // Every agent network is a subnet of the pool.
        vec![self.cfg.network_pool.into()]
    }

    fn runtimes(&self) -> EngineRuntimes {
        self.runtimes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn disk_limits_unavailable(&self) -> Option<String> {
        self.disks.as_ref().err().cloned()
    }

    fn rootfs_limit_mb(&self) -> Option<u64> {
        self.layer.enforced_mb()
    }

    async fn create(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError> {
        let _op = self.ops.begin(&spec.id);
        self.create_all(spec, pull, Home::Make).await?;
        Ok(())
    }

    async fn start(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DriverError> {
        let _op = self.ops.begin(&spec.id);
        Ok(self.start_repairing(spec, token, pull).await?)
    }

    async fn stop(&self, id: &str) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        Ok(self.stop_container(id).await?)
    }

    async fn pause(&self, id: &str) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        Ok(self.pause_container(id).await?)
    }

    async fn unpause(&self, id: &str) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        Ok(self.unpause_container(id).await?)
    }

    fn made_with(&self) -> String {
        // Everything `create` and `start` read besides the spec; the layer limit as asked for
        // (whether the engine enforces it does not change a sandbox made before).
        let made = format!(
            "{:?}|pids={}|nofile={:?}|mounts={:?}|tmp={}|layer={}|tunnel={}|egress={}|dns={:?}|ca={:?}",
            self.cfg,
            self.pids_limit,
            self.nofile,
            self.host_mounts,
            self.tmp_mb,
            self.layer.requested_mb(),
            self.tunnel_port,
            self.egress_port,
            self.dns_port,
            self.ca_certificates,
        );
        crate::store::hash_token(&made)[..16].to_string()
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>, DriverError> {
        match self.docker.inspect_image(image).await {
            Ok(info) => Ok(info.id),
            Err(e) if error::is_not_found(&e) => Ok(None),
            Err(e) => Err(DockerError::api(format!("inspecting image {image}"))(e).into()),
        }
    }

    async fn made_from(&self, id: &str) -> Result<Option<String>, DriverError> {
        Ok(self.own_container(id).await?.and_then(|c| c.image))
    }

    async fn resize(&self, id: &str, limits: Limits) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        Ok(self.resize_container(id, limits).await?)
    }

    async fn stage_boot(&self, spec: &SandboxSpec, token: &str) -> Result<bool, DriverError> {
        let _op = self.ops.begin(&spec.id);
        Ok(self.stage_boot_inner(spec, token).await?)
    }

    async fn rebuild(&self, spec: &SandboxSpec, pull: &PullSink) -> Result<(), DriverError> {
        let _op = self.ops.begin(&spec.id);
        Ok(self.rebuild_inner(spec, pull).await?)
    }

    async fn destroy(&self, id: &str) -> Result<(), DriverError> {
        let _op = self.ops.begin(id);
        self.forget_staged(id);
        Ok(self.destroy_inner(id).await?)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxStatus, DriverError> {
        Ok(self.container_status(id).await?)
    }

    async fn failure_reason(&self, id: &str) -> Option<String> {
        match exit::oom_reason(&self.docker, &self.names.container(id)).await {
            Ok(reason) => reason,
            Err(e) => {
                tracing::debug!(agent = id, "why the sandbox stopped is unknown: {e}");
                None
            }
        }
    }

    async fn exit_report(&self, id: &str) -> Option<String> {
        exit::report(&self.docker, &self.names.container(id)).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>, DriverError> {
        Ok(self.list_inner().await?)
    }

    fn events(&self) -> BoxStream<'static, (DriverEvent, SystemTime)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(events::follow(
            self.docker.clone(),
            self.names.clone(),
            self.ops.clone(),
            self.started_at,
            tx,
        ));
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|e| (e, rx))
        }))
    }
}

impl std::fmt::Debug for DockerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerDriver")
            .field("prefix", &self.names.prefix())
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}
