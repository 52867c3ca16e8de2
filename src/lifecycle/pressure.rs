//! Memory pressure: when the host's available memory falls below `sandbox.min_free_memory_mb`,
//! paused agents (which hold their memory while doing nothing) are stopped, the longest-paused
//! first. Which ones is a pure choice ([`choose`]); the reading is [`available_mb`]'s.

use chrono::{DateTime, Utc};

/// A paused agent, as the choice sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PausedAgent {
    pub id: String,
    pub paused_at: DateTime<Utc>,
    /// The most it can hold: its memory limit, in MiB (what it really holds is not known here,
    /// so a check may stop fewer than needed; the next check stops more).
    pub memory_mb: u64,
}

/// The paused agents to stop so that `available_mb` gets back to `min_free_mb`: none when it
/// is not below, else the longest-paused first, at least one, until their limits together
/// cover the shortfall.
pub fn choose(mut paused: Vec<PausedAgent>, available_mb: u64, min_free_mb: u64) -> Vec<String> {
    if available_mb >= min_free_mb {
        return Vec::new();
    }
    let mut short = min_free_mb - available_mb;
    paused.sort_by(|a, b| a.paused_at.cmp(&b.paused_at).then(a.id.cmp(&b.id)));
    let mut out = Vec::new();
    for agent in paused {
        if short == 0 {
            break;
        }
        short = short.saturating_sub(agent.memory_mb.max(1));
        out.push(agent.id);
    }
    out
}

/// The host's available memory in MiB (`MemAvailable` in `/proc/meminfo`); `None` where
/// there is no such file or line (not Linux).
pub fn available_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line
        .trim_start_matches("MemAvailable:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paused(id: &str, minutes_ago: i64, memory_mb: u64) -> PausedAgent {
        PausedAgent {
            id: id.to_string(),
            paused_at: Utc::now() - chrono::Duration::minutes(minutes_ago),
            memory_mb,
        }
    }

    #[test]
    fn nothing_is_stopped_with_enough_memory() {
        let all = vec![paused("a", 10, 512)];
        assert!(choose(all.clone(), 2048, 1024).is_empty());
        assert!(choose(all, 1024, 1024).is_empty());
    }

    #[test]
    fn the_longest_paused_go_first_until_the_shortfall_is_covered() {
        let all = vec![
            paused("new", 1, 512),
            paused("old", 30, 512),
            paused("mid", 10, 512),
        ];
        assert_eq!(choose(all.clone(), 900, 1024), ["old"]);
        assert_eq!(choose(all.clone(), 100, 1024), ["old", "mid"]);
        assert_eq!(choose(all, 0, 4096), ["old", "mid", "new"]);
    }

    #[test]
    fn no_paused_agents_means_nothing_to_stop() {
        assert!(choose(Vec::new(), 0, 1024).is_empty());
    }

    #[test]
    fn meminfo_is_read_in_mib() {
        let text = "MemTotal:       16303488 kB\nMemFree:  1000 kB\nMemAvailable:    2097152 kB\n";
        assert_eq!(parse_meminfo(text), Some(2048));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_meminfo("MemAvailable: lots kB\n"), None);
    }
}
