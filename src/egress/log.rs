//! What the server remembers of each agent's egress: its last [`LOG_LEN`] decisions (in memory
//! only, so empty after a restart), and the destinations refused while a command or process ran
//! ([`DeniedWatch`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use chrono::{DateTime, Utc};

use super::event::EgressEvent;

/// Decisions kept per agent.
pub const LOG_LEN: usize = 200;
/// Refused destinations kept per command or process (each host and port once).
pub const MAX_DENIED: usize = 32;
/// Processes per agent whose refusals are kept (sandboxd's own cap on processes it remembers).
const MAX_PROCESS_WATCHES: usize = 4096;

/// One decision of the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub at: DateTime<Utc>,
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// The rule that decided; `None` when no rule matched.
    pub rule: Option<String>,
    /// Why it was refused or could not be reached, or how an allowed connection ended.
    pub reason: Option<String>,
    /// Bytes up and down, once an allowed connection has closed.
    pub bytes: Option<(u64, u64)>,
    /// The secret the decision was about (swapped in, or what got the request refused).
    pub secret: Option<String>,
}

/// A destination the proxy refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub host: String,
    pub port: u16,
    /// The deny rule that refused it; `None` when no allow rule matched.
    pub rule: Option<String>,
}

#[derive(Debug, Default)]
struct DeniedList {
    list: Vec<Denied>,
    /// Set at the end of what is watched: nothing is added after.
    ended: bool,
}

/// Collects the destinations refused for one agent from its creation until it is dropped or
/// [`DeniedWatch::end`]s: each host and port once, at most [`MAX_DENIED`].
#[derive(Debug, Clone)]
pub struct DeniedWatch {
    inner: Arc<Mutex<DeniedList>>,
}

impl DeniedWatch {
    /// What was refused so far, in the order first refused.
    pub fn denied(&self) -> Vec<Denied> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .clone()
    }

    /// Stops collecting; what was collected stays.
    pub fn end(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
    }
}

#[derive(Default)]
struct AgentLog {
    entries: VecDeque<LogEntry>,
    watches: Vec<Weak<Mutex<DeniedList>>>,
    /// Watches kept for background processes, by process id.
    processes: HashMap<String, DeniedWatch>,
}

/// Every agent's egress log and watches.
#[derive(Default)]
pub struct EgressLog {
    agents: Mutex<HashMap<String, AgentLog>>,
}

