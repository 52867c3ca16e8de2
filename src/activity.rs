//! What counts as use of an agent, for the sleeper and for `lastActivityAt` / `sleepsAt`.
//!
//! Kept in memory on purpose: after a restart the idle clock of every agent starts again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

/// CPU use above this share of one core counts as activity.
const BUSY_CPU_SHARE: f64 = 0.05;

#[derive(Debug, Clone)]
struct Entry {
    last: DateTime<Utc>,
    terminals: usize,
    execs: usize,
    /// Turns running in the agent's sessions.
    turns: usize,
    /// Requests and WebSockets open through its previews.
    previews: usize,
    cpu: Option<(u64, DateTime<Utc>)>,
    /// sandboxd's last report said a process started with `keepAwake` runs.
    kept_awake: bool,
    /// Uses begun so far ([`ActivityTracker::touch`], [`ActivityTracker::hold`]); sandboxd's
    /// reports are not uses.
    uses: u64,
}

impl Entry {
    fn new(now: DateTime<Utc>) -> Entry {
        Entry {
            last: now,
            terminals: 0,
            execs: 0,
            turns: 0,
            previews: 0,
            cpu: None,
            kept_awake: false,
            uses: 0,
        }
    }
}

#[derive(Clone, Default)]
pub struct ActivityTracker {
    inner: Arc<Mutex<HashMap<String, Entry>>>,
}

/// What the tracker knows of one agent.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivityView {
    pub last_activity_at: DateTime<Utc>,
    /// A terminal is open, a command or a session's turn runs, or a background process that
    /// keeps its agent awake runs: the agent is in use whatever the clock says.
    pub busy: bool,
}

#[derive(Clone, Copy)]
pub enum Use {
    Terminal,
    Exec,
    /// A turn of an agent session: the agent is in use however quiet its CPU.
    Turn,
    /// A request or WebSocket through one of its previews.
    Preview,
}

impl ActivityTracker {
    fn with<R>(&self, id: &str, f: impl FnOnce(&mut Entry) -> R) -> R {
        let now = Utc::now();
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(id.to_string()).or_insert_with(|| Entry::new(now));
        f(entry)
    }

    /// Someone used the agent (API call, file access, wake).
    pub fn touch(&self, id: &str) {
        let now = Utc::now();
        self.with(id, |e| {
            e.last = now;
            e.uses += 1;
        });
    }

    /// How many uses of agent `id` have begun: one that changed began a use in between.
    pub fn uses(&self, id: &str) -> u64 {
        self.with(id, |e| e.uses)
    }

    /// Marks a terminal or exec as running until the guard drops.
    pub fn hold(&self, id: &str, kind: Use) -> UseGuard {
        let now = Utc::now();
        self.with(id, |e| {
            e.last = now;
            e.uses += 1;
            match kind {
                Use::Terminal => e.terminals += 1,
                Use::Exec => e.execs += 1,
                Use::Turn => e.turns += 1,
                Use::Preview => e.previews += 1,
            }
        });
        UseGuard {
            tracker: self.clone(),
            id: id.to_string(),
            kind,
        }
    }

    /// A report from sandboxd: CPU milliseconds used since it started, and whether a process
    /// started with `keepAwake` runs.
    pub fn sample(&self, id: &str, cpu_ms: u64, keep_awake: bool) {
        let now = Utc::now();
        self.cpu_sample_at(id, cpu_ms, now);
        self.with(id, |e| {
            if keep_awake {
                e.last = now;
            }
            e.kept_awake = keep_awake;
        });
    }

    fn cpu_sample_at(&self, id: &str, cpu_ms: u64, now: DateTime<Utc>) {
        self.with(id, |e| {
            if let Some((prev_ms, prev_at)) = e.cpu {
                let wall_ms = (now - prev_at).num_milliseconds();
                // A counter that went back means sandboxd restarted: start over.
                if wall_ms > 0 && cpu_ms >= prev_ms {
                    let share = (cpu_ms - prev_ms) as f64 / wall_ms as f64;
                    if share >= BUSY_CPU_SHARE {
                        e.last = now;
                    }
                }
            }
            e.cpu = Some((cpu_ms, now));
        });
    }

    /// sandboxd's reports stopped (its tunnel went): what they said keeps nothing awake now.
    pub fn sample_ended(&self, id: &str) {
        self.with(id, |e| e.kept_awake = false);
    }

    /// Forgets the CPU baseline and the keep-awake mark, for a sandbox that was stopped or
    /// restarted.
    pub fn reset_cpu(&self, id: &str) {
        self.with(id, |e| {
            e.cpu = None;
            e.kept_awake = false;
        });
    }

    pub fn view(&self, id: &str) -> ActivityView {
        self.with(id, |e| ActivityView {
            last_activity_at: e.last,
            busy: e.terminals > 0 || e.execs > 0 || e.turns > 0 || e.previews > 0 || e.kept_awake,
        })
    }

    pub fn forget(&self, id: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(id);
    }
}

pub struct UseGuard {
    tracker: ActivityTracker,
    id: String,
    kind: Use,
}

impl Drop for UseGuard {
    fn drop(&mut self) {
        let now = Utc::now();
        let kind = self.kind;
        self.tracker.with(&self.id, |e| {
            e.last = now;
            match kind {
                Use::Terminal => e.terminals = e.terminals.saturating_sub(1),
                Use::Exec => e.execs = e.execs.saturating_sub(1),
                Use::Turn => e.turns = e.turns.saturating_sub(1),
                Use::Preview => e.previews = e.previews.saturating_sub(1),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn busy_while_held() {
        let t = ActivityTracker::default();
        let g = t.hold("a", Use::Terminal);
        assert!(t.view("a").busy);
        drop(g);
        assert!(!t.view("a").busy);
    }

    #[test]
    fn cpu_above_five_percent_counts() {
        let t = ActivityTracker::default();
        let t0 = Utc::now() - Duration::minutes(10);
        t.with("a", |e| e.last = t0);
        t.cpu_sample_at("a", 0, t0);
        // 1% of a core: not activity.
        t.cpu_sample_at("a", 100, t0 + Duration::seconds(10));
        assert_eq!(t.view("a").last_activity_at, t0);
        // 50% of a core: activity.
        let t2 = t0 + Duration::seconds(20);
        t.cpu_sample_at("a", 5100, t2);
        assert_eq!(t.view("a").last_activity_at, t2);
    }

    #[test]
    fn a_process_that_keeps_its_agent_awake_makes_it_busy_until_reported_gone() {
        let t = ActivityTracker::default();
        t.sample("a", 0, true);
        assert!(t.view("a").busy);
        t.sample("a", 0, false);
        assert!(!t.view("a").busy);
        t.sample("a", 0, true);
        t.reset_cpu("a");
        assert!(!t.view("a").busy, "a stopped sandbox keeps nothing awake");
    }
}
