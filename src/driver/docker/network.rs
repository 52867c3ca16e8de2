//! The agent's internal network: its subnet, picked from the pool and recorded in the store, and
//! the Docker network itself (the server joins it at `.2` when it runs in a container).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use bollard::models::{
    EndpointIpamConfig, EndpointSettings, Ipam, IpamConfig, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest,
};
use ipnet::Ipv4Net;

use super::error::{is_not_found, status_of};
use super::subnet::{self, AgentNet};
use super::{placement, DockerDriver, DockerError, Placement};
use crate::driver::SandboxStatus;
use crate::store::StoreError;

impl DockerDriver {
    /// The agent's network, created with a fresh subnet if it does not exist. Returns its
    /// addresses and its bridge interface's name.
    pub(super) async fn ensure_network(&self, id: &str) -> Result<(AgentNet, String), DockerError> {
        let name = self.names.network(id);
        if let Some(found) = self.existing_network(id, &name).await? {
            return Ok(found);
        }
        // Subnets the engine refused: another network it has (another installation, a
        // leftover) overlaps them.
        let mut refused: Vec<Ipv4Net> = Vec::new();
        for _ in 0..256 {
            let candidate = self.reserve_subnet(id, &refused).await?;
            let net = AgentNet::new(candidate);
            match self.create_network(id, &name, &net).await {
                Ok(()) => {
                    tracing::info!(agent = id, network = name, subnet = %candidate, "network created");
                    return self.existing_network(id, &name).await?.ok_or_else(|| {
                        DockerError::Other(format!(
                            "network {name} vanished right after it was made"
                        ))
                    });
                }
                Err(e) if overlaps_error(&e) => {
                    tracing::debug!(subnet = %candidate, "subnet in use on the engine: {e}");
                    refused.push(candidate);
                }
                // Made meanwhile by someone else: use it.
                Err(e) if status_of(&e) == Some(409) => {
                    if let Some(found) = self.existing_network(id, &name).await? {
                        return Ok(found);
                    }
                    return Err(DockerError::api(format!("creating network {name}"))(e));
                }
                Err(e) => {
                    if let Err(e2) = self.store.set_subnet(id, None).await {
                        tracing::debug!(agent = id, "releasing the subnet: {e2}");
                    }
                    return Err(DockerError::api(format!("creating network {name}"))(e));
                }
            }
        }
        Err(DockerError::PoolExhausted {
            pool: self.cfg.network_pool.to_string(),
            bits: self.cfg.subnet_bits,
        })
    }

    /// Picks a subnet for the agent (the one it had, if still free) and records it. Only the
    /// pick and the record must not interleave between agents, so only they hold the lock:
    /// making the network, the slow part, runs side by side for agents created at once (held
    /// across it, the lock made a burst of 50 creates wait on each other's networks). A subnet
    /// recorded here is taken for every later pick, whether or not its network exists yet.
    pub(super) async fn reserve_subnet(
        &self,
        id: &str,
        refused: &[Ipv4Net],
    ) -> Result<Ipv4Net, DockerError> {
        let engine = self.engine_subnets().await?;
        let _alloc = self.alloc.lock().await;
        let stored = self
            .store
            .subnet(id)
            .await?
            .and_then(|s| s.parse::<Ipv4Net>().ok());
        let mut taken: Vec<Ipv4Net> = self
            .store
            .subnets_in_use()
            .await?
            .iter()
            .filter_map(|s| s.parse().ok())
            .filter(|s| Some(*s) != stored)
            .collect();
        taken.extend(engine);
        taken.extend_from_slice(refused);
        let mut first = stored.filter(|s| {
            !taken
                .iter()
                .any(|t| t.contains(&s.network()) || s.contains(&t.network()))
        });
        let exhausted = || DockerError::PoolExhausted {
            pool: self.cfg.network_pool.to_string(),
            bits: self.cfg.subnet_bits,
        };
        for _ in 0..256 {
            let candidate = match first.take() {
                Some(s) => s,
                None => subnet::pick(self.cfg.network_pool, self.cfg.subnet_bits, &taken)
                    .ok_or_else(exhausted)?,
            };
            match self
                .store
                .set_subnet(id, Some(&candidate.to_string()))
                .await
            {
                Ok(()) => return Ok(candidate),
                // The store's unique index has the last word.
                Err(StoreError::SubnetTaken(_)) => taken.push(candidate),
                Err(e) => return Err(e.into()),
            }
        }
        Err(exhausted())
    }

