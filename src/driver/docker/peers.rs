//! Which agent an address on the agent networks belongs to, for the egress proxy and resolver,
//! and the server's own address on each network. Every agent network is the agent's alone, so
//! the subnet a peer is in names its agent; only addresses in the pool cost a database read.

use std::net::{IpAddr, Ipv4Addr};

use super::subnet::AgentNet;
use super::{DockerDriver, Placement};

impl DockerDriver {
    /// The server's address on the agent's network: the bridge's own address when the server
    /// runs on the host, its container's when it runs in one.
    pub(super) fn server_on(&self, net: &AgentNet) -> Ipv4Addr {
        match self.placement {
            Placement::Host { .. } => net.gateway(),
            Placement::Container { .. } => net.server_addr(),
        }
    }

    /// The agent whose sandbox is at `peer`, with the server's address on its network.
    pub(super) async fn agent_from(&self, peer: IpAddr) -> Option<(String, IpAddr)> {
        let IpAddr::V4(peer) = peer.to_canonical() else {
            return None;
        };
        if !self.cfg.network_pool.contains(&peer) {
            return None;
        }
        let holders = self.subnets.holders().await.ok()?;
        holders.into_iter().find_map(|(id, subnet)| {
            let net = AgentNet::new(subnet.parse().ok()?);
            let server = self.server_on(&net);
            (net.subnet.contains(&peer) && peer != server).then_some((id, server.into()))
        })
    }

    /// The agent whose sandbox at `peer` reached the server's address `local` on its network.
    pub(super) async fn agent_at(&self, local: IpAddr, peer: IpAddr) -> Option<String> {
        let (IpAddr::V4(local), IpAddr::V4(peer)) = (local.to_canonical(), peer.to_canonical())
        else {
            return None;
        };
        // Anyone may knock (the proxy listens where the tunnel does): only the agent networks
        // cost a look at the database.
        if !self.cfg.network_pool.contains(&peer) {
            return None;
        }
        let holders = match self.subnets.holders().await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("egress proxy: cannot read the agents' subnets: {e}");
                return None;
            }
        };
        // Each agent network is the agent's alone: a peer inside it that came in on the
        // server's own address there is that agent's sandbox.
        holders.into_iter().find_map(|(id, subnet)| {
            let net = AgentNet::new(subnet.parse().ok()?);
            (net.subnet.contains(&peer) && self.server_on(&net) == local && peer != local)
                .then_some(id)
        })
    }
}
