//! Finding and making the agent's container, and everything it needs (image, home, network)
//! side by side. A container is ours only by its labels; one that is dead, being removed, or no
//! longer on the agent's network is made anew, keeping the home.

use bollard::models::ContainerStateStatusEnum;
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::error::{is_not_found, status_of};
use super::home::Home;
use super::network::NetRef;
use super::placement::{self, remove_force};
use super::{log_step, pull, DockerDriver, DockerError};
use crate::driver::{PullSink, SandboxSpec, SandboxStatus};
use crate::metrics::Repair;

/// What [`DockerDriver::create_all`] found or made.
pub(super) struct Made {
    pub(super) net: NetRef,
    /// The container, when it existed already.
    pub(super) existing: Option<Existing>,
    /// Docker's id of the container the sandbox is now (found or made), when known: its events
    /// are told from those of a container it replaced by this.
    pub(super) container: Option<String>,
}

pub(super) struct Existing {
    /// Docker's id, which a re-created container does not share.
    pub(super) id: String,
    pub(super) running: bool,
    /// The Docker ids of the networks it is on.
    networks: Vec<String>,
    /// Whether it mounts sandboxd the way this server serves it.
    sandboxd_current: bool,
}

/// Whether a container in `status` counts as up (a paused or restarting one too).
pub(super) fn is_running(status: Option<ContainerStateStatusEnum>) -> bool {
    matches!(
        status,
        Some(
            ContainerStateStatusEnum::RUNNING
                | ContainerStateStatusEnum::PAUSED
                | ContainerStateStatusEnum::RESTARTING
        )
    )
}

impl DockerDriver {
    pub(super) async fn ensure_image(
        &self,
        image: &str,
        progress: &PullSink,
    ) -> Result<pull::ImageFacts, DockerError> {
        pull::ensure_image(&self.docker, image, progress).await
    }

