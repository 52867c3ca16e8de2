//! The sandbox's CPU time, which the `activity` channel reports: a total that never goes down
//! while processes come and go.

use std::collections::HashMap;

use crate::procs::{self, ProcStat, ProcessTable};

const CGROUP_CPU_STAT: &str = "/sys/fs/cgroup/cpu.stat";

/// Whose CPU time the `activity` channel reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuScope {
    /// Everything in the container: the cgroup's `cpu.stat`, else every process in `/proc`.
    Container,
    /// Only the processes sandboxd started (the fake driver, on a shared host).
    Descendants,
}

/// A monotonic CPU total over processes that come and go.
///
/// Summing `/proc` alone would drop a process's time the moment it exits, so the last value
/// seen of every process is kept and added to a running total once it is gone.
pub struct CpuMeter {
    scope: CpuScope,
    ticks_per_sec: u64,
    /// Last seen ticks per (pid, start time): pids are reused.
    live: HashMap<(i32, u64), u64>,
    gone_ticks: u64,
    /// The first reading, so the total counts from sandboxd's start.
    base_ms: Option<u64>,
    last_ms: u64,
}

impl CpuMeter {
    pub fn new(scope: CpuScope) -> CpuMeter {
        CpuMeter {
            scope,
            ticks_per_sec: procs::clock_ticks(),
            live: HashMap::new(),
            gone_ticks: 0,
            base_ms: None,
            last_ms: 0,
        }
    }

    /// CPU milliseconds since the first sample; never less than the previous answer.
    pub fn sample(&mut self, table: &ProcessTable) -> u64 {
        let raw = match self.scope {
            CpuScope::Container => match cgroup_usage_ms() {
                Some(ms) => ms,
                None => self.proc_total_ms(&procs::all_processes()),
            },
            CpuScope::Descendants => {
                let all = procs::all_processes();
                table.prune(&all);
                let ours: Vec<ProcStat> = all.into_iter().filter(|p| table.owns(p)).collect();
                self.proc_total_ms(&ours)
            }
        };
        let base = *self.base_ms.get_or_insert(raw);
        self.last_ms = self.last_ms.max(raw.saturating_sub(base));
        self.last_ms
    }

    fn proc_total_ms(&mut self, now: &[ProcStat]) -> u64 {
        let mut live = HashMap::with_capacity(now.len());
        for p in now {
            live.insert((p.pid, p.start_time), p.cpu_ticks);
        }
        for (key, ticks) in &self.live {
            if !live.contains_key(key) {
                self.gone_ticks += ticks;
            }
        }
        self.live = live;
        let ticks = self.gone_ticks + self.live.values().sum::<u64>();
        ticks * 1000 / self.ticks_per_sec
    }
}

fn cgroup_usage_ms() -> Option<u64> {
    let text = std::fs::read_to_string(CGROUP_CPU_STAT).ok()?;
    parse_usage_usec(&text).map(|us| us / 1000)
}

fn parse_usage_usec(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cgroup_usage() {
        let text = "usage_usec 123456\nuser_usec 1\nsystem_usec 2\n";
        assert_eq!(parse_usage_usec(text), Some(123456));
        assert_eq!(parse_usage_usec("nr_periods 0\n"), None);
    }

    #[test]
    fn totals_never_go_down() {
        let mut m = CpuMeter::new(CpuScope::Descendants);
        m.ticks_per_sec = 100;
        let p = |pid, ticks| ProcStat {
            pid,
            ppid: 1,
            pgid: pid,
            sid: pid,
            zombie: false,
            cpu_ticks: ticks,
            start_time: 1,
        };
        assert_eq!(m.proc_total_ms(&[p(1, 10), p(2, 5)]), 150);
        // Process 2 exits: its time stays in the total.
        assert_eq!(m.proc_total_ms(&[p(1, 20)]), 250);
        assert_eq!(m.proc_total_ms(&[]), 250);
    }
}