impl EgressLog {
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut AgentLog) -> T) -> T {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        f(agents.entry(id.to_string()).or_default())
    }

    /// Records one event of the proxy: a decision is a new entry; the close of an allowed
    /// connection gives its bytes to the oldest open entry of the same destination (one that
    /// was allowed but could not be reached has none: it is an entry of its own).
    pub fn record(&self, event: &EgressEvent) {
        let now = Utc::now();
        self.with(&event.id, |log| {
            let bytes =
                (event.allowed && event.closed).then_some((event.bytes_up, event.bytes_down));
            if bytes.is_some() {
                let open = log.entries.iter_mut().find(|e| {
                    e.allowed && e.bytes.is_none() && e.host == event.host && e.port == event.port
                });
                if let Some(entry) = open {
                    entry.bytes = bytes;
                    if event.reason.is_some() {
                        entry.reason.clone_from(&event.reason);
                    }
                    return;
                }
            }
            if log.entries.len() >= LOG_LEN {
                log.entries.pop_front();
            }
            log.entries.push_back(LogEntry {
                at: now,
                host: event.host.clone(),
                port: event.port,
                allowed: event.allowed,
                rule: event.rule.clone(),
                reason: event.reason.clone(),
                bytes,
                secret: event.secret.clone(),
            });
            if event.allowed {
                return;
            }
            let denied = Denied {
                host: event.host.clone(),
                port: event.port,
                rule: event.rule.clone(),
            };
            log.watches.retain(|w| {
                let Some(list) = w.upgrade() else {
                    return false;
                };
                let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
                if list.ended {
                    return false;
                }
                let seen = list
                    .list
                    .iter()
                    .any(|d| d.host == denied.host && d.port == denied.port);
                if !seen && list.list.len() < MAX_DENIED {
                    list.list.push(denied.clone());
                }
                true
            });
        });
    }

    /// Agent `id`'s decisions, oldest first.
    pub fn entries(&self, id: &str) -> Vec<LogEntry> {
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents
            .get(id)
            .map(|log| log.entries.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Starts collecting what is refused for agent `id` from now.
    pub fn watch(&self, id: &str) -> DeniedWatch {
        let watch = DeniedWatch {
            inner: Arc::default(),
        };
        self.with(id, |log| log.watches.push(Arc::downgrade(&watch.inner)));
        watch
    }

    /// Keeps `watch` as agent `id`'s process `process`'s until the process is forgotten.
    pub fn keep_for_process(&self, id: &str, process: &str, watch: DeniedWatch) {
        self.with(id, |log| {
            if log.processes.len() >= MAX_PROCESS_WATCHES {
                log.processes
                    .retain(|_, w| !w.inner.lock().unwrap_or_else(|e| e.into_inner()).ended);
            }
            if log.processes.len() < MAX_PROCESS_WATCHES {
                log.processes.insert(process.to_string(), watch);
            }
        });
    }

    /// What was refused while agent `id`'s process `process` ran (empty for one the server did
    /// not start, or started before it last restarted).
    pub fn denied_for_process(&self, id: &str, process: &str) -> Vec<Denied> {
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents
            .get(id)
            .and_then(|log| log.processes.get(process))
            .map(DeniedWatch::denied)
            .unwrap_or_default()
    }

    /// Agent `id`'s process `process` ended: what is refused from now is not its.
    pub fn process_ended(&self, id: &str, process: &str) {
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(watch) = agents.get(id).and_then(|log| log.processes.get(process)) {
            watch.end();
        }
    }

    /// Forgets agent `id`'s process `process`.
    pub fn forget_process(&self, id: &str, process: &str) {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = agents.get_mut(id) {
            log.processes.remove(process);
        }
    }

    /// Forgets the processes of agent `id` (its sandbox was rebuilt or destroyed).
    pub fn forget_processes(&self, id: &str) {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = agents.get_mut(id) {
            log.processes.clear();
        }
    }

    /// Forgets everything of agent `id` (it was destroyed).
    pub fn forget(&self, id: &str) {
        self.agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(host: &str, port: u16, allowed: bool, closed: bool) -> EgressEvent {
        EgressEvent {
            id: "a".into(),
            host: host.into(),
            port,
            allowed,
            rule: allowed.then(|| host.to_string()),
            reason: None,
            closed: closed || !allowed,
            bytes_up: if closed { 5 } else { 0 },
            bytes_down: if closed { 7 } else { 0 },
            secret: None,
        }
    }

    #[test]
    fn the_log_keeps_the_last_decisions_with_the_bytes_of_closed_connections() {
        let log = EgressLog::default();
        log.record(&event("pypi.org", 443, true, false));
        log.record(&event("evil.example", 443, false, false));
        log.record(&event("pypi.org", 443, true, true));
        let entries = log.entries("a");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].bytes, Some((5, 7)));
        assert!(!entries[1].allowed && entries[1].bytes.is_none());
        // Allowed but unreachable: closed at once, never opened.
        let mut unreachable = event("gone.example", 443, true, true);
        unreachable.reason = Some("no such name".into());
        log.record(&unreachable);
        let last = log.entries("a").pop().unwrap();
        assert_eq!(
            (last.host.as_str(), last.allowed, last.reason.as_deref()),
            ("gone.example", true, Some("no such name"))
        );
        for n in 0..LOG_LEN + 10 {
            log.record(&event(&format!("h{n}.example"), 80, false, false));
        }
        let entries = log.entries("a");
        assert_eq!(entries.len(), LOG_LEN);
        assert_eq!(
            entries.last().unwrap().host,
            format!("h{}.example", LOG_LEN + 9)
        );
        assert!(log.entries("b").is_empty());
        log.forget("a");
        assert!(log.entries("a").is_empty());
    }

    #[test]
    fn a_watch_collects_refusals_once_each_capped_until_it_ends() {
        let log = EgressLog::default();
        log.record(&event("before.example", 443, false, false));
        let watch = log.watch("a");
        let other = log.watch("b");
        log.record(&event("pypi.org", 443, true, false));
        log.record(&event("evil.example", 443, false, false));
        log.record(&event("evil.example", 443, false, false));
        log.record(&event("evil.example", 80, false, false));
        let hosts = |w: &DeniedWatch| -> Vec<(String, u16)> {
            w.denied().into_iter().map(|d| (d.host, d.port)).collect()
        };
        assert_eq!(
            hosts(&watch),
            [("evil.example".into(), 443), ("evil.example".into(), 80)]
        );
        assert!(other.denied().is_empty());
        for n in 0..MAX_DENIED * 2 {
            log.record(&event(&format!("h{n}.example"), 80, false, false));
        }
        assert_eq!(watch.denied().len(), MAX_DENIED);
        // A process's watch ends with it and is kept until the process is forgotten.
        let process = log.watch("a");
        log.keep_for_process("a", "p1", process);
        log.record(&event("during.example", 443, false, false));
        log.process_ended("a", "p1");
        log.record(&event("after.example", 443, false, false));
        let denied = log.denied_for_process("a", "p1");
        assert_eq!(denied.len(), 1);
        assert_eq!(denied[0].host, "during.example");
        log.forget_process("a", "p1");
        assert!(log.denied_for_process("a", "p1").is_empty());
        drop(watch);
        log.record(&event("x.example", 443, false, false));
        let agents = log.agents.lock().unwrap();
        assert!(agents["a"].watches.is_empty(), "dropped watches are pruned");
    }
}
