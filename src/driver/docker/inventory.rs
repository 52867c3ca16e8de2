//! Everything of an agent's that exists on the engine and the host, found by our labels: what
//! `list` reports (so reconcile finds orphans a crash left between steps) and what `destroy`
//! removes. Objects with our names but not our labels are somebody else's and stay.

use std::collections::BTreeMap;

use bollard::models::ContainerSummaryStateEnum;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, ListVolumesOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};

use super::error::is_not_found;
use super::placement::remove_force;
use super::{DockerDriver, DockerError};
use crate::driver::{SandboxInfo, SandboxStatus};
use crate::store::StoreError;

impl DockerDriver {
    /// networks, the home, the firewall rules), and frees its subnet. Objects with its names
    /// but not our labels are somebody else's and stay.
    pub(super) async fn destroy_inner(&self, id: &str) -> Result<(), DockerError> {
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&self.names.filter_agent("sandbox", id))
                    .build(),
            ))
            .await
            .map_err(DockerError::api(format!(
                "listing the containers of agent {id}"
            )))?;
        for c in containers {
            let paused = c.state == Some(ContainerSummaryStateEnum::PAUSED);
            if let Some(cid) = c.id {
                if paused {
                    // Thawed first, as a rebuild's removal does, so that its processes see
                    // their end.
                    if let Err(e) = self.docker.unpause_container(&cid).await {
                        tracing::debug!(agent = id, "thawing before the removal: {e}");
                    }
                }
                remove_force(&self.docker, &cid).await?;
            }
        }
        if let Some(fw) = &self.firewall {
            fw.remove(id).await?;
        }
        self.remove_agent_networks(id).await?;
        let volume = self.names.volume(id);
        match self.docker.inspect_volume(&volume).await {
            Ok(v) if self.names.is_agents(Some(&v.labels), id) => {
                match self
                    .docker
                    .remove_volume(
                        &volume,
                        Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
                    )
                    .await
                {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(DockerError::api(format!("removing volume {volume}"))(e)),
                }
            }
            Ok(_) => tracing::warn!(
                agent = id,
                volume,
                "a volume with the agent's home's name was not made by agenthold; left alone"
            ),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(DockerError::api(format!("inspecting volume {volume}"))(e)),
        }
        if let Ok(disks) = &self.disks {
            disks.remove(&volume).await?;
        }
        match self.subnets.set_subnet(id, None).await {
            // An orphan has no row: nothing to free.
            Ok(()) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(
            agent = id,
            "sandbox destroyed (container, home volume, network)"
        );
        Ok(())
    }

    pub(super) async fn list_inner(&self) -> Result<Vec<SandboxInfo>, DockerError> {
        let mut found: BTreeMap<String, SandboxStatus> = BTreeMap::new();
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&self.names.filter("sandbox"))
                    .build(),
            ))
            .await
            .map_err(DockerError::api("listing containers"))?;
        for c in containers {
            if let Some(id) = self.names.agent_of(c.labels.as_ref()) {
                let status = match c.state {
                    Some(ContainerSummaryStateEnum::PAUSED) => SandboxStatus::Paused,
                    Some(
                        ContainerSummaryStateEnum::RUNNING | ContainerSummaryStateEnum::RESTARTING,
                    ) => SandboxStatus::Running,
                    _ => SandboxStatus::Stopped,
                };
                found.insert(id, status);
            }
        }
        // A home volume or network without its container is ours too, so orphans of a crash
        // between steps are found and removed as well.
        let volumes = self
            .docker
            .list_volumes(Some(
                ListVolumesOptionsBuilder::default()
                    .filters(&self.names.filter("home"))
                    .build(),
            ))
            .await
            .map_err(DockerError::api("listing volumes"))?;
        let mut leftovers: Vec<String> = volumes
            .volumes
            .unwrap_or_default()
            .iter()
            .filter_map(|v| self.names.agent_of(Some(&v.labels)))
            .collect();
        let networks = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&self.names.filter("network"))
                    .build(),
            ))
            .await
            .map_err(DockerError::api("listing networks"))?;
        leftovers.extend(
            networks
                .iter()
                .filter_map(|n| self.names.agent_of(n.labels.as_ref())),
        );
        if let Some(fw) = &self.firewall {
            leftovers.extend(fw.agents().await?);
        }
        if let Ok(disks) = &self.disks {
            leftovers.extend(
                disks
                    .names()?
                    .iter()
                    .filter_map(|name| self.names.agent_of_volume(name)),
            );
        }
        for id in leftovers {
            found.entry(id).or_insert(SandboxStatus::Missing);
        }
        Ok(found
            .into_iter()
            .map(|(id, status)| SandboxInfo { id, status })
            .collect())
    }
}