    pub(super) async fn create_network(
        &self,
        id: &str,
        name: &str,
        net: &AgentNet,
    ) -> Result<(), bollard::errors::Error> {
        self.docker
            .create_network(NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".to_string()),
                // No route out: Docker's rules drop everything forwarded off this bridge.
                internal: Some(true),
                // A server in a container leaves the host off the bridge (no address at `.1`):
                // a sandbox can then reach nothing of the host, not even its own addresses, which
                // only host firewall rules could otherwise keep it from.
                options: Some(self.placement.network_options()),
                ipam: Some(Ipam {
                    driver: Some("default".to_string()),
                    config: Some(vec![IpamConfig {
                        subnet: Some(net.subnet.to_string()),
                        ip_range: Some(net.ip_range().to_string()),
                        // Docker 20.10 would put it at the start of ip_range otherwise.
                        gateway: Some(net.gateway().to_string()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                labels: Some(self.names.labels("network", Some(id))),
                ..Default::default()
            })
            .await
            .map(|_| ())
    }

    /// The agent's network if it exists: its subnet (recorded in the store if the store had
    /// lost it) and bridge name; the server's container is joined to it in container mode.
    pub(super) async fn existing_network(
        &self,
        id: &str,
        name: &str,
    ) -> Result<Option<(AgentNet, String)>, DockerError> {
        let info = match self.docker.inspect_network(name, None).await {
            Ok(i) => i,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(DockerError::api(format!("inspecting network {name}"))(e)),
        };
        // Made while the server ran elsewhere (on the host rather than in a container, or the
        // reverse). The option cannot change in place, and a container whose network was made
        // anew no longer starts (Docker looks it up by the old id), so the network is made anew
        // only while the agent has no container, as in a rebuild.
        let host_address = placement::bridge_has_host_address(info.options.as_ref());
        if host_address != self.placement.host_on_bridge() {
            if self.container_status(id).await? == SandboxStatus::Missing {
                tracing::info!(
                    agent = id,
                    network = name,
                    "the network was made for a server placed elsewhere; making it anew"
                );
                self.remove_network(name, info.containers.as_ref()).await?;
                return Ok(None);
            }
            if host_address {
                tracing::warn!(
                    agent = id,
                    network = name,
                    "the network was made while the server ran on the host, so its sandbox can \
                     reach the host's own addresses; rebuild the agent to make it anew"
                );
            } else {
                return Err(DockerError::Other(format!(
                    "network {name} was made while the server ran in a container, so it has no \
                     host address for sandboxd to dial; rebuild the agent to make it anew"
                )));
            }
        }
        let subnet = info
            .ipam
            .as_ref()
            .and_then(|i| i.config.as_ref())
            .into_iter()
            .flatten()
            .find_map(|c| c.subnet.as_deref().and_then(|s| s.parse::<Ipv4Net>().ok()))
            .ok_or_else(|| DockerError::Other(format!("network {name} has no IPv4 subnet")))?;
        let net = AgentNet::new(subnet);
        if self.store.subnet(id).await?.as_deref() != Some(net.subnet.to_string().as_str()) {
            match self
                .store
                .set_subnet(id, Some(&net.subnet.to_string()))
                .await
            {
                Ok(()) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let bridge = info
            .options
            .as_ref()
            .and_then(|o| o.get("com.docker.network.bridge.name").cloned())
            .or_else(|| {
                info.id
                    .as_deref()
                    .and_then(|i| i.get(..12))
                    .map(|i| format!("br-{i}"))
            })
            .ok_or_else(|| DockerError::Other(format!("network {name} has no id")))?;
        if let Placement::Container { server, .. } = &self.placement {
            let joined = info
                .containers
                .as_ref()
                .is_some_and(|c| c.contains_key(server.as_str()));
            if !joined {
                self.join_server(name, server, net.server_addr()).await?;
            }
        }
        Ok(Some((net, bridge)))
    }

    /// Removes a network of ours that has no sandbox on it, after taking the server's own
    /// container (the only other member) off it.
    pub(super) async fn remove_network(
        &self,
        name: &str,
        members: Option<&HashMap<String, bollard::models::EndpointResource>>,
    ) -> Result<(), DockerError> {
        if let Placement::Container { server, .. } = &self.placement {
            if members.is_some_and(|m| m.contains_key(server.as_str())) {
                self.docker
                    .disconnect_network(
                        name,
                        NetworkDisconnectRequest {
                            container: server.clone(),
                            force: Some(true),
                        },
                    )
                    .await
                    .map_err(DockerError::api(format!(
                        "taking the server off network {name}"
                    )))?;
            }
        }
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(DockerError::api(format!("removing network {name}"))(e)),
        }
    }

    pub(super) async fn join_server(
        &self,
        network: &str,
        server: &str,
        addr: Ipv4Addr,
    ) -> Result<(), DockerError> {
        let r = self
            .docker
            .connect_network(
                network,
                NetworkConnectRequest {
                    container: server.to_string(),
                    endpoint_config: Some(EndpointSettings {
                        ipam_config: Some(EndpointIpamConfig {
                            ipv4_address: Some(addr.to_string()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                },
            )
            .await;
        match r {
            Ok(()) => Ok(()),
            // Already joined (Docker answers 403 "already exists in network").
            Err(e) if e.to_string().contains("already exists") => Ok(()),
            Err(e) => Err(DockerError::api(format!(
                "joining the server to network {network}"
            ))(e)),
        }
    }

    /// Every IPv4 subnet of every network on the engine, ours or not.
    pub(super) async fn engine_subnets(&self) -> Result<Vec<Ipv4Net>, DockerError> {
        let nets = self
            .docker
            .list_networks(None)
            .await
            .map_err(DockerError::api("listing networks"))?;
        Ok(nets
            .iter()
            .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
            .flatten()
            .filter_map(|c| c.subnet.as_deref()?.parse().ok())
            .collect())
    }
}

/// Docker's answer when a subnet overlaps another network's.
fn overlaps_error(e: &bollard::errors::Error) -> bool {
    let msg = e.to_string();
    msg.contains("overlaps") || msg.contains("Pool overlaps")
}
