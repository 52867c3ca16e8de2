//! Host firewall rules that keep a sandbox away from the host itself.
//!
//! Docker's `--internal` networks drop forwarded traffic, but a packet to any of the host's own
//! addresses (its LAN address, other bridges' gateways, the API if it listens on them) is not
//! forwarded: it goes to the host's INPUT chain, which Docker leaves alone. So for every agent
//! bridge the driver puts rules at the top of INPUT: accept TCP to the gateway's tunnel and egress
//! proxy ports and replies to connections the host opened, drop everything else coming in on that
//! bridge. Each rule carries a comment naming the installation and agent, so destroy and orphan cleanup find
//! them again.
//!
//! Only used when the server runs on the host. A server in a container cannot touch the host's
//! firewall and needs no rules: its agent bridges have no host address at all (see
//! `placement::INHIBIT_IPV4`), so a sandbox's packets for the host find nobody to take them.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use tokio::process::Command;

use super::error::DockerError;

/// Where each kind of rule goes: (table, chain).
const FILTER: (&str, &str) = ("filter", "INPUT");
const NAT: (&str, &str) = ("nat", "PREROUTING");

/// The server's ports a sandbox reaches on its gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ports {
    pub tunnel: u16,
    /// The egress proxy (TCP).
    pub proxy: u16,
    /// The egress resolver (UDP), when transparent mode is on: then the sandbox's DNS and its
    /// TCP to ports 80 and 443 are redirected to the server.
    pub transparent_dns: Option<u16>,
}

/// One agent's rules: (agent, bridge, gateway, ports).
type RuleKey = (String, String, Ipv4Addr, Ports);

/// A rule: its table and chain, and its specification.
type Rule = ((&'static str, &'static str), Vec<String>);

#[derive(Debug, Clone)]
pub struct Firewall {
    prefix: String,
    /// Rules this process has put in place or checked, as (agent, bridge, gateway, ports): a start
    /// then costs no iptables call. Empty at every server start, so each agent's rules are
    /// checked again once per server lifetime.
    ensured: Arc<Mutex<HashSet<RuleKey>>>,
}

impl Firewall {
    pub fn new(prefix: &str) -> Firewall {
        Firewall {
            prefix: prefix.to_string(),
            ensured: Arc::default(),
        }
    }

    fn ensured(&self) -> std::sync::MutexGuard<'_, HashSet<RuleKey>> {
        self.ensured.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The comment on this agent's rules (no spaces, so `iptables -S` lines split into words).
    fn tag(&self, id: &str) -> String {
        format!("agenthold:{}:{id}", self.prefix)
    }

    /// In chain order: in INPUT the tunnel, the proxy (and the resolver), answers to
    /// connections the host opened, drop the rest; in the nat table's PREROUTING (transparent
    /// mode) DNS to the resolver and TCP to ports 80 and 443 to the proxy, whatever address the
    /// sandbox aimed at.
    fn rules(&self, id: &str, bridge: &str, gateway: Ipv4Addr, ports: Ports) -> Vec<Rule> {
        let tag = self.tag(id);
        let accept = |proto: &str, port: u16| {
            format!(
                "-i {bridge} -d {gateway}/32 -p {proto} -m {proto} --dport {port} -m comment --comment {tag} -j ACCEPT"
            )
        };
        let mut filter = vec![accept("tcp", ports.tunnel), accept("tcp", ports.proxy)];
        let mut nat = Vec::new();
        if let Some(dns) = ports.transparent_dns {
            filter.push(accept("udp", dns));
            nat.push(format!(
                "-i {bridge} -p udp -m udp --dport 53 -m comment --comment {tag} -j DNAT --to-destination {gateway}:{dns}"
            ));
            nat.push(format!(
                "-i {bridge} -p tcp -m multiport --dports 80,443 -m comment --comment {tag} -j DNAT --to-destination {gateway}:{}",
                ports.proxy
            ));
        }
        // Lets the host talk to a sandbox (replies come back on the bridge); a sandbox still
        // cannot open anything itself.
        filter.push(format!(
            "-i {bridge} -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment {tag} -j ACCEPT"
        ));
        filter.push(format!("-i {bridge} -m comment --comment {tag} -j DROP"));
        let words = |r: String| r.split_whitespace().map(String::from).collect::<Vec<_>>();
        filter
            .into_iter()
            .map(|r| (FILTER, words(r)))
            .chain(nat.into_iter().map(|r| (NAT, words(r))))
            .collect()
    }

    /// Makes sure exactly this agent's rules are in place, in order.
    pub async fn ensure(
        &self,
        id: &str,
        bridge: &str,
        gateway: Ipv4Addr,
        ports: Ports,
    ) -> Result<(), DockerError> {
        let key = (id.to_string(), bridge.to_string(), gateway, ports);
        if self.ensured().contains(&key) {
            return Ok(());
        }
        let wanted = self.rules(id, bridge, gateway, ports);
        let present = self.present(id).await?;
        let mut ok = present.len() == wanted.len();
        for ((table, chain), rule) in &wanted {
            if !ok {
                break;
            }
            ok = iptables(&[&["-t", table, "-C", chain], &str_refs(rule)[..]].concat())
                .await
                .is_ok();
        }
        if ok {
            self.ensured().insert(key);
            return Ok(());
        }
        // Something is missing or stale (another port, another bridge): start over. Each
        // goes in at the top of its chain, last first, so the chains read in `rules` order.
        if !present.is_empty() {
            self.remove(id).await?;
        }
        for ((table, chain), rule) in wanted.iter().rev() {
            iptables(&[&["-t", table, "-I", chain, "1"], &str_refs(rule)[..]].concat()).await?;
        }
        tracing::debug!(agent = id, bridge, %gateway, ?ports, "host firewall rules in place");
        self.ensured().insert(key);
        Ok(())
    }

