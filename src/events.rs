//! The fan-out of agent changes to SSE clients and waiters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use agenthold_proto::{ProcessInfo, ProcessState};

use crate::egress::{EgressEvent, EgressLog};
use crate::model::Agent;
use crate::model::{PullProgress, PullStatus};

/// Processes remembered per agent (sandboxd runs at most `sandbox.max_processes`, 1024 at
/// most, and keeps as many finished ones); finished ones are dropped first.
const MAX_PROCESSES_SEEN: usize = 4096;

#[derive(Debug, Clone)]
pub enum AgentEvent {
    Changed(Box<Agent>),
    Deleted(String),
    /// How far the image pull for agent `id`'s sandbox has got (a few a second at most).
    Pull {
        id: String,
        progress: Box<PullProgress>,
    },
    /// The egress proxy decided on a destination, or an allowed connection closed.
    Egress(Box<crate::egress::EgressEvent>),
    /// A session was created or changed (a turn started or ended, a rename).
    Session(Box<crate::model::sessions::SessionRecord>),
    /// A session was deleted.
    SessionDeleted {
        id: String,
        agent_id: String,
    },
    /// An approval was asked for or resolved.
    Approval(Box<crate::model::sessions::ApprovalRecord>),
    /// A background process of agent `id` started or ended.
    Process {
        id: String,
        process: Box<ProcessInfo>,
    },
    /// Agent `id`'s lifetime ends soon: it will be destroyed at `expires_at`.
    Expiring {
        id: String,
        expires_at: chrono::DateTime<chrono::Utc>,
    },
}

impl AgentEvent {
    /// Whether the event shows what only the `agents:use` scope may read (process command lines,
    /// sessions), as the routes that list those need it.
    pub fn shows_use(&self) -> bool {
        matches!(
            self,
            AgentEvent::Process { .. } | AgentEvent::Session(_) | AgentEvent::SessionDeleted { .. }
        )
    }

    /// The id of the agent the event is about.
    pub fn agent_id(&self) -> &str {
        match self {
            AgentEvent::Changed(a) => &a.id,
            AgentEvent::Deleted(id)
            | AgentEvent::Pull { id, .. }
            | AgentEvent::Process { id, .. }
            | AgentEvent::Expiring { id, .. } => id,
            AgentEvent::Egress(e) => &e.id,
            AgentEvent::Session(s) => &s.agent_id,
            AgentEvent::SessionDeleted { agent_id, .. } => agent_id,
            AgentEvent::Approval(a) => &a.agent_id,
        }
    }
}

/// A broadcast of [`AgentEvent`]s; a slow subscriber loses old events and is told so. It also
/// keeps each agent's pull in progress, so that a snapshot of the agent can show it.
#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<AgentEvent>,
    pulls: Arc<Mutex<HashMap<String, PullProgress>>>,
    /// Each agent's processes as last announced, so that the report of every process sandboxd
    /// sends at each (re)connection announces only what changed, and a stop can announce what
    /// it ended.
    processes: Arc<Mutex<HashMap<String, HashMap<String, ProcessInfo>>>>,
    /// Each agent's recent egress decisions, and what was refused while its commands ran.
    egress: Arc<EgressLog>,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub {
            tx: broadcast::channel(1024).0,
            pulls: Arc::default(),
            processes: Arc::default(),
            egress: Arc::default(),
        }
    }
}

