//! Per-agent subnets carved out of `sandbox.docker.network_pool`.
//!
//! Layout of one subnet (a /28 here): `.0` network, `.1` the bridge gateway (the host), `.2` the
//! server's container when it runs in one, the lower half otherwise unused, and the upper half
//! the range Docker gives containers, so a sandbox can never take `.2` before the server does.
//!
//! A subnet is reserved in the store before its network is made, and never one that overlaps a
//! network the engine has, or a bridge a killed dockerd left on the host: the store's unique
//! index and the engine's refusals have the last word.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::{DockerDriver, DockerError, Placement};
use crate::store::StoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentNet {
    pub subnet: Ipv4Net,
}

impl AgentNet {
    pub fn new(subnet: Ipv4Net) -> AgentNet {
        AgentNet {
            subnet: subnet.trunc(),
        }
    }

    fn nth(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.subnet.network()).saturating_add(n))
    }

    /// The bridge's address on the host; Docker 20.10 must be told it explicitly.
    pub fn gateway(&self) -> Ipv4Addr {
        self.nth(1)
    }

    /// Where the server's own container joins the network.
    pub fn server_addr(&self) -> Ipv4Addr {
        self.nth(2)
    }

    /// The upper half of the subnet, from which containers take their addresses.
    pub fn ip_range(&self) -> Ipv4Net {
        let half = self.subnet.prefix_len().saturating_add(1).min(32);
        let size = 1u32 << (32 - u32::from(half));
        // `half` is at most 32, so `new` cannot fail; fall back to the whole subnet regardless.
        Ipv4Net::new(self.nth(size), half).unwrap_or(self.subnet)
    }
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The first subnet of `bits` in `pool` that overlaps none of `taken`.
pub fn pick(pool: Ipv4Net, bits: u8, taken: &[Ipv4Net]) -> Option<Ipv4Net> {
    pool.subnets(bits)
        .ok()?
        .find(|s| !taken.iter().any(|t| overlaps(t, s)))
}

impl DockerDriver {
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
        let mut engine = self.engine_subnets().await?;
        // A dockerd killed while it made a network can leave the network's bridge on the host,
        // with the gateway's address, and forget the network: a network made again on that
        // subnet gets a second bridge with the same address, and the host's answers to its
        // sandbox go out on the first one, to nobody. Only on the host do we see its routes.
        if matches!(self.placement, Placement::Host { .. }) {
            let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
            engine.extend(connected_in(&routes, self.cfg.network_pool));
        }
        let _alloc = self.alloc.lock().await;
        let stored = self
            .subnets
            .subnet(id)
            .await?
            .and_then(|s| s.parse::<Ipv4Net>().ok());
        let mut taken: Vec<Ipv4Net> = self
            .subnets
            .subnets_in_use()
            .await?
            .iter()
            .filter_map(|s| s.parse().ok())
            .filter(|s| Some(*s) != stored)
            .collect();
        taken.extend(engine);
        taken.extend_from_slice(refused);
        let mut first = stored.filter(|s| !taken.iter().any(|t| overlaps(t, s)));
        let exhausted = || DockerError::PoolExhausted {
            pool: self.cfg.network_pool.to_string(),
            bits: self.cfg.subnet_bits,
        };
        for _ in 0..256 {
            let candidate = match first.take() {
                Some(s) => s,
                None => pick(self.cfg.network_pool, self.cfg.subnet_bits, &taken)
                    .ok_or_else(exhausted)?,
            };
            match self
                .subnets
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

    /// Every IPv4 subnet of every network on the engine, ours or not.
    async fn engine_subnets(&self) -> Result<Vec<Ipv4Net>, DockerError> {
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

/// The subnets inside `pool` that an interface of this host is on: the routes of `table` (as
/// `/proc/net/route` has them) that go through no gateway.
fn connected_in(table: &str, pool: Ipv4Net) -> Vec<Ipv4Net> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Addresses in network byte order, printed as the host's own integers.
            let field = |i: usize| {
                let v = u32::from_str_radix(f.get(i)?, 16).ok()?;
                Some(Ipv4Addr::from(v.to_ne_bytes()))
            };
            let (dest, gateway, mask) = (field(1)?, field(2)?, field(7)?);
            if !gateway.is_unspecified() {
                return None;
            }
            let bits = u32::from(mask).leading_ones();
            let net = Ipv4Net::new(dest, u8::try_from(bits).ok()?).ok()?.trunc();
            pool.contains(&net).then_some(net)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().expect("test subnet")
    }

    #[test]
    fn layout_of_a_subnet() {
        let n = AgentNet::new(net("10.213.4.16/28"));
        assert_eq!(n.gateway(), Ipv4Addr::new(10, 213, 4, 17));
        assert_eq!(n.server_addr(), Ipv4Addr::new(10, 213, 4, 18));
        assert_eq!(n.ip_range(), net("10.213.4.24/29"));
        assert!(!n.ip_range().contains(&n.server_addr()));
        assert!(!n.ip_range().contains(&n.gateway()));
    }

    #[test]
    fn pick_skips_taken_and_overlapping_subnets() {
        let pool = net("10.213.7.0/24");
        assert_eq!(pick(pool, 28, &[]), Some(net("10.213.7.0/28")));
        assert_eq!(
            pick(pool, 28, &[net("10.213.7.0/28")]),
            Some(net("10.213.7.16/28"))
        );
        // A wider network elsewhere on the engine covering the first four /28s.
        assert_eq!(
            pick(pool, 28, &[net("10.213.7.0/26")]),
            Some(net("10.213.7.64/28"))
        );
        // A narrower one inside the first /28.
        assert_eq!(
            pick(pool, 28, &[net("10.213.7.4/30")]),
            Some(net("10.213.7.16/28"))
        );
    }

    #[test]
    fn an_exhausted_pool_gives_none() {
        let pool = net("10.213.7.0/27");
        let taken = [net("10.213.7.0/28"), net("10.213.7.16/28")];
        assert_eq!(pick(pool, 28, &taken), None);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn host_interfaces_inside_the_pool_are_found_in_the_route_table() {
        // As /proc/net/route has it: the default route, a bridge in the pool (10.213.92.32/29),
        // another outside it (10.213.121.0/28), docker0, a routed network inside the pool.
        let table =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            br-d62e9e4b6d9f\t205CD50A\t00000000\t0001\t0\t0\t0\tF8FFFFFF\t0\t0\t0\n\
            br-239d02732a84\t0079D50A\t00000000\t0001\t0\t0\t0\tF0FFFFFF\t0\t0\t0\n\
            docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n\
            eth0\t405CD50A\t010200C0\t0003\t0\t0\t0\tC0FFFFFF\t0\t0\t0\n";
        let cidr = |s: &str| s.parse::<Ipv4Net>().expect("test subnet");
        assert_eq!(
            connected_in(table, cidr("10.213.92.0/24")),
            vec![cidr("10.213.92.32/29")]
        );
        assert_eq!(connected_in("", cidr("10.213.92.0/24")), vec![]);
    }
}
