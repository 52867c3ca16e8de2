//! Per-agent subnets carved out of `sandbox.docker.network_pool`.
//!
//! Layout of one subnet (a /28 here): `.0` network, `.1` the bridge gateway (the host), `.2` the
//! server's container when it runs in one, the lower half otherwise unused, and the upper half
//! the range Docker gives containers, so a sandbox can never take `.2` before the server does.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

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
}
