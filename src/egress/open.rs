//! The proxy's open connections, per agent: counted against `sandbox.egress.max_connections`,
//! and checked again whenever the agent's rules change, so a connection the new rules no longer
//! allow is closed at once instead of living on until it ends by itself.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::rules::{EgressRules, Verdict};

#[derive(Default)]
struct AgentConns {
    /// Sandbox connections to the proxy.
    clients: usize,
    next: u64,
    /// Connections the proxy opened for it, each with what it was decided on.
    upstream: HashMap<u64, Upstream>,
}

struct Upstream {
    name: Option<String>,
    addr: IpAddr,
    port: u16,
    cancel: CancellationToken,
}

#[derive(Default)]
struct Inner {
    agents: HashMap<String, AgentConns>,
}

#[derive(Clone, Default)]
pub struct Connections {
    inner: Arc<Mutex<Inner>>,
}

/// One sandbox connection to the proxy; counted until dropped.
pub struct ClientSlot {
    conns: Connections,
    agent: String,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.conns
            .change(&self.agent, |a| a.clients = a.clients.saturating_sub(1));
    }
}

/// One connection the proxy opened; `cancelled` fires when the rules no longer allow it.
pub struct UpstreamSlot {
    conns: Connections,
    agent: String,
    key: u64,
    pub cancelled: CancellationToken,
}

impl Drop for UpstreamSlot {
    fn drop(&mut self) {
        let key = self.key;
        self.conns.change(&self.agent, |a| {
            a.upstream.remove(&key);
        });
    }
}

impl Connections {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `f` to the agent's entry, and forgets the entry once it holds nothing.
    fn change(&self, agent: &str, f: impl FnOnce(&mut AgentConns)) {
        let agents = &mut self.lock().agents;
        if let Some(a) = agents.get_mut(agent) {
            f(a);
            if a.clients == 0 && a.upstream.is_empty() {
                agents.remove(agent);
            }
        }
    }

    /// Counts a new sandbox connection, unless the agent already holds `max` (then `max` is
    /// the error). The total of all agents is the proxy's accept-time cap, checked before this.
    pub fn admit(&self, agent: &str, max: usize) -> Result<ClientSlot, usize> {
        let mut inner = self.lock();
        let a = inner.agents.entry(agent.to_string()).or_default();
        if a.clients >= max {
            return Err(max);
        }
        a.clients += 1;
        Ok(ClientSlot {
            conns: self.clone(),
            agent: agent.to_string(),
        })
    }

    /// Records a connection the proxy opened for `agent` to `addr:port` (named `name`).
    pub fn opened(
        &self,
        agent: &str,
        name: Option<String>,
        addr: IpAddr,
        port: u16,
    ) -> UpstreamSlot {
        let cancel = CancellationToken::new();
        let mut inner = self.lock();
        let a = inner.agents.entry(agent.to_string()).or_default();
        let key = a.next;
        a.next += 1;
        a.upstream.insert(
            key,
            Upstream {
                name,
                addr,
                port,
                cancel: cancel.clone(),
            },
        );
        UpstreamSlot {
            conns: self.clone(),
            agent: agent.to_string(),
            key,
            cancelled: cancel,
        }
    }

    /// Closes the agent's connections that `rules` no longer allow; returns how many.
    pub fn recheck(&self, agent: &str, rules: &EgressRules) -> usize {
        let inner = self.lock();
        let Some(a) = inner.agents.get(agent) else {
            return 0;
        };
        let mut closed = 0;
        for up in a.upstream.values() {
            let verdict = rules.decide(up.name.as_deref(), up.addr, up.port);
            if matches!(verdict, Verdict::Denied(_)) && !up.cancel.is_cancelled() {
                up.cancel.cancel();
                closed += 1;
            }
        }
        closed
    }

    /// Closes every connection the proxy opened for `agent` (it is gone).
    pub fn close_all(&self, agent: &str) {
        if let Some(a) = self.lock().agents.get(agent) {
            a.upstream.values().for_each(|up| up.cancel.cancel());
        }
    }

    /// Agents with connections open now.
    pub fn agents(&self) -> Vec<String> {
        self.lock().agents.keys().cloned().collect()
    }

    /// Connections the proxy holds open for `agent` now.
    pub fn upstream_count(&self, agent: &str) -> usize {
        self.lock()
            .agents
            .get(agent)
            .map_or(0, |a| a.upstream.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_change_cancels_only_what_it_no_longer_allows() {
        let conns = Connections::default();
        let allow = |l: &[&str]| EgressRules {
            allow: l.iter().map(|r| r.parse().unwrap()).collect(),
            deny: vec![],
        };
        let ip: IpAddr = "203.0.113.1".parse().unwrap();
        let pypi = conns.opened("a", Some("pypi.org".into()), ip, 443);
        let gh = conns.opened("a", Some("github.com".into()), ip, 443);
        let other = conns.opened("b", Some("github.com".into()), ip, 443);
        assert_eq!(conns.recheck("a", &allow(&["pypi.org"])), 1);
        assert!(!pypi.cancelled.is_cancelled());
        assert!(gh.cancelled.is_cancelled());
        assert!(!other.cancelled.is_cancelled());
        drop((pypi, gh));
        assert_eq!(conns.upstream_count("a"), 0);
        assert_eq!(conns.agents(), vec!["b".to_string()]);
    }

    #[test]
    fn admission_stops_at_the_cap_and_frees_on_drop() {
        let conns = Connections::default();
        let a = conns.admit("a", 2).unwrap();
        let _b = conns.admit("a", 2).unwrap();
        assert_eq!(conns.admit("a", 2).err(), Some(2));
        let _c = conns.admit("other", 2).unwrap();
        drop(a);
        assert!(conns.admit("a", 2).is_ok());
    }
}
