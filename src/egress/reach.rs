//! Addresses the proxy never connects to, whatever the rules say: `*` means any *public*
//! destination. Checked on the address actually dialled, after resolving, so a public name that
//! resolves to `10.0.0.5` (or `localhost`) is refused too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use ipnet::IpNet;

/// Whether `addr` is an address of the public internet: not loopback, private, shared (CGNAT),
/// link-local, multicast, broadcast, unspecified, reserved, nor an
/// IPv6 form of one of those.
pub fn is_public(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(a: Ipv4Addr) -> bool {
    !NON_PUBLIC.iter().any(|b| b.contains(&IpAddr::V4(a)))
}

fn is_public_v6(a: Ipv6Addr) -> bool {
    let seg = a.segments();
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address: judge that one.
    // (64:ff9b:1::/48, NAT64 for local use, is in the list below: whatever it maps to is the
    // operator's network.)
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        let [a, b, c, d] =
            [seg[6] >> 8, seg[6] & 0xff, seg[7] >> 8, seg[7] & 0xff].map(|x| x as u8);
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    if seg[0] == 0x2002 {
        let [a, b, c, d] =
            [seg[1] >> 8, seg[1] & 0xff, seg[2] >> 8, seg[2] & 0xff].map(|x| x as u8);
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !NON_PUBLIC.iter().any(|b| b.contains(&IpAddr::V6(a)))
}

/// Every address that is not of the public internet, as [`is_public`] decides, block by block:
/// unspecified and "this network", private, shared (CGNAT), loopback, link-local, protocol
/// assignments, benchmarking, multicast, reserved and broadcast; in IPv6 the low reserved
/// addresses (`::`, `::1`, the IPv4-compatible form), NAT64 for local use, unique local,
/// link-local and multicast. A rule that lies inside one of them names private addresses on
/// purpose; one that reaches past them (`0.0.0.0/0`) does not.
const NON_PUBLIC_BLOCKS: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/96",
    "64:ff9b:1::/48",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// Ranges that hold private addresses only in part (IPv4 carried in IPv6): a rule that touches
/// them is no rule of public addresses alone.
const PARTLY_NON_PUBLIC: &[&str] = &["::ffff:0:0/96", "64:ff9b::/96", "2002::/16"];

/// [`NON_PUBLIC_BLOCKS`] and [`PARTLY_NON_PUBLIC`], parsed once: every dial reads them.
static NON_PUBLIC: LazyLock<Vec<IpNet>> = LazyLock::new(|| parse(NON_PUBLIC_BLOCKS));
static PARTLY: LazyLock<Vec<IpNet>> = LazyLock::new(|| parse(PARTLY_NON_PUBLIC));

fn parse(list: &[&str]) -> Vec<IpNet> {
    list.iter()
        .map(|b| {
            b.parse()
                .expect("the lists above are literals, and a test parses them")
        })
        .collect()
}

/// Whether `net` names `addr` on purpose, where [`reachable`] would refuse it: for a private
/// address, `net` lies inside the one private block that holds it (`10.0.0.0/8`, never
/// `0.0.0.0/0`); for one of this host's public addresses, `net` holds public addresses alone.
/// So a wide range means what `*` means, and only a rule as narrow as the private range it
/// opens opens it.
pub fn names_on_purpose(net: &IpNet, addr: IpAddr) -> bool {
    let addr = addr.to_canonical();
    if !net.contains(&addr) {
        return false;
    }
    if is_public(addr) {
        let overlaps = |b: &IpNet| b.contains(&net.network()) || net.contains(&b.network());
        return !NON_PUBLIC.iter().chain(PARTLY.iter()).any(overlaps);
    }
    match NON_PUBLIC.iter().find(|b| b.contains(&addr)) {
        Some(block) => block.contains(net),
        // A private address carried in IPv6 (NAT64, 6to4): only that very address names it.
        None => net.prefix_len() == net.max_prefix_len(),
    }
}

/// Whether the proxy may dial `addr`: public, in none of `never` (the agent networks, which an
/// operator may have put in a public range), and not one of this host's own addresses (a host
/// with a public address would otherwise hand a sandbox its own API).
pub fn reachable(addr: IpAddr, never: &[IpNet]) -> bool {
    let addr = addr.to_canonical();
    is_public(addr) && !never.iter().any(|n| n.contains(&addr)) && !is_own(addr)
}

/// Whether `addr` is an address of one of this host's interfaces (or loopback), read at each
/// call: addresses come and go. Unreadable counts as own, so a failure refuses.
pub fn is_own(addr: IpAddr) -> bool {
    let addr = addr.to_canonical();
    if addr.is_loopback() || addr.is_unspecified() {
        return true;
    }
    let Ok(ifaces) = nix::ifaddrs::getifaddrs() else {
        return true;
    };
    ifaces.filter_map(|i| i.address).any(|sa| {
        let found = if let Some(v4) = sa.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            return false;
        };
        found.to_canonical() == addr
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_lists_parse() {
        assert_eq!(parse(NON_PUBLIC_BLOCKS).len(), NON_PUBLIC_BLOCKS.len());
        assert_eq!(parse(PARTLY_NON_PUBLIC).len(), PARTLY_NON_PUBLIC.len());
    }

    #[test]
    fn a_range_names_private_addresses_only_inside_their_block() {
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (rule, addr, named) in [
            ("10.0.0.0/8", "10.1.2.3", true),
            ("10.1.0.0/16", "10.1.2.3", true),
            ("10.1.2.3/32", "10.1.2.3", true),
            ("0.0.0.0/0", "10.1.2.3", false),
            ("0.0.0.0/1", "10.1.2.3", false),
            ("8.0.0.0/6", "10.1.2.3", false),
            ("0.0.0.0/0", "127.0.0.1", false),
            ("127.0.0.0/8", "127.0.0.1", true),
            ("172.16.0.0/12", "172.20.0.1", true),
            ("172.0.0.0/8", "172.20.0.1", false),
            ("::/0", "fd00::1", false),
            ("fd00::/8", "fd00::1", true),
            ("::/0", "::ffff:10.1.2.3", false),
            ("10.0.0.0/8", "::ffff:10.1.2.3", true),
            // A host's own public address: a range of public addresses alone names it.
            ("203.0.113.0/24", "203.0.113.7", true),
            ("0.0.0.0/0", "203.0.113.7", false),
            ("::/0", "2001:db8::1", false),
            ("2001:db8::/32", "2001:db8::1", true),
            // Not in the range at all.
            ("10.0.0.0/8", "192.168.1.1", false),
        ] {
            assert_eq!(
                names_on_purpose(&net(rule), ip(addr)),
                named,
                "{rule} {addr}"
            );
        }
    }

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "::10.0.0.1",
            "64:ff9b:1::808:808",
            // The edges of the smaller blocks.
            "100.127.255.255",
            "192.0.0.9",
            "198.18.0.1",
            "198.19.255.255",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "8.8.8.8",
            "203.0.113.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "100.128.0.1",
            "100.63.255.255",
            "192.0.1.1",
            "198.20.0.1",
            "172.32.0.1",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn this_hosts_own_addresses_are_never_reachable() {
        let own: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
            .unwrap()
            .filter_map(|i| i.address)
            .filter_map(|a| a.as_sockaddr_in().map(|v4| IpAddr::V4(v4.ip())))
            .collect();
        assert!(!own.is_empty());
        for addr in own {
            assert!(is_own(addr), "{addr}");
            assert!(!reachable(addr, &[]), "{addr}");
        }
        assert!(!is_own("203.0.113.77".parse().unwrap()));
    }

    #[test]
    fn the_never_list_holds_even_for_public_addresses() {
        let never: Vec<IpNet> = vec!["198.51.100.0/24".parse().unwrap()];
        assert!(!reachable("198.51.100.7".parse().unwrap(), &never));
        assert!(reachable("198.51.101.7".parse().unwrap(), &never));
    }
}
