//! The agent's internal Docker network, on the subnet [`super::subnet`] reserves for it (the
//! server joins it at `.2` when it runs in a container).
//!
//! Docker does not refuse a second network with a name it already has, and a server killed while
//! dockerd makes one can make another after its restart. So a network is found by its labels,
//! never by name alone; more than one for an agent is a state to repair (the one its sandbox is
//! on, or else the one whose subnet the store holds, or else the oldest, is kept and the rest are
//! removed), and everything after the lookup addresses the network by its Docker id.

use std::net::Ipv4Addr;

use bollard::models::{
    EndpointIpamConfig, EndpointSettings, Ipam, IpamConfig, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest, NetworkInspect,
};
use bollard::query_parameters::ListNetworksOptionsBuilder;
use ipnet::Ipv4Net;

use super::error::{is_not_found, status_of};
use super::subnet::AgentNet;
use super::{placement, DockerDriver, DockerError, Placement};
use crate::driver::SandboxStatus;
use crate::metrics::Repair;
use crate::store::StoreError;

/// The agent's network as the driver uses it once found or made.
#[derive(Debug, Clone)]
pub(super) struct NetRef {
    pub net: AgentNet,
    /// The bridge interface on the host.
    pub bridge: String,
    /// Docker's id: names can be shared, ids cannot.
    pub id: String,
}

