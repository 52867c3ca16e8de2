//! The out-of-memory killer's count for the sandbox's cgroup, which tells a kernel killed for
//! memory apart from one killed by anything else.

/// The cgroup (v2) file whose `oom_kill` line counts the processes the OOM killer ended.
const MEMORY_EVENTS: &str = "/sys/fs/cgroup/memory.events";

/// The count so far, or `None` where there is no such file (cgroup v1, or not in a container).
pub fn kills() -> Option<u64> {
    parse(&std::fs::read_to_string(MEMORY_EVENTS).ok()?)
}

fn parse(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_oom_kill_line() {
        let text = "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(super::parse(text), Some(2));
        assert_eq!(super::parse("low 0\n"), None);
    }
}
