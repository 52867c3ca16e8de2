//! `--wait`: follow an agent until an operation has finished, with a progress line on stderr.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};

use super::client::ApiClient;
use super::error::ClientError;
use super::types::ServerEvent;
use crate::model::{Agent, AgentState};

/// Events can be lost (a proxy drops the stream, a server without `/events`); a slow poll
/// makes sure the wait still ends, and notices a removed agent, which sends no event.
const POLL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Running,
    Sleeping,
    Gone,
}

/// What one observation of the agent means for the wait.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Pending,
    Done,
    Failed(String),
}

pub fn judge(goal: Goal, state: AgentState, error: Option<&str>) -> Verdict {
    match (goal, state) {
        (_, AgentState::Error) => Verdict::Failed(error.unwrap_or("unknown error").to_string()),
        (Goal::Running, AgentState::Running) | (Goal::Sleeping, AgentState::Sleeping) => {
            Verdict::Done
        }
        _ => Verdict::Pending,
    }
}

pub struct Watch {
    events: Option<BoxStream<'static, Result<ServerEvent, ClientError>>>,
}

impl Watch {
    pub async fn start(client: &ApiClient) -> Self {
        Self {
            events: client.events().await.ok(),
        }
    }

    /// Returns the agent once `goal` is reached; an agent that lands in `error` is a failure.
    pub async fn until(
        mut self,
        client: &ApiClient,
        agent: Agent,
        goal: Goal,
    ) -> anyhow::Result<Agent> {
        let mut progress = Progress::new(&agent.name);
        let (id, name) = (agent.id.clone(), agent.name.clone());
        let mut last = agent;
        let mut poll = tokio::time::interval(POLL);
        poll.tick().await; // the first tick is immediate; the answer we hold is that fresh
        loop {
            progress.show(last.state);
            match judge(goal, last.state, last.error.as_deref()) {
                Verdict::Done => {
                    progress.finish();
                    return Ok(last);
                }
                Verdict::Failed(msg) => {
                    progress.finish();
                    anyhow::bail!("agent {name} failed: {msg}");
                }
                Verdict::Pending => {}
            }
            tokio::select! {
                ev = next_event(&mut self.events) => match ev {
                    Some(Ok(ServerEvent::Agent(a))) if a.id == id => last = a,
                    Some(Ok(_)) => {}
                    // A broken stream is not fatal: the poll carries on alone.
                    Some(Err(_)) | None => self.events = None,
                },
                _ = poll.tick() => match client.get_agent(&id).await {
                    Ok(a) => last = a,
                    Err(e) if e.status() == Some(404) && goal == Goal::Gone => {
                        progress.finish();
                        return Ok(last);
                    }
                    Err(e) => {
                        progress.finish();
                        return Err(e.into());
                    }
                },
            }
        }
    }
}

async fn next_event(
    events: &mut Option<BoxStream<'static, Result<ServerEvent, ClientError>>>,
) -> Option<Result<ServerEvent, ClientError>> {
    match events {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// One line rewritten in place on a terminal; one line per state change otherwise.
struct Progress {
    name: String,
    started: Instant,
    tty: bool,
    shown: Option<AgentState>,
}

impl Progress {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            shown: None,
        }
    }

    fn show(&mut self, state: AgentState) {
        let changed = self.shown != Some(state);
        if !changed && !self.tty {
            return;
        }
        self.shown = Some(state);
        let secs = self.started.elapsed().as_secs();
        let mut err = std::io::stderr().lock();
        // Progress is decoration: a closed stderr must not fail the command.
        let _ = if self.tty {
            write!(err, "\r\x1b[2K{}: {state} ({secs}s)", self.name)
        } else {
            writeln!(err, "{}: {state} ({secs}s)", self.name)
        };
        let _ = err.flush();
    }

    fn finish(&mut self) {
        if self.tty && self.shown.is_some() {
            let _ = writeln!(std::io::stderr());
        }
        self.shown = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        use AgentState::*;
        assert_eq!(judge(Goal::Running, Creating, None), Verdict::Pending);
        assert_eq!(judge(Goal::Running, Running, None), Verdict::Done);
        assert_eq!(judge(Goal::Sleeping, Stopping, None), Verdict::Pending);
        assert_eq!(judge(Goal::Sleeping, Sleeping, None), Verdict::Done);
        assert_eq!(judge(Goal::Gone, Destroying, None), Verdict::Pending);
        assert_eq!(
            judge(Goal::Running, Error, Some("pull failed")),
            Verdict::Failed("pull failed".into())
        );
        assert_eq!(
            judge(Goal::Gone, Error, None),
            Verdict::Failed("unknown error".into())
        );
    }
}
