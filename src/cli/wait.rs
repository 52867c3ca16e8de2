//! `--wait`: follow an agent until an operation has finished, with a progress line on stderr
//! and, while the server pulls the agent's image, a progress bar (plain lines when stderr is
//! not a terminal).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};
use indicatif::{BinaryBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::client::ApiClient;
use super::error::ClientError;
use super::types::ServerEvent;
use crate::api::types::{Agent, AgentState, PullProgress, PullStatus};

/// Events can be lost (a proxy drops the stream, a server without `/events`); a slow poll
/// makes sure the wait still ends, and notices a removed agent, which sends no event.
const POLL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Running,
    Paused,
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
        (Goal::Running, AgentState::Running)
        | (Goal::Paused, AgentState::Paused)
        | (Goal::Sleeping, AgentState::Sleeping) => Verdict::Done,
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
            progress.agent(&last);
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
                    Some(Ok(ServerEvent::Agent(a))) if a.id == id => last = *a,
                    // The agent shows its pull while it runs; the end is told once.
                    Some(Ok(ServerEvent::Pull { id: of, progress: p })) if of == id => {
                        if p.status == PullStatus::Pulling {
                            last.pull = Some(p);
                        } else {
                            progress.pull(&p);
                            last.pull = None;
                        }
                    }
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

/// One line rewritten in place on a terminal; one line per state change otherwise. While the
/// image is pulled, a progress bar takes the line's place on a terminal; elsewhere a line for
/// every tenth of the way.
struct Progress {
    name: String,
    started: Instant,
    tty: bool,
    shown: Option<AgentState>,
    bar: Option<ProgressBar>,
    /// The last pull line printed (not on a terminal): its status and tenth of the way.
    printed: Option<(PullStatus, u8)>,
}

impl Progress {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            shown: None,
            bar: None,
            printed: None,
        }
    }

    /// Shows the agent as last seen: its pull while one runs, else its state.
    fn agent(&mut self, agent: &Agent) {
        match &agent.pull {
            Some(p) => self.pull(p),
            // A pull the server no longer shows is over, even if its last event was lost.
            None => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                self.show(agent.state);
            }
        }
    }

    fn pull(&mut self, p: &PullProgress) {
        if self.tty {
            self.pull_bar(p);
        } else {
            self.pull_line(p);
        }
    }

    fn pull_bar(&mut self, p: &PullProgress) {
        if p.status != PullStatus::Pulling {
            if let Some(bar) = self.bar.take() {
                bar.finish_and_clear();
            }
            self.pull_line(p);
            return;
        }
        let bar = match &self.bar {
            Some(bar) => bar,
            None => {
                // The bar takes over the state line.
                let _ = write!(std::io::stderr(), "\r\x1b[2K");
                self.shown = None;
                let style = ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos:>3}%  {wide_msg} ({elapsed})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
                let bar = ProgressBar::with_draw_target(Some(100), ProgressDrawTarget::stderr())
                    .with_style(style)
                    .with_prefix(format!("{}: pulling {}", self.name, p.image));
                self.bar.insert(bar)
            }
        };
        bar.set_position(u64::from(p.percent));
        bar.set_message(detail(p));
    }

    fn pull_line(&mut self, p: &PullProgress) {
        let step = (p.status, p.percent / 10);
        if self.printed == Some(step) {
            return;
        }
        self.printed = Some(step);
        let line = match p.status {
            PullStatus::Pulling => format!(
                "{}: pulling {}: {}% ({})",
                self.name,
                p.image,
                p.percent,
                detail(p)
            ),
            PullStatus::Done => format!(
                "{}: pulled {} ({})",
                self.name,
                p.image,
                BinaryBytes(p.bytes_total)
            ),
            PullStatus::Failed => format!(
                "{}: pulling {} failed: {}",
                self.name,
                p.image,
                p.error.as_deref().unwrap_or("unknown error")
            ),
        };
        // Progress is decoration: a closed stderr must not fail the command.
        let mut err = std::io::stderr().lock();
        if self.tty && self.shown.is_some() {
            let _ = write!(err, "\r\x1b[2K");
            self.shown = None;
        }
        let _ = writeln!(err, "{line}");
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
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.tty && self.shown.is_some() {
            let _ = writeln!(std::io::stderr());
        }
        self.shown = None;
    }
}

/// `1.5 MiB of 12.0 MiB, 1 of 2 layers`, as far as the registry has told.
fn detail(p: &PullProgress) -> String {
    let mut parts = Vec::new();
    if p.bytes_total > 0 {
        parts.push(format!(
            "{} of {}",
            BinaryBytes(p.bytes_done),
            BinaryBytes(p.bytes_total)
        ));
    }
    if p.layers_total > 0 {
        parts.push(format!("{} of {} layers", p.layers_done, p.layers_total));
    }
    if parts.is_empty() {
        "asking the registry".to_string()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_details_say_what_is_known() {
        let mut p = PullProgress {
            image: "x:1".into(),
            status: PullStatus::Pulling,
            layers_done: 0,
            layers_total: 0,
            bytes_done: 0,
            bytes_total: 0,
            percent: 0,
            error: None,
        };
        assert_eq!(detail(&p), "asking the registry");
        p.layers_total = 2;
        assert_eq!(detail(&p), "0 of 2 layers");
        p.layers_done = 1;
        p.bytes_done = 1024 * 1024 + 512 * 1024;
        p.bytes_total = 12 * 1024 * 1024;
        assert_eq!(detail(&p), "1.50 MiB of 12.00 MiB, 1 of 2 layers");
    }

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
