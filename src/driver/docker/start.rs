//! Starting and stopping a sandbox: a start makes whatever is missing, opens the firewall, hands
//! sandboxd its boot token, and only then starts the container; it repairs what a killed server
//! or dockerd left in its way and tries once more.

use bollard::models::ContainerUpdateBody;
use bollard::query_parameters::StopContainerOptionsBuilder;

use super::container::Made;
use super::error::is_not_found;
use super::home::Home;
use super::network::NetRef;
use super::spec::{memory_bytes, nano_cpus};
use super::{firewall, log_step, DockerDriver, DockerError};
use crate::driver::{Limits, PullSink, SandboxSpec, SandboxStatus};
use crate::metrics::Repair;

/// Seconds a stop waits after SIGTERM before Docker kills the sandbox. sandboxd kills its
/// process groups on SIGTERM, so this is only for a sandbox that hangs.
const STOP_GRACE_SECS: i32 = 10;

impl DockerDriver {
    /// Starts the sandbox, and once more after repairing what a killed server or dockerd left
    /// in the way of the first try.
    pub(super) async fn start_repairing(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DockerError> {
        match self.start_inner(spec, token, pull).await {
            // Something vanished under the start: a removal a killed server left to dockerd
            // finished after the container was found. Everything is looked up afresh.
            Err(e) if e.is_not_found() => {
                tracing::info!(agent = spec.id, "{e}; starting again from the lookup");
                self.start_inner(spec, token, pull).await
            }
            // A dockerd killed while it started the container leaves containerd a task of it that
            // no later start gets past: the container is made anew, keeping the home.
            Err(e) if e.is_stale_task() => {
                tracing::warn!(
                    agent = spec.id,
                    "{e} (left by a dockerd restart); making the container and its network anew, \
                     keeping its home"
                );
                // Its removal is part of this start, not the new sandbox failing.
                self.ops.unlaunch(&spec.id);
                self.remove_container(&spec.id).await?;
                // That task may run on, out of dockerd's sight (its sandboxd dialling with the old
                // token), at the address the new container would get on the agent's bridge: with
                // the network made anew it is on no bridge at all.
                if let Some(net) = self.agent_network(&spec.id).await? {
                    if let Err(e) = self.remove_network(&net).await {
                        tracing::warn!(agent = spec.id, "{e}; keeping the network");
                    }
                }
                self.repairs.record(Repair::container_remade);
                self.start_inner(spec, token, pull).await
            }
            r => r,
        }
    }

    pub(super) async fn stop_container(&self, id: &str) -> Result<(), DockerError> {
        let name = self.names.container(id);
        // A frozen sandboxd would sit out the grace period and be killed, its processes too,
        // without the chance to end them itself.
        self.unpause_container(id).await?;
        match self
            .docker
            .stop_container(
                &name,
                Some(
                    StopContainerOptionsBuilder::default()
                        .t(STOP_GRACE_SECS)
                        .build(),
                ),
            )
            .await
        {
            // 304 (already stopped) is a success for bollard.
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(DockerError::api(format!("stopping container {name}"))(e)),
        }
    }

    /// Freezes the container (the cgroup freezer); pausing a paused one succeeds.
    pub(super) async fn pause_container(&self, id: &str) -> Result<(), DockerError> {
        let name = self.names.container(id);
        match self.docker.pause_container(&name).await {
            Ok(()) => Ok(()),
            Err(e) if self.container_status(id).await? == SandboxStatus::Paused => {
                tracing::debug!(agent = id, "already paused: {e}");
                Ok(())
            }
            Err(e) => Err(DockerError::api(format!("pausing container {name}"))(e)),
        }
    }

    /// Thaws the container if it is paused; one that is not (or is gone) is left as it is.
    pub(super) async fn unpause_container(&self, id: &str) -> Result<(), DockerError> {
        if self.container_status(id).await? != SandboxStatus::Paused {
            return Ok(());
        }
        let name = self.names.container(id);
        match self.docker.unpause_container(&name).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) if self.container_status(id).await? != SandboxStatus::Paused => {
                tracing::debug!(agent = id, "thawed meanwhile: {e}");
                Ok(())
            }
            Err(e) => Err(DockerError::api(format!("unpausing container {name}"))(e)),
        }
    }

    /// Gives the running container new CPU and memory limits (no swap beyond the memory, as
    /// at its making).
    pub(super) async fn resize_container(
        &self,
        id: &str,
        limits: Limits,
    ) -> Result<(), DockerError> {
        let name = self.names.container(id);
        let memory = memory_bytes(limits.memory_mb);
        let body = ContainerUpdateBody {
            nano_cpus: Some(nano_cpus(limits.cpus)),
            memory: Some(memory),
            memory_swap: Some(memory),
            ..Default::default()
        };
        self.docker
            .update_container(&name, body)
            .await
            .map_err(DockerError::api(format!(
                "updating the limits of container {name}"
            )))
    }

    pub(super) async fn start_inner(
        &self,
        spec: &SandboxSpec,
        token: &str,
        pull: &PullSink,
    ) -> Result<(), DockerError> {
        let id = &spec.id;
        let name = self.names.container(id);
        let begun = std::time::Instant::now();
        let Made {
            net,
            existing,
            container,
        } = self.create_all(spec, pull, Home::Keep).await?;
        let NetRef { net, bridge, .. } = net;
        let tunnel_url = self.tunnel_url(&net);
        // The firewall rules and the boot.json upload do not depend on each other, and both
        // must be done before the container starts: side by side.
        let firewall = async {
            let t = std::time::Instant::now();
            if let Some(fw) = &self.firewall {
                let ports = firewall::Ports {
                    tunnel: self.tunnel_port,
                    proxy: self.egress_port,
                    transparent_dns: self.dns_port,
                };
                fw.ensure(id, &bridge, net.gateway(), ports).await?;
                log_step(id, "firewall", t);
            }
            Ok::<_, DockerError>(())
        };
        let upload = async {
            // boot.json goes into a stopped container only: a running sandboxd would keep the
            // old token, which the server no longer accepts.
            let running = existing.as_ref().is_some_and(|c| c.running);
            if running {
                self.stop_container(id).await?;
            }
            // Staged while the sandbox went to sleep: this very token is in this very
            // container already.
            let staged = !running
                && existing
                    .as_ref()
                    .is_some_and(|c| self.take_staged(id, &c.id, token));
            if !staged {
                self.upload_boot(id, &net, token).await?;
            }
            Ok::<_, DockerError>(())
        };
        let (firewall, upload) = tokio::join!(firewall, upload);
        firewall?;
        upload?;
        // From here on a `die` is the new sandbox failing (sandboxd exiting at boot), which the
        // lifecycle must hear about even while this start is still under way.
        self.ops.launching(id, container.as_deref());
        let t = std::time::Instant::now();
        self.docker
            .start_container(&name, None)
            .await
            .map_err(DockerError::api(format!("starting container {name}")))?;
        log_step(id, "start container", t);
        log_step(id, "start, in all", begun);
        tracing::info!(
            agent = id,
            container = name,
            tunnel = tunnel_url,
            "sandbox started"
        );
        Ok(())
    }
}
