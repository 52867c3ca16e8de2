//! One session's runner: the task that owns the conversation with its harness while the
//! harness runs or a turn is under way. It starts (or finds) the harness, initializes it,
//! opens or reopens the ACP session, sends prompts, turns the harness's messages into
//! transcript events, answers its requests, and ends every turn it starts — with `error` and
//! a notice when the harness dies or misbehaves, so that no session stays `running`.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    ContentBlock, PromptRequest, RequestId, RequestPermissionOutcome,
};
use agenthold_proto::ProcessInfo;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

mod open;
mod pump;

use super::harness::Harness;
use super::{rpc, Sessions};
use crate::activity::Use;
use crate::model::sessions::{EventKind, NewEvent, NoticeKind, SessionRecord, TurnData};

/// How long a harness has to end a turn once it was cancelled, before it is stopped.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// How long a write to the harness's stdin may wait for it to read.
const WRITE_TIME: Duration = Duration::from_secs(10);
/// How long a runner waits for the sandbox to come back after its connection broke.
const REATTACH_TIME: Duration = Duration::from_secs(60);
/// Most options a permission request may offer.
const MAX_OPTIONS: usize = 64;
/// Events written to the store in one transaction at most, and their bytes.
const BATCH: usize = 2048;
const BATCH_BYTES: usize = 4 * 1024 * 1024;
/// How long a runner stays attached to a harness that is quiet between turns; it then lets go
/// of its stream (the harness runs on, and the next prompt attaches again).
const IDLE_DETACH: Duration = Duration::from_secs(30);
/// How long a turn waits on a harness that went quiet after part of its output was lost.
const AFTER_GAP: Duration = Duration::from_secs(30);
/// Permission requests one turn may have open at once; more are answered `cancelled`.
const MAX_OPEN_APPROVALS: usize = 32;
/// File requests of a harness served at once; more are refused.
const MAX_FILE_REQUESTS: usize = 4;

/// What the runner is asked to do.
pub enum Command {
    Prompt {
        turn: u64,
        blocks: Vec<ContentBlock>,
    },
    Cancel,
    /// An approval was decided: the harness's `session/request_permission` gets `outcome`.
    Answer {
        rpc_id: RequestId,
        outcome: RequestPermissionOutcome,
    },
    /// A line to send the harness process `process` (the answer to a file request served on
    /// the side); dropped if another process runs the harness by then.
    Reply {
        process: String,
        line: Vec<u8>,
    },
    /// The session was deleted.
    Stop,
}

pub enum Mode {
    /// A prompt is the first command.
    Fresh,
    /// The server restarted while this session's turn ran: carry it on.
    Recover(Box<SessionRecord>),
}

/// Why the runner stopped waiting for an answer.
enum Gone {
    /// The harness's process ended.
    Exited(Option<ProcessInfo>),
    /// The sandbox could not be reached again.
    Lost(String),
    /// No answer in time.
    Timeout(&'static str),
    /// The harness does not read its stdin.
    Stuck,
    /// It was cancelled and did not end the turn in time.
    CancelIgnored,
    /// Its output was lost before it was read (what was lost may have been an answer).
    OutputLost(String),
    /// The session was deleted.
    Stopped,
}

/// A turn that could not be carried out: the notice that says why, how it ends, and whether
/// the harness is to be stopped (it misbehaved, and is not trusted with the next turn).
struct Failed {
    notice: Option<(NoticeKind, String)>,
    stop_reason: &'static str,
    stop_harness: bool,
}

impl Failed {
    fn error(kind: NoticeKind, text: impl Into<String>) -> Failed {
        Failed {
            notice: Some((kind, text.into())),
            stop_reason: "error",
            stop_harness: false,
        }
    }