    /// The agent's container as Docker has it, if it exists. One that has the agent's name but
    /// not our labels is somebody else's: an error, never adopted.
    pub(super) async fn own_container(
        &self,
        id: &str,
    ) -> Result<Option<bollard::models::ContainerInspectResponse>, DockerError> {
        let name = self.names.container(id);
        match self.docker.inspect_container(&name, None).await {
            Ok(info) => {
                let labels = info.config.as_ref().and_then(|c| c.labels.as_ref());
                if self.names.is_agents(labels, id) {
                    let status = info.state.as_ref().and_then(|s| s.status);
                    match status {
                        // A removal a killed server left to dockerd: it goes on, so the
                        // container is as good as gone (waiting beats using it and failing).
                        Some(ContainerStateStatusEnum::REMOVING) => {
                            placement::wait_removed(&self.docker, &name).await?;
                            Ok(None)
                        }
                        // A removal that failed half-way; no use can be made of it.
                        Some(ContainerStateStatusEnum::DEAD) => {
                            remove_force(&self.docker, &name).await?;
                            Ok(None)
                        }
                        _ => Ok(Some(info)),
                    }
                } else {
                    Err(DockerError::Foreign {
                        kind: "container",
                        name,
                    })
                }
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(DockerError::api(format!("inspecting container {name}"))(e)),
        }
    }

    /// Makes everything the sandbox needs; an existing container is kept as it is (rebuild is
    /// what applies a new spec), unless the network it was made on is gone: then it is made
    /// anew on the agent's network, keeping the home.
    pub(super) async fn create_all(
        &self,
        spec: &SandboxSpec,
        pull: &PullSink,
        home: Home,
    ) -> Result<Made, DockerError> {
        let made = match self.create_once(spec, pull, home).await {
            Err(DockerError::Foreign {
                kind: "volume",
                name,
            }) => {
                self.recheck_home(&spec.id, &name).await?;
                self.create_once(spec, pull, home).await?
            }
            r => r?,
        };
        let Some(existing) = &made.existing else {
            return Ok(made);
        };
        let on_network = existing.networks.contains(&made.net.id);
        if on_network && existing.sandboxd_current {
            return Ok(made);
        }
        if existing.running {
            // Never pulled from under a running sandbox; its next start remakes it.
            return Ok(made);
        }
        if on_network {
            tracing::info!(
                agent = spec.id,
                "the sandbox's container mounts sandboxd from where an older server served it; \
                 making the container anew, keeping its home"
            );
        } else {
            tracing::warn!(
                agent = spec.id,
                network = made.net.id,
                "the sandbox's container is not on the agent's network (it was removed or made \
                 anew outside agenthold); making the container anew, keeping its home"
            );
        }
        self.forget_staged(&spec.id);
        remove_force(&self.docker, &existing.id).await?;
        self.repairs.record(Repair::container_remade);
        self.create_once(spec, pull, Home::Keep).await
    }

    async fn create_once(
        &self,
        spec: &SandboxSpec,
        pull: &PullSink,
        home: Home,
    ) -> Result<Made, DockerError> {
        let id = &spec.id;
        let name = self.names.container(id);
        let t = std::time::Instant::now();
        let existing = self.own_container(id).await?.map(|info| Existing {
            running: is_running(info.state.and_then(|s| s.status)),
            // A container that never ran has no endpoint ids yet, only the network it names.
            networks: info
                .network_settings
                .and_then(|n| n.networks)
                .into_iter()
                .flat_map(|n| n.into_values().filter_map(|e| e.network_id))
                .chain(
                    info.host_config
                        .as_ref()
                        .and_then(|h| h.network_mode.clone()),
                )
                .collect(),
            sandboxd_current: self
                .placement
                .serves(info.mounts.as_deref().unwrap_or_default()),
            id: info.id.unwrap_or_default(),
        });
        let exists = existing.is_some();
        let running = existing.as_ref().is_some_and(|e| e.running);
        log_step(id, "inspect container", t);
        // Independent of each other: made side by side, which is most of a create's time.
        let image = async {
            let t = std::time::Instant::now();
            if exists {
                return Ok(None);
            }
            let facts = self.ensure_image(&spec.image, pull).await?;
            log_step(id, "image", t);
            Ok::<_, DockerError>(Some(facts))
        };
        // A container's volume exists as long as the container does (Docker refuses to remove
        // a volume in use): only a new container needs it made.
        let volume = async {
            let t = std::time::Instant::now();
            // The disk is mounted before every start, even of an existing container: a host
            // reboot drops the mount, and the container would bind the empty folder below.
            let disk = match spec.disk_mb {
                Some(mb) => Some(self.ensure_disk(id, mb, home, running).await?),
                None => None,
            };
            if !exists {
                self.ensure_volume(id, home, disk.as_deref()).await?;
                log_step(id, "volume", t);
            }
            Ok::<_, DockerError>(())
        };
        let network = async {
            let t = std::time::Instant::now();
            let net = self.ensure_network(id).await;
            log_step(id, "network", t);
            net
        };
        let (image, volume, net) = tokio::join!(image, volume, network);
        let image = image?;
        volume?;
        let net = net?;
        let mut container = existing
            .as_ref()
            .map(|e| e.id.clone())
            .filter(|c| !c.is_empty());
        if let Some(image) = image {
            self.check_runtime(&spec.runtime).await?;
            let t = std::time::Instant::now();
            let create = |storage_opt| {
                self.docker.create_container(
                    Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                    self.container_body(spec, &image, &net, storage_opt),
                )
            };
            let size = self.layer.storage_opt();
            let asked = size.is_some();
            let mut r = create(size).await;
            // Refused with the limit and taken without it: the engine cannot apply it.
            if let Err(bollard::errors::Error::DockerResponseServerError {
                status_code,
                message,
            }) = &r
            {
                if asked && !matches!(status_code, 404 | 409) {
                    let without = create(None).await;
                    if without.is_ok() {
                        self.layer.refused(message);
                    }
                    r = without;
                }
            }
            match r {
                Ok(made) => {
                    tracing::info!(
                        agent = id,
                        container = name,
                        image = spec.image,
                        "container created"
                    );
                    container = Some(made.id);
                }
                // Made meanwhile: ours if it has our labels, refused if not.
                Err(e) if status_of(&e) == Some(409) => {
                    container = self.own_container(id).await?.and_then(|c| c.id);
                }
                Err(e) if is_not_found(&e) => {
                    return Err(DockerError::ImageMissing {
                        image: spec.image.clone(),
                        why: e.to_string(),
                    })
                }
                Err(e) => return Err(DockerError::api(format!("creating container {name}"))(e)),
            }
            log_step(id, "create container", t);
        }
        Ok(Made {
            net,
            existing,
            container,
        })
    }

    /// A container with the agent's name that is not ours counts as missing: it is not the
    /// agent's sandbox (and a start says so).
    pub(super) async fn container_status(&self, id: &str) -> Result<SandboxStatus, DockerError> {
        match self.own_container(id).await {
            Ok(Some(info)) => Ok(match info.state.and_then(|s| s.status) {
                Some(ContainerStateStatusEnum::PAUSED) => SandboxStatus::Paused,
                status if is_running(status) => SandboxStatus::Running,
                _ => SandboxStatus::Stopped,
            }),
            Ok(None) | Err(DockerError::Foreign { .. }) => Ok(SandboxStatus::Missing),
            Err(e) => Err(e),
        }
    }

    /// Makes the container anew from `spec`, keeping the home and the network.
    pub(super) async fn rebuild_inner(
        &self,
        spec: &SandboxSpec,
        pull: &PullSink,
    ) -> Result<(), DockerError> {
        // The home volume and the network stay; only the container is made anew (and whatever
        // else is missing: a rebuild is also how an agent whose home was lost gets a new one).
        self.remove_container(&spec.id).await?;
        let home_gone = match spec.disk_mb {
            Some(_) => !self.disks()?.exists(&self.names.volume(&spec.id)),
            None => self
                .docker
                .inspect_volume(&self.names.volume(&spec.id))
                .await
                .is_err_and(|e| is_not_found(&e)),
        };
        if home_gone {
            tracing::warn!(
                agent = spec.id,
                "the agent's home was gone; the rebuild makes a new, empty one"
            );
        }
        self.create_all(spec, pull, Home::Make).await?;
        Ok(())
    }

    /// Removes the agent's container, if it has one, and forgets the boot token staged in it.
    pub(super) async fn remove_container(&self, id: &str) -> Result<(), DockerError> {
        self.forget_staged(id);
        if let Some(info) = self.own_container(id).await? {
            let paused = info.state.as_ref().and_then(|s| s.status)
                == Some(ContainerStateStatusEnum::PAUSED);
            let container = info.id.unwrap_or_else(|| self.names.container(id));
            if paused {
                // Thawed first: a frozen cgroup (v1) does not take the kill.
                if let Err(e) = self.docker.unpause_container(&container).await {
                    tracing::debug!(agent = id, "thawing before the removal: {e}");
                }
            }
            remove_force(&self.docker, &container).await?;
        }
        Ok(())
    }
}