impl EventHub {
    pub fn publish(&self, event: AgentEvent) {
        // No subscriber is not an error. A broadcast send never waits for a subscriber.
        let _ = self.tx.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<AgentEvent> {
        self.tx.subscribe()
    }

    /// The egress log of every agent.
    pub fn egress_log(&self) -> &EgressLog {
        &self.egress
    }

    /// Remembers a decision of the egress proxy and announces it.
    pub fn egress(&self, event: EgressEvent) {
        self.egress.record(&event);
        self.publish(AgentEvent::Egress(Box::new(event)));
    }

    /// Records agent `id`'s pull progress and announces it. A pull that ended (done or failed)
    /// is announced once and no longer shown on the agent.
    pub fn pull(&self, id: &str, progress: PullProgress) {
        {
            let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
            if progress.status == PullStatus::Pulling {
                pulls.insert(id.to_string(), progress.clone());
            } else {
                pulls.remove(id);
            }
        }
        self.publish(AgentEvent::Pull {
            id: id.to_string(),
            progress: Box::new(progress),
        });
    }

    /// Agent `id`'s pull in progress, if one is.
    pub fn pull_of(&self, id: &str) -> Option<PullProgress> {
        self.pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Forgets agent `id`'s pull without announcing anything: its operation is over, whether
    /// or not the driver said how the pull ended.
    pub fn forget_pull(&self, id: &str) {
        self.pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// sandboxd reported agent `id`'s process `info`: announced when it is new or its state
    /// changed.
    pub fn process(&self, id: &str, info: ProcessInfo) {
        // What a sandbox reports is cut to the shapes sandboxd makes, whatever it sends.
        let Some(info) = info.sanitized() else {
            return;
        };
        {
            let mut all = self.processes.lock().unwrap_or_else(|e| e.into_inner());
            let seen = all.entry(id.to_string()).or_default();
            let known = seen.get(&info.id);
            // Each state once, and an ended process never runs again: a report that says so
            // is stale (or hostile).
            if known.is_some_and(|b| b.state == info.state || !b.state.is_running()) {
                return;
            }
            // sandboxd is the sandbox's own program, so its reports are bounded like any input
            // from a sandbox: past the cap news of unknown processes is dropped.
            if known.is_none() && seen.len() >= MAX_PROCESSES_SEEN {
                seen.retain(|_, p| p.state.is_running());
                if seen.len() >= MAX_PROCESSES_SEEN {
                    tracing::warn!(
                        agent = id,
                        "sandboxd reports more processes than it may run; ignoring the rest"
                    );
                    return;
                }
            }
            seen.insert(info.id.clone(), info.clone());
        }
        if !info.state.is_running() {
            self.egress.process_ended(id, &info.id);
        }
        self.publish(AgentEvent::Process {
            id: id.to_string(),
            process: Box::new(info),
        });
    }

    /// Agent `id`'s sandbox stopped: the processes last seen running ended with it. Announced
    /// now (sandboxd records the same when it next starts, and that report is then no news).
    pub fn sandbox_stopped(&self, id: &str) {
        let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
        let lost: Vec<ProcessInfo> = {
            let all = self.processes.lock().unwrap_or_else(|e| e.into_inner());
            all.get(id)
                .into_iter()
                .flat_map(|seen| seen.values())
                .filter(|p| p.state.is_running())
                .map(|p| ProcessInfo {
                    state: ProcessState::Lost,
                    ended_at_ms: Some(now),
                    stdin_open: false,
                    ..p.clone()
                })
                .collect()
        };
        for info in lost {
            self.process(id, info);
        }
    }

    /// Agent `id`'s processes as last announced, oldest first.
    pub fn processes_of(&self, id: &str) -> Vec<ProcessInfo> {
        let mut known: Vec<ProcessInfo> = {
            let all = self.processes.lock().unwrap_or_else(|e| e.into_inner());
            all.get(id)
                .map(|seen| seen.values().cloned().collect())
                .unwrap_or_default()
        };
        known.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        known
    }

    /// Forgets agent `id`'s process `process` (it was removed).
    pub fn forget_process(&self, id: &str, process: &str) {
        if let Some(seen) = self
            .processes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(id)
        {
            seen.remove(process);
        }
        self.egress.forget_process(id, process);
    }

    /// Forgets what was announced of agent `id`'s processes (it was destroyed or rebuilt).
    pub fn forget_processes(&self, id: &str) {
        self.processes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        self.egress.forget_processes(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(status: PullStatus, percent: u8) -> PullProgress {
        PullProgress {
            image: "x:1".into(),
            status,
            layers_done: 0,
            layers_total: 1,
            bytes_done: 0,
            bytes_total: 0,
            percent,
            error: None,
        }
    }

    #[test]
    fn a_pull_is_shown_while_it_runs_and_every_report_is_announced() {
        let hub = EventHub::default();
        let mut rx = hub.subscribe();
        let sink = crate::driver::PullSink::new({
            let hub = hub.clone();
            move |progress| hub.pull("a1", progress)
        });
        assert_eq!(hub.pull_of("a1"), None);
        let mut meter = crate::driver::PullMeter::start(sink, "x:1");
        assert_eq!(
            hub.pull_of("a1").map(|p| p.status),
            Some(PullStatus::Pulling)
        );
        meter.layer("l");
        meter.finish(Ok(()));
        assert_eq!(hub.pull_of("a1"), None);
        let mut seen = Vec::new();
        while let Ok(AgentEvent::Pull { id, progress }) = rx.try_recv() {
            assert_eq!(id, "a1");
            seen.push(progress.status);
        }
        assert_eq!(seen, [PullStatus::Pulling, PullStatus::Done]);
        hub.pull("a2", progress(PullStatus::Pulling, 3));
        hub.forget_pull("a2");
        assert_eq!(hub.pull_of("a2"), None);
    }

    fn info(id: &str, state: ProcessState) -> ProcessInfo {
        ProcessInfo {
            id: id.into(),
            tag: None,
            command: vec!["true".into()],
            pid: Some(1),
            state,
            exit_code: None,
            signal: None,
            timed_out: false,
            started_at_ms: 0,
            ended_at_ms: None,
            output_bytes: 0,
            output_start: 0,
            keep_awake: false,
            stdin_open: false,
            run_as: Default::default(),
        }
    }

    #[test]
    fn a_process_is_announced_once_per_state_across_reports() {
        let hub = EventHub::default();
        let mut rx = hub.subscribe();
        // sandboxd reports every process at each connection: only changes are announced.
        for report in [
            vec![info("p1pppppppppppppp", ProcessState::Running)],
            vec![info("p1pppppppppppppp", ProcessState::Running)],
            vec![
                info("p1pppppppppppppp", ProcessState::Exited),
                info("p2pppppppppppppp", ProcessState::Running),
            ],
            vec![
                info("p1pppppppppppppp", ProcessState::Exited),
                info("p2pppppppppppppp", ProcessState::Running),
            ],
        ] {
            for p in report {
                hub.process("a", p);
            }
        }
        let mut seen = Vec::new();
        while let Ok(AgentEvent::Process { id, process }) = rx.try_recv() {
            assert_eq!(id, "a");
            seen.push((process.id, process.state));
        }
        let expected = [
            ("p1pppppppppppppp", ProcessState::Running),
            ("p1pppppppppppppp", ProcessState::Exited),
            ("p2pppppppppppppp", ProcessState::Running),
        ];
        assert_eq!(seen, expected.map(|(a, b)| (a.to_string(), b)));
        hub.forget_processes("a");
        hub.process("a", info("p1pppppppppppppp", ProcessState::Exited));
        assert!(matches!(rx.try_recv(), Ok(AgentEvent::Process { .. })));
    }

    #[test]
    fn the_processes_last_heard_of_are_kept_oldest_first_until_removed() {
        let hub = EventHub::default();
        let mut late = info("p1pppppppppppppp", ProcessState::Running);
        late.started_at_ms = 20;
        let mut early = info("p2pppppppppppppp", ProcessState::Running);
        early.started_at_ms = 10;
        hub.process("a", late);
        hub.process("a", early);
        hub.process("b", info("p3pppppppppppppp", ProcessState::Running));
        let ids = |hub: &EventHub| -> Vec<String> {
            hub.processes_of("a").into_iter().map(|p| p.id).collect()
        };
        assert_eq!(ids(&hub), ["p2pppppppppppppp", "p1pppppppppppppp"]);
        hub.sandbox_stopped("a");
        assert!(hub
            .processes_of("a")
            .iter()
            .all(|p| p.state == ProcessState::Lost));
        hub.forget_process("a", "p2pppppppppppppp");
        assert_eq!(ids(&hub), ["p1pppppppppppppp"]);
        assert_eq!(hub.processes_of("b").len(), 1);
        assert!(hub.processes_of("nobody").is_empty());
    }

    #[test]
    fn reports_from_a_hostile_sandboxd_are_bounded() {
        let hub = EventHub::default();
        let mut rx = hub.subscribe();
        // Not an id sandboxd makes: ignored.
        hub.process("a", info("../x", ProcessState::Running));
        assert!(rx.try_recv().is_err());
        // A huge command line and a bad tag are cut.
        let mut big = info("bbbbbbbbbbbbbbbb", ProcessState::Running);
        big.command = vec!["x".repeat(1 << 20)];
        big.tag = Some("no spaces allowed".into());
        hub.process("a", big);
        match rx.try_recv() {
            Ok(AgentEvent::Process { process, .. }) => {
                assert!(process.command[0].len() <= 8 * 1024 + 4);
                assert_eq!(process.tag, None);
            }
            other => panic!("{other:?}"),
        }
        // More running processes than any sandbox may run: the rest is dropped.
        let mut announced = 1;
        let mut rx = hub.subscribe();
        for n in 0..(MAX_PROCESSES_SEEN + 100) {
            hub.process("a", info(&format!("{n:016}"), ProcessState::Running));
            while rx.try_recv().is_ok() {
                announced += 1;
            }
        }
        assert_eq!(announced, MAX_PROCESSES_SEEN);
    }

    #[test]
    fn a_stop_announces_the_running_processes_lost_once() {
        let hub = EventHub::default();
        hub.process("a", info("p1pppppppppppppp", ProcessState::Running));
        hub.process("a", info("p2pppppppppppppp", ProcessState::Exited));
        let mut rx = hub.subscribe();
        hub.sandbox_stopped("a");
        match rx.try_recv() {
            Ok(AgentEvent::Process { process, .. }) => {
                assert_eq!(
                    (process.id.as_str(), process.state),
                    ("p1pppppppppppppp", ProcessState::Lost)
                );
                assert!(process.ended_at_ms.is_some());
            }
            other => panic!("{other:?}"),
        }
        assert!(rx.try_recv().is_err(), "only the running one");
        // sandboxd's report of the same after the wake is no news.
        hub.process("a", info("p1pppppppppppppp", ProcessState::Lost));
        assert!(rx.try_recv().is_err());
    }
}
