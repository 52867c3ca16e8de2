//! Background processes: starting one, listing them, and what is asked of one by name.

use std::time::Duration;

use agenthold_proto::process::{tag_problem, ProcessWait};
use agenthold_proto::{
    is_session_id, Frame, FrameCodec, ProcessGet, ProcessInfo, ProcessRemove, ProcessSignal,
};
use futures::StreamExt;
use tokio_util::codec::FramedRead;

use super::{ConnError, SandboxConn};
use crate::launch::{Launch, ProcessOptions};

/// Processes read from one `process.list` at most (running and finished together).
const MAX_LISTED: usize = 4096;
/// How long a list may take to arrive once sandboxd has answered.
const LIST_TIME: Duration = Duration::from_secs(30);
/// How much longer than its own time a wait is given for the trip.
const WAIT_SLACK: Duration = Duration::from_secs(10);

/// A process as a caller names it: by its id or its tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessName(String);

/// A name that can be no process's, refused without asking the sandbox (or waking its agent).
#[derive(Debug, thiserror::Error)]
#[error("no process {0:?} (by id or tag)")]
pub struct NoSuchProcess(String);

impl ProcessName {
    pub fn parse(name: String) -> Result<ProcessName, NoSuchProcess> {
        if is_session_id(&name) || tag_problem(&name).is_none() {
            Ok(ProcessName(name))
        } else {
            Err(NoSuchProcess(name.chars().take(80).collect()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A process as sandboxd reported it, cut to the shapes sandboxd makes.
pub(super) fn checked(info: ProcessInfo) -> Result<ProcessInfo, ConnError> {
    info.sanitized().ok_or(ConnError::MalformedReport)
}

impl SandboxConn {
    /// Starts `launch` in the background, within the server's limits on processes. A program
    /// that could not be run comes back as a process that has already exited (127 or 126).
    pub async fn start_process(
        &self,
        launch: Launch,
        options: ProcessOptions,
    ) -> Result<ProcessInfo, ConnError> {
        let (_, info) = self
            .open(self.limits.start(launch, &self.boot, options))
            .await?;
        checked(info)
    }

    /// Every process, running and finished, oldest first (finished ones past their retention
    /// forgotten first).
    pub async fn list_processes(&self) -> Result<Vec<ProcessInfo>, ConnError> {
        let (stream, count) = self.open(self.limits.list()).await?;
        if count.size > MAX_LISTED as u64 {
            return Err(ConnError::MalformedReport);
        }
        let mut frames = FramedRead::new(stream, FrameCodec::default());
        let mut out = Vec::with_capacity(count.size as usize);
        // Exactly as many as sandboxd said: fewer is a cut stream, not a shorter list.
        let read_all = async {
            while out.len() < count.size as usize {
                match frames.next().await {
                    Some(Ok(Frame::Process(info))) => out.push(checked(*info)?),
                    Some(Ok(_)) => return Err(ConnError::MalformedReport),
                    Some(Err(_)) | None => return Err(ConnError::Lost),
                }
            }
            Ok(())
        };
        tokio::time::timeout(LIST_TIME, read_all)
            .await
            .map_err(|_| ConnError::Lost)??;
        Ok(out)
    }

    /// One process (a tag names the running process with it, else the one started last).
    pub async fn process(&self, name: &ProcessName) -> Result<ProcessInfo, ConnError> {
        let (_, info) = self
            .open(ProcessGet {
                process: name.0.clone(),
            })
            .await?;
        checked(info)
    }

    /// Sends `signal` (a name such as `TERM`, or a number) to the process's whole group.
    pub async fn signal(&self, name: &ProcessName, signal: String) -> Result<(), ConnError> {
        let header = ProcessSignal {
            process: name.0.clone(),
            signal,
        };
        self.open(header).await?;
        Ok(())
    }

    /// Waits up to `timeout` for the process to end: the process as it then is, still running
    /// when the time was up first.
    pub async fn wait(
        &self,
        name: &ProcessName,
        timeout: Duration,
    ) -> Result<ProcessInfo, ConnError> {
        let header = ProcessWait {
            process: name.0.clone(),
            timeout_ms: timeout.as_millis() as u64,
        };
        // sandboxd answers at the end or when the time is up; the slack covers the trip.
        let (_, info) = tokio::time::timeout(timeout + WAIT_SLACK, self.open(header))
            .await
            .map_err(|_| ConnError::Lost)??;
        checked(info)
    }

    /// Kills the process's whole tree if it runs, then forgets it and its output.
    pub async fn remove_process(&self, name: &ProcessName) -> Result<(), ConnError> {
        self.open(ProcessRemove {
            process: name.0.clone(),
        })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_id_or_a_tag_names_a_process() {
        assert!(ProcessName::parse("web-1".into()).is_ok());
        assert!(ProcessName::parse("abcdefghij012345".into()).is_ok());
        let refused = ProcessName::parse(format!("../{}", "x".repeat(200))).unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!(
                "no process {:?} (by id or tag)",
                format!("../{}", "x".repeat(77))
            )
        );
    }
}
