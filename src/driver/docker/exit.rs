//! How a stopped sandbox container ended, in words for an agent's `error`: its exit code,
//! Docker's own error (a runtime that could not run it), and the last lines it logged (sandboxd
//! logs there why it gave up); and whether the kernel killed it for lack of memory, which makes
//! the stop a failure rather than a sleep.

use std::time::Duration;

use bollard::query_parameters::LogsOptionsBuilder;
use bollard::Docker;
use futures::StreamExt;

use super::container::is_running;
use super::error::{is_not_found, DockerError};

/// Lines of the container's log quoted.
const LOG_LINES: usize = 5;
/// Characters of the log quoted at most, so a noisy sandbox cannot flood the message.
const LOG_CHARS: usize = 600;
/// Reading the log tail of a stopped container is quick; a stuck engine must not hold up the
/// agent's error.
const LOG_TIMEOUT: Duration = Duration::from_secs(5);

/// `exit code N; Docker: …; last log lines: … | …`, or `None` when Docker cannot tell.
pub async fn report(docker: &Docker, name: &str) -> Option<String> {
    let info = match docker.inspect_container(name, None).await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(container = name, "how the sandbox ended is unknown: {e}");
            return None;
        }
    };
    let state = info.state?;
    let mut parts = Vec::new();
    if let Some(code) = state.exit_code {
        parts.push(format!("exit code {code}"));
    }
    if let Some(err) = state.error.filter(|e| !e.trim().is_empty()) {
        parts.push(format!("Docker: {}", err.trim()));
    }
    let log = match tokio::time::timeout(LOG_TIMEOUT, log_tail(docker, name)).await {
        Ok(log) => log,
        Err(_) => {
            tracing::debug!(container = name, "reading the log took too long");
            String::new()
        }
    };
    if !log.is_empty() {
        parts.push(format!("last log lines: {log}"));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `Some` when the container's main process was killed by the kernel for lack of memory.
pub async fn oom_reason(docker: &Docker, name: &str) -> Result<Option<String>, DockerError> {
    let info = match docker.inspect_container(name, None).await {
        Ok(info) => info,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(DockerError::api(format!("inspecting container {name}"))(e)),
    };
    let Some(state) = info.state else {
        return Ok(None);
    };
    let stopped = !is_running(state.status);
    // Docker sets OOMKilled for any kill in the container's memory cgroup since it started,
    // even one that only ended a command; SIGKILL's exit status says the sandbox itself
    // (init or sandboxd) died of it.
    if !(stopped && state.oom_killed == Some(true) && state.exit_code == Some(137)) {
        return Ok(None);
    }
    let limit = info
        .host_config
        .and_then(|h| h.memory)
        .filter(|m| *m > 0)
        .map(|m| format!(" of {} MiB", m / (1024 * 1024)))
        .unwrap_or_default();
    Ok(Some(format!(
        "the sandbox ran out of memory (its limit{limit}) and was stopped; start it \
         again, or give it more memory (memoryMb) and rebuild it"
    )))
}

async fn log_tail(docker: &Docker, name: &str) -> String {
    let opts = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .tail(&LOG_LINES.to_string())
        .build();
    let mut stream = docker.logs(name, Some(opts));
    let mut raw = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(out) => raw.extend_from_slice(out.as_ref()),
            // A logging driver Docker cannot read back, say: the exit code still tells something.
            Err(e) => {
                tracing::debug!(container = name, "reading the log: {e}");
                break;
            }
        }
    }
    summarize(&String::from_utf8_lossy(&raw))
}

/// The log's non-empty lines without terminal colour codes, joined with ` | `, and cut to the
/// last [`LOG_CHARS`] characters (the last lines say the most).
fn summarize(log: &str) -> String {
    let plain = strip_ansi(log);
    let joined = plain
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    let count = joined.chars().count();
    if count <= LOG_CHARS {
        return joined;
    }
    let tail: String = joined.chars().skip(count - LOG_CHARS).collect();
    format!("…{tail}")
}

/// Removes CSI escape sequences (`ESC [ … final`), which sandboxd's coloured log is full of.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, up to the final byte (@ to ~).
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_lose_colours_and_blank_lines() {
        let log = "\u{1b}[2m2026-11-30T01:00:00Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m sandboxd: \
                   cannot hand /home/agent to the account\n\n  Error: EPERM  \n";
        assert_eq!(
            summarize(log),
            "2026-11-30T01:00:00Z ERROR sandboxd: cannot hand /home/agent to the account | \
             Error: EPERM"
        );
        assert_eq!(summarize(""), "");
    }

    #[test]
    fn a_long_log_keeps_its_end() {
        let log = format!("{}\nthe last words é", "x".repeat(2 * LOG_CHARS));
        let s = summarize(&log);
        assert!(s.starts_with('…'));
        assert!(s.ends_with("the last words é"));
        assert_eq!(s.chars().count(), LOG_CHARS + 1);
    }
}
