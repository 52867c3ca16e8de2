//! The `activity` channel: CPU time used by the sandbox's processes, so a long build with nobody
//! watching still counts as activity.

use std::collections::HashMap;
use std::time::Duration;

use agenthold_proto::mux::MuxHandle;
use agenthold_proto::{self as proto, Activity, Frame, FrameCodec};
use futures::SinkExt;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;

use crate::procs::{self, ProcStat, ProcessTable};
use crate::sandbox::{CpuScope, Sandbox};

const CGROUP_CPU_STAT: &str = "/sys/fs/cgroup/cpu.stat";

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

/// Opens the `activity` channel and reports every `interval` until the session or `stop` ends.
pub async fn report(sb: Sandbox, handle: MuxHandle, interval: Duration, stop: CancellationToken) {
    let mut stream = match handle.open().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot open the activity channel");
            return;
        }
    };
    if let Err(e) = proto::open(&mut stream, Activity {}).await {
        tracing::warn!(error = %e, "the server refused the activity channel");
        return;
    }
    let mut out = FramedWrite::new(stream, FrameCodec::default());
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A process that keeps the agent awake started or ended: said at once, not at the
            // next tick, so that a short idle time cannot slip in between.
            _ = sb.processes().keep_awake_changed() => {}
            _ = stop.cancelled() => break,
        }
        let cpu_ms = sb.cpu_ms().await;
        let keep_awake = sb.processes().keep_awake();
        if let Err(e) = out.send(Frame::Activity { cpu_ms, keep_awake }).await {
            tracing::debug!(error = %e, "activity channel closed");
            return;
        }
    }
    let _ = out.get_mut().shutdown().await;
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