    fn stopping(mut self) -> Failed {
        self.stop_harness = true;
        self
    }
}

struct Runner {
    s: Arc<Sessions>,
    sid: String,
    agent: String,
    rx: mpsc::UnboundedReceiver<Command>,
    harness: Option<Harness>,
    acp_session: Option<String>,
    /// While `session/load` replays the conversation: its updates are in the transcript
    /// already.
    replaying: bool,
    /// Events not yet written (and their size), and the output offset to record with them.
    pending: Vec<NewEvent>,
    pending_bytes: usize,
    offset: u64,
    committed: u64,
    /// Lines read but not yet handled (the rest of a piece after the answer waited for).
    backlog: std::collections::VecDeque<super::harness::Line>,
    /// A turn runs (its permission requests become approvals; between turns they are refused).
    in_turn: bool,
    /// Permission requests of this turn still open.
    open_approvals: usize,
    /// Set when output was lost while an answer was awaited: the wait ends then unless the
    /// harness speaks again.
    after_gap: Option<Instant>,
    /// File requests being served, at most [`MAX_FILE_REQUESTS`]; aborted when the runner ends.
    file_tasks: tokio::task::JoinSet<()>,
    /// A cancel arrived for the running turn.
    cancelled: bool,
    cancel_deadline: Option<Instant>,
    /// The running turn's `session/prompt` id, once sent.
    prompt_rpc: Option<i64>,
}

/// The stop reason of a `session/prompt` answer, as the harness wrote it (a reason the schema
/// does not know is kept, not refused).
fn stop_reason(result: &Value) -> String {
    match result.get("stopReason").and_then(Value::as_str) {
        Some(r) if !r.is_empty() && r.len() <= 64 => r.to_string(),
        _ => "error".to_string(),
    }
}

/// What a `harness_exited` notice says.
fn exited_text(info: Option<&ProcessInfo>) -> String {
    match info {
        Some(p) if p.signal.is_some() => format!(
            "The harness was ended by signal {}",
            p.signal.as_deref().unwrap_or_default()
        ),
        Some(p) if p.exit_code.is_some() => format!(
            "The harness exited with code {}",
            p.exit_code.unwrap_or_default()
        ),
        Some(_) => "The harness's process ended (its sandbox stopped)".to_string(),
        None => "The harness's process ended".to_string(),
    }
}

pub async fn run(
    s: Arc<Sessions>,
    record: SessionRecord,
    rx: mpsc::UnboundedReceiver<Command>,
    generation: u64,
    mode: Mode,
) {
    let mut r = Runner {
        s: s.clone(),
        sid: record.id.clone(),
        agent: record.agent_id.clone(),
        rx,
        harness: None,
        acp_session: record.acp_session_id.clone(),
        replaying: false,
        pending: Vec::new(),
        pending_bytes: 0,
        offset: record.output_offset,
        committed: record.output_offset,
        backlog: Default::default(),
        in_turn: false,
        open_approvals: 0,
        after_gap: None,
        file_tasks: tokio::task::JoinSet::new(),
        cancelled: false,
        cancel_deadline: None,
        prompt_rpc: None,
    };
    if let Mode::Recover(rec) = mode {
        r.recover(*rec).await;
    }
    r.serve().await;
    let Runner { sid, rx, .. } = r;
    s.runner_ended(&sid, generation, rx);
}

/// Runs a runner, and ends its session's turn `error` should it panic (a bug), so that no
/// session is left `running` by one.
pub async fn supervise(
    s: Arc<Sessions>,
    record: SessionRecord,
    rx: mpsc::UnboundedReceiver<Command>,
    generation: u64,
    mode: Mode,
) {
    let sid = record.id.clone();
    let task = tokio::spawn(run(s.clone(), record, rx, generation, mode));
    if let Err(e) = task.await {
        if e.is_panic() {
            tracing::error!(session = %sid, "a session runner panicked: {e}");
            if let Ok(rec) = s.store.session(&sid).await {
                if rec.running {
                    s.end_orphan_turn(&rec, "error").await;
                }
            }
        }
    }
}

impl Runner {
    /// Takes commands for as long as the harness runs (between turns its output is still
    /// read, so that it never blocks on a full pipe); ends when the harness does, or at once
    /// when there is none and no command waits.
    async fn serve(&mut self) {
        loop {
            let cmd = if self.harness.is_some() {
                match self.between_turns().await {
                    Some(cmd) => cmd,
                    None => return,
                }
            } else {
                match self.rx.try_recv() {
                    Ok(cmd) => cmd,
                    Err(_) => return,
                }
            };
            match cmd {
                Command::Prompt { turn, blocks } => self.turn(turn, blocks).await,
                Command::Stop => {
                    self.stop_harness().await;
                    return;
                }
                // A cancel with no turn of ours running: a turn the store holds as running
                // without a runner (its end could not be written) is ended here.
                Command::Cancel => {
                    if let Ok(rec) = self.s.store.session(&self.sid).await {
                        if rec.running {
                            self.s.end_orphan_turn(&rec, "cancelled").await;
                        }
                    }
                }
                Command::Answer { .. } | Command::Reply { .. } => {}
            }
        }
    }

    /// Reads the harness's output until a command comes (answers and replies are sent on the
    /// way); `None` when the harness is gone, or quiet for [`IDLE_DETACH`] (it runs on).
    async fn between_turns(&mut self) -> Option<Command> {
        loop {
            while let Some(line) = self.backlog.pop_front() {
                if self.handle_line(line, None).await.is_err() {
                    return self.harness_gone_between_turns(None).await;
                }
            }
            self.flush().await;
            let h = self.harness.as_mut()?;
            tokio::select! {
                cmd = self.rx.recv() => match cmd {
                    Some(Command::Answer { .. }) | Some(Command::Reply { .. }) => {
                        if let Some(cmd) = cmd {
                            if self.on_command(Some(cmd)).await.is_err() {
                                return self.harness_gone_between_turns(None).await;
                            }
                        }
                    }
                    other => return other.or(Some(Command::Stop)),
                },
                out = h.output.recv() => {
                    if let Err(g) = self.on_output(out, None).await {
                        let info = match g {
                            Gone::Exited(info) => info,
                            _ => None,
                        };
                        return self.harness_gone_between_turns(info).await;
                    }
                }
                _ = tokio::time::sleep(IDLE_DETACH) => {
                    self.flush().await;
                    self.harness = None;
                    return None;
                }
            }
        }
    }