    /// Removes every rule of this agent; none is fine.
    pub async fn remove(&self, id: &str) -> Result<(), DockerError> {
        self.ensured().retain(|(agent, ..)| agent != id);
        for ((table, chain), spec) in self.present(id).await? {
            let Some(rest) = spec.strip_prefix(&format!("-A {chain} ")) else {
                continue;
            };
            // iptables-nft prints the comment in quotes; the argument must go back without them.
            let args: Vec<&str> = rest
                .split_whitespace()
                .map(|w| w.trim_matches('"'))
                .collect();
            iptables(&[&["-t", table, "-D", chain], &args[..]].concat()).await?;
        }
        Ok(())
    }

    /// The agents of this installation that have rules: a server killed between removing a
    /// sandbox's objects and its rules leaves rules that only this finds again.
    pub async fn agents(&self) -> Result<HashSet<String>, DockerError> {
        let mut found = HashSet::new();
        for (table, chain) in [FILTER, NAT] {
            let out = list(table, chain).await?;
            found.extend(agents_tagged(&out, &self.prefix));
        }
        Ok(found)
    }

    /// The `iptables -S` lines of this agent's rules, with their table and chain.
    async fn present(
        &self,
        id: &str,
    ) -> Result<Vec<((&'static str, &'static str), String)>, DockerError> {
        let tag = self.tag(id);
        let mut found = Vec::new();
        for (table, chain) in [FILTER, NAT] {
            let out = list(table, chain).await?;
            found.extend(
                out.lines()
                    .filter(|l| l.split_whitespace().any(|w| w.trim_matches('"') == tag))
                    .map(|l| ((table, chain), l.to_string())),
            );
        }
        Ok(found)
    }
}

/// `iptables -S` of one chain. A host whose nat table cannot be read (no `iptable_nat`) has
/// no transparent-mode rules in it either: that reads as empty, so agents can still be
/// destroyed there; the filter table must be readable.
async fn list(table: &str, chain: &str) -> Result<String, DockerError> {
    match iptables(&["-t", table, "-S", chain]).await {
        Err(e) if (table, chain) == NAT => {
            tracing::debug!("cannot read the nat table: {e}");
            Ok(String::new())
        }
        other => other,
    }
}

/// The agent ids in the comments `agenthold:<prefix>:<id>` of `iptables -S` output.
fn agents_tagged(rules: &str, prefix: &str) -> HashSet<String> {
    let head = format!("agenthold:{prefix}:");
    rules
        .split_whitespace()
        .filter_map(|w| w.trim_matches('"').strip_prefix(&head))
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .collect()
}

fn str_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Runs `iptables -w ARGS` (waiting for the xtables lock that Docker also takes).
async fn iptables(args: &[&str]) -> Result<String, DockerError> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| DockerError::Firewall(format!("cannot run iptables: {e}")))?;
    if !out.status.success() {
        return Err(DockerError::Firewall(format!(
            "iptables {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_tagged_and_ordered() {
        let fw = Firewall::new("ah");
        let gw = Ipv4Addr::new(10, 213, 0, 1);
        let ports = Ports {
            tunnel: 8090,
            proxy: 8091,
            transparent_dns: Some(8053),
        };
        let rules = fw.rules("abc", "br-0123", gw, ports);
        let text: Vec<(&str, String)> = rules.iter().map(|((t, _), r)| (*t, r.join(" "))).collect();
        assert_eq!(text.len(), 7);
        assert!(text[0]
            .1
            .contains("-d 10.213.0.1/32 -p tcp -m tcp --dport 8090"));
        assert!(text[1]
            .1
            .contains("-d 10.213.0.1/32 -p tcp -m tcp --dport 8091"));
        assert!(text[2]
            .1
            .contains("-d 10.213.0.1/32 -p udp -m udp --dport 8053"));
        assert!(text[3].1.contains("--ctstate RELATED,ESTABLISHED"));
        assert!(text[4].1.ends_with("-j DROP"));
        assert_eq!(text[5].0, "nat");
        assert!(
            text[5].1.contains("-p udp -m udp --dport 53")
                && text[5].1.ends_with("--to-destination 10.213.0.1:8053")
        );
        assert!(
            text[6].1.contains("--dports 80,443")
                && text[6].1.ends_with("--to-destination 10.213.0.1:8091")
        );
        for (_, r) in &rules {
            assert!(r.iter().any(|w| w == "agenthold:ah:abc"));
            assert!(r.windows(2).any(|w| w[0] == "-i" && w[1] == "br-0123"));
        }
        let plain = fw.rules(
            "abc",
            "br-0123",
            gw,
            Ports {
                transparent_dns: None,
                ..ports
            },
        );
        assert_eq!(
            plain.len(),
            4,
            "without transparent mode: no resolver, no redirection"
        );
        assert!(plain.iter().all(|((t, _), _)| *t == "filter"));
    }

    #[test]
    fn agents_are_found_by_their_installation_tag_only() {
        let rules = "-P INPUT ACCEPT\n\
            -A INPUT -i br-1 -m comment --comment \"agenthold:ah:abc\" -j DROP\n\
            -A INPUT -i br-2 -m comment --comment agenthold:ah:def -j DROP\n\
            -A INPUT -i br-3 -m comment --comment \"agenthold:ahbench:xyz\" -j DROP\n";
        let found = agents_tagged(rules, "ah");
        assert_eq!(found, HashSet::from(["abc".to_string(), "def".to_string()]));
    }
}