impl DockerDriver {
    /// The agent's network, created with a fresh subnet if it does not exist.
    pub(super) async fn ensure_network(&self, id: &str) -> Result<NetRef, DockerError> {
        let name = self.names.network(id);
        if let Some(found) = self.existing_network(id).await? {
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
                    return self.existing_network(id).await?.ok_or_else(|| {
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
                    if let Some(found) = self.existing_network(id).await? {
                        return Ok(found);
                    }
                    return Err(DockerError::api(format!("creating network {name}"))(e));
                }
                Err(e) => {
                    if let Err(e2) = self.subnets.set_subnet(id, None).await {
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
    pub(super) async fn existing_network(&self, id: &str) -> Result<Option<NetRef>, DockerError> {
        let name = self.names.network(id);
        let name = name.as_str();
        let Some(info) = self.agent_network(id).await? else {
            return Ok(None);
        };
        let net_id = info
            .id
            .clone()
            .ok_or_else(|| DockerError::Other(format!("network {name} has no id")))?;
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
                self.remove_network(&info).await?;
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
        if self.subnets.subnet(id).await?.as_deref() != Some(net.subnet.to_string().as_str()) {
            match self
                .subnets
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
            .unwrap_or_else(|| format!("br-{}", net_id.get(..12).unwrap_or(&net_id)));
        if let Placement::Container { server, .. } = &self.placement {
            let joined = info
                .containers
                .as_ref()
                .is_some_and(|c| c.contains_key(server.as_str()));
            if !joined {
                self.join_server(&net_id, server, net.server_addr()).await?;
            }
        }
        Ok(Some(NetRef {
            net,
            bridge,
            id: net_id,
        }))
    }

    /// Every network labelled as the agent's, inspected (so with their members).
    async fn agent_networks(&self, id: &str) -> Result<Vec<NetworkInspect>, DockerError> {
        let listed = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&self.names.filter_agent("network", id))
                    .build(),
            ))
            .await
            .map_err(DockerError::api(format!(
                "listing the networks of agent {id}"
            )))?;
        let mut found = Vec::new();
        for n in listed {
            let Some(net_id) = n.id else { continue };
            match self.docker.inspect_network(&net_id, None).await {
                Ok(info) => found.push(info),
                // Removed between the list and the inspect.
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(DockerError::api(format!("inspecting network {net_id}"))(e)),
            }
        }
        Ok(found)
    }

    /// The agent's one network: duplicates are removed (see the module's comment), and a
    /// network that has the agent's name without our labels is refused, never adopted.
    pub(super) async fn agent_network(
        &self,
        id: &str,
    ) -> Result<Option<NetworkInspect>, DockerError> {
        let name = self.names.network(id);
        let mut nets = self.agent_networks(id).await?;
        if nets.is_empty() {
            let foreign = || DockerError::Foreign {
                kind: "network",
                name: name.clone(),
            };
            match self.docker.inspect_network(&name, None).await {
                Err(e) if is_not_found(&e) => return Ok(None),
                // Ours after all: made (by a create a killed server left to dockerd) between
                // the list and this look. Listed again, in case it came with a twin.
                Ok(info) if self.names.is_agents(info.labels.as_ref(), id) => {
                    nets = self.agent_networks(id).await?;
                    if nets.is_empty() {
                        nets.push(info);
                    }
                }
                // Found by name but without our labels: somebody else's.
                Ok(_) => return Err(foreign()),
                // Ambiguous: several with the name, ours among them if they appeared meanwhile.
                Err(e) if status_of(&e) == Some(400) => {
                    nets = self.agent_networks(id).await?;
                    if nets.is_empty() {
                        return Err(foreign());
                    }
                }
                Err(e) => return Err(DockerError::api(format!("inspecting network {name}"))(e)),
            }
        }
        if nets.len() > 1 {
            let stored = self
                .subnets
                .subnet(id)
                .await?
                .and_then(|s| s.parse::<Ipv4Net>().ok());
            let server = match &self.placement {
                Placement::Container { server, .. } => Some(server.as_str()),
                Placement::Host { .. } => None,
            };
            let keep = keeper(&nets, stored, server);
            let kept = nets.swap_remove(keep);
            for extra in &nets {
                tracing::warn!(
                    agent = id,
                    network = name,
                    removed = extra.id.as_deref().unwrap_or(""),
                    kept = kept.id.as_deref().unwrap_or(""),
                    "the agent had {} networks (a crash while one was being made); removing the \
                     extra one",
                    nets.len() + 1
                );
                self.remove_network(extra).await?;
                self.repairs.record(Repair::duplicate_network);
            }
            nets = vec![kept];
        }
        Ok(nets.pop())
    }

    /// Removes every network of the agent, duplicates included.
    pub(super) async fn remove_agent_networks(&self, id: &str) -> Result<(), DockerError> {
        for info in self.agent_networks(id).await? {
            self.remove_network(&info).await?;
        }
        Ok(())
    }

    /// Removes a network of ours, after taking the server's own container off it (a running
    /// sandbox on it keeps it from going, and the error says so).
    pub(super) async fn remove_network(&self, info: &NetworkInspect) -> Result<(), DockerError> {
        let Some(net_id) = info.id.as_deref() else {
            return Ok(());
        };
        let name = info.name.as_deref().unwrap_or(net_id);
        if let Placement::Container { server, .. } = &self.placement {
            if info
                .containers
                .as_ref()
                .is_some_and(|m| m.contains_key(server.as_str()))
            {
                self.docker
                    .disconnect_network(
                        net_id,
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
        match self.docker.remove_network(net_id).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(DockerError::api(format!(
                "removing network {name} ({net_id})"
            ))(e)),
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
}

/// Which of an agent's duplicate networks to keep: the one a sandbox is on (it cannot move), else
/// the one whose subnet the store holds, else the oldest.
fn keeper(nets: &[NetworkInspect], stored: Option<Ipv4Net>, server: Option<&str>) -> usize {
    let rank = |n: &NetworkInspect| {
        let has_sandbox = n
            .containers
            .as_ref()
            .is_some_and(|m| m.keys().any(|k| Some(k.as_str()) != server));
        let subnet_of_record = stored.is_some_and(|s| {
            n.ipam
                .as_ref()
                .and_then(|i| i.config.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.subnet.as_deref() == Some(s.to_string().as_str()))
        });
        let created = n
            .created
            .as_deref()
            .and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok());
        (!has_sandbox, !subnet_of_record, created)
    };
    (0..nets.len()).min_by_key(|&i| rank(&nets[i])).unwrap_or(0)
}

/// The engine refused the subnet because something of its own overlaps it: another network in
/// its address pools ("Pool overlaps ..."), or one its bridge driver still holds ("... conflicts
/// with network ...: networks have overlapping IPv4"), as a dockerd killed while making a
/// network leaves behind, unlisted, for good.
fn overlaps_error(e: &bollard::errors::Error) -> bool {
    let msg = e.to_string();
    msg.contains("overlaps") || msg.contains("overlapping")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EndpointResource;
    use std::collections::HashMap;

    fn net(id: &str, subnet: &str, created: &str, members: &[&str]) -> NetworkInspect {
        NetworkInspect {
            id: Some(id.into()),
            created: Some(created.into()),
            ipam: Some(Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(subnet.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            containers: Some(
                members
                    .iter()
                    .map(|m| (m.to_string(), EndpointResource::default()))
                    .collect::<HashMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn the_duplicate_kept_is_the_sandboxs_then_the_recorded_then_the_oldest() {
        let old = net("a", "10.0.0.0/28", "2026-12-01T10:00:00.5Z", &[]);
        let recorded = net("b", "10.0.0.16/28", "2026-12-01T10:00:01Z", &[]);
        let with_sandbox = net("c", "10.0.0.32/28", "2026-12-01T10:00:02Z", &["sandbox"]);
        let with_server = net("d", "10.0.0.48/28", "2026-12-01T09:00:00Z", &["server"]);
        let stored = Some("10.0.0.16/28".parse().expect("subnet"));
        let all = [
            old.clone(),
            recorded.clone(),
            with_sandbox,
            with_server.clone(),
        ];
        assert_eq!(keeper(&all, stored, Some("server")), 2);
        let no_sandbox = [old.clone(), recorded.clone(), with_server.clone()];
        assert_eq!(keeper(&no_sandbox, stored, Some("server")), 1);
        // The server's own membership is not a sandbox's: with nothing else to go by, the oldest.
        assert_eq!(keeper(&[old, with_server], None, Some("server")), 1);
    }

    #[test]
    fn subnets_the_engine_holds_are_told_from_other_refusals() {
        let refusal =
            |status_code, message: &str| bollard::errors::Error::DockerResponseServerError {
                status_code,
                message: message.into(),
            };
        // IPAM: another network has the subnet.
        assert!(overlaps_error(&refusal(
            403,
            "Pool overlaps with other one on this address space"
        )));
        // The bridge driver: a network a killed dockerd left in its store, unlisted.
        assert!(overlaps_error(&refusal(
            403,
            "cannot create network 42a1 (br-42a1): conflicts with network ab7d (br-ab7d): \
             networks have overlapping IPv4"
        )));
        assert!(!overlaps_error(&refusal(500, "failed to update store")));
    }
}