    /// The harness ended (or could not be reached) while no turn ran.
    async fn harness_gone_between_turns(&mut self, info: Option<ProcessInfo>) -> Option<Command> {
        if info.is_some() {
            self.pending.push(NewEvent::notice(
                NoticeKind::HarnessExited,
                exited_text(info.as_ref()),
            ));
        }
        self.harness = None;
        self.flush().await;
        None
    }

    /// Runs turn `turn` to its end.
    async fn turn(&mut self, turn: u64, blocks: Vec<ContentBlock>) {
        // A prompt that reached a runner late (handed on when another ended) runs only if its
        // turn is still the session's running one: a cancel may have ended it meanwhile.
        match self.s.store.session(&self.sid).await {
            Ok(rec) if rec.running && rec.turns == turn => {}
            _ => return,
        }
        let _busy = self.s.lc.activity().hold(&self.agent, Use::Turn);
        self.cancelled = false;
        self.cancel_deadline = None;
        self.prompt_rpc = None;
        self.in_turn = true;
        self.open_approvals = 0;
        let outcome = async {
            self.ensure_harness().await?;
            if self.cancelled {
                return Ok("cancelled".to_string());
            }
            let acp = self.acp_session.clone().unwrap_or_default();
            let request = PromptRequest::new(acp, blocks);
            let id = self.next_id(true).await;
            self.prompt_rpc = Some(id);
            self.send(rpc::request(id, "session/prompt", request))
                .await
                .map_err(|g| self.failure(g))?;
            self.await_prompt(id).await
        }
        .await;
        self.end_turn(turn, outcome).await;
    }

    /// Waits for the answer to `session/prompt` `id`: its stop reason.
    async fn await_prompt(&mut self, id: i64) -> Result<String, Failed> {
        match self.wait_for(id, None).await {
            Ok(Ok(result)) => Ok(stop_reason(&result)),
            Ok(Err(e)) => Err(Failed::error(
                NoticeKind::Error,
                format!(
                    "The harness answered the prompt with an error: {} ({})",
                    e.message,
                    i32::from(e.code)
                ),
            )),
            Err(g) => Err(self.failure(g)),
        }
    }

    /// What ends a turn when the harness went.
    fn failure(&mut self, g: Gone) -> Failed {
        match g {
            Gone::Exited(info) => {
                self.harness = None;
                Failed::error(NoticeKind::HarnessExited, exited_text(info.as_ref()))
            }
            Gone::Lost(why) => {
                self.harness = None;
                Failed::error(NoticeKind::HarnessExited, why)
            }
            Gone::Timeout(what) => Failed::error(NoticeKind::Error, what).stopping(),
            Gone::OutputLost(what) => Failed {
                notice: Some((NoticeKind::Gap, what)),
                stop_reason: "error",
                stop_harness: true,
            },
            Gone::Stuck => Failed::error(
                NoticeKind::Error,
                "The harness stopped reading its input; it was stopped",
            )
            .stopping(),
            Gone::CancelIgnored => Failed {
                notice: Some((
                    NoticeKind::HarnessExited,
                    format!(
                        "The harness did not end the turn within {} s of the cancel; it was \
                         stopped",
                        CANCEL_GRACE.as_secs()
                    ),
                )),
                stop_reason: "cancelled",
                stop_harness: true,
            },
            Gone::Stopped => Failed {
                notice: None,
                stop_reason: "cancelled",
                stop_harness: true,
            },
        }
    }

    async fn end_turn(&mut self, turn: u64, outcome: Result<String, Failed>) {
        let stop_reason = match outcome {
            Ok(reason) => reason,
            Err(f) => {
                if let Some((kind, text)) = f.notice {
                    self.pending.push(NewEvent::notice(kind, text));
                }
                if f.stop_harness {
                    self.stop_harness().await;
                }
                f.stop_reason.to_string()
            }
        };
        self.flush().await;
        // Approvals of the turn that nobody answered can no longer be.
        self.s.cancel_approvals(&self.sid).await;
        let events = vec![NewEvent::of(
            EventKind::Turn,
            &TurnData {
                turn,
                state: "ended",
                stop_reason: Some(stop_reason),
            },
        )];
        // A turn must end: a store that fails for a moment is tried again.
        for attempt in 0..5u32 {
            match self
                .s
                .store
                .end_turn(&self.sid, events.clone(), self.s.max_transcript())
                .await
            {
                Ok(Some(rec)) => {
                    self.s.feeds.grew(&self.sid, rec.last_seq);
                    self.s.announce(&rec);
                    break;
                }
                Ok(None) | Err(crate::store::sessions::SessionStoreError::NoSession(_)) => break,
                Err(e) => {
                    tracing::warn!(session = %self.sid, attempt, "ending the turn: {e}");
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
            }
        }
        self.in_turn = false;
        self.cancelled = false;
        self.open_approvals = 0;
        self.after_gap = None;
        self.cancel_deadline = None;
        self.prompt_rpc = None;
    }

    /// Ends the harness's process (when the session was deleted, or the harness failed).
    async fn stop_harness(&mut self) {
        if let Some(h) = self.harness.take() {
            let _ = h.conn.signal(&h.process, "KILL".to_string()).await;
        }
    }
}
