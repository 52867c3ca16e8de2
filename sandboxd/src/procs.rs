//! The process groups and sessions sandboxd started, and what `/proc` says about them.
//!
//! Exec commands get their own process group and shells their own session; remembering those ids
//! lets sandboxd kill everything it started (grandchildren included) and, for the fake driver,
//! count the CPU time of exactly those processes on a shared host.

use std::collections::HashMap;
use std::sync::Mutex;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// One line of `/proc/<pid>/stat`, the fields sandboxd uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    pub zombie: bool,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time in clock ticks after boot; with `pid` it names one process across pid reuse.
    pub start_time: u64,
}

pub fn read_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    // The command name may hold spaces and parentheses; everything after the last ')' is fixed.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `f[0]` is field 3 of proc(5).
    let field = |n: usize| f.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        pid,
        zombie: field(3)? == "Z",
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        sid: field(6)?.parse().ok()?,
        cpu_ticks: num(14)? + num(15)?,
        start_time: num(22)?,
    })
}

/// Every process visible in `/proc` right now.
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// Clock ticks per second for `/proc` times.
pub fn clock_ticks() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as u64,
        _ => 100,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An exec command's process group.
    Group,
    /// A shell's session: its jobs get process groups of their own.
    Session,
}

/// The groups and sessions sandboxd started and has not yet seen end.
#[derive(Debug, Default)]
pub struct ProcessTable {
    ids: Mutex<HashMap<i32, Kind>>,
}

impl ProcessTable {
    pub fn track_group(&self, pgid: i32) {
        self.lock().insert(pgid, Kind::Group);
    }

    pub fn track_session(&self, sid: i32) {
        self.lock().insert(sid, Kind::Session);
    }

    pub fn forget(&self, id: i32) {
        self.lock().remove(&id);
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// True when `p` belongs to something sandboxd started.
    pub fn owns(&self, p: &ProcStat) -> bool {
        let ids = self.lock();
        ids.get(&p.pgid) == Some(&Kind::Group) || ids.get(&p.sid) == Some(&Kind::Session)
    }

    /// Forgets ids no live process carries any more, so a recycled pid is never taken for ours.
    pub fn prune(&self, snapshot: &[ProcStat]) {
        self.lock().retain(|id, kind| {
            snapshot.iter().any(|p| match kind {
                Kind::Group => p.pgid == *id,
                Kind::Session => p.sid == *id,
            })
        });
    }

    /// SIGKILLs every process sandboxd started, including jobs a shell moved to other groups.
    pub fn kill_all(&self) {
        let ids: Vec<i32> = self.lock().keys().copied().collect();
        for id in &ids {
            let _ = signal::killpg(Pid::from_raw(*id), Signal::SIGKILL);
        }
        for p in all_processes() {
            if !p.zombie && self.owns(&p) {
                let _ = signal::kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
        }
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Kind>> {
        // A panic while holding this lock leaves a plain map behind, still usable.
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Every process below `root` in the process tree (children, their children, …), zombies
/// included, as `snapshot` has them.
pub fn descendants(root: i32, snapshot: &[ProcStat]) -> Vec<ProcStat> {
    let mut out: Vec<ProcStat> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for p in snapshot
            .iter()
            .filter(|p| p.ppid == parent && p.pid != root)
        {
            if !out.iter().any(|o| o.pid == p.pid) {
                out.push(*p);
                parents.push(p.pid);
            }
        }
    }
    out
}

/// Live (non-zombie) processes of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<ProcStat> {
    all_processes()
        .into_iter()
        .filter(|p| p.pgid == pgid && !p.zombie)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_parens_and_spaces() {
        let line = "42 (a) b (c)) S 1 40 41 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 555 0 0";
        let s = parse_stat(42, line).unwrap();
        assert_eq!(
            (s.ppid, s.pgid, s.sid, s.cpu_ticks, s.start_time),
            (1, 40, 41, 10, 555)
        );
        assert!(!s.zombie);
    }

    #[test]
    fn descendants_are_the_whole_subtree() {
        let p = |pid, ppid| ProcStat {
            pid,
            ppid,
            pgid: pid,
            sid: pid,
            zombie: false,
            cpu_ticks: 0,
            start_time: 0,
        };
        let snap = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(13, 10), p(20, 1)];
        let mut got: Vec<i32> = descendants(10, &snap).iter().map(|p| p.pid).collect();
        got.sort();
        assert_eq!(got, [11, 12, 13]);
        assert!(descendants(12, &snap).is_empty());
    }

    #[test]
    fn sees_ourselves() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(clock_ticks() > 0);
    }
}
