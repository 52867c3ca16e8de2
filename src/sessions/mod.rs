//! Agent sessions: conversations with a harness (a coding agent speaking the Agent Client
//! Protocol on its stdio) that runs in the agent's sandbox, and the approval queue its
//! permission requests go to.
//!
//! [`Sessions`] is what the API calls: it checks requests, keeps the store's records, and
//! hands each session's work to its runner (`runner.rs`), one task per session with a harness
//! process or a turn, which owns the ACP conversation with the harness (`harness.rs` for the
//! process, `rpc.rs` for the framing, `lines.rs` for its output). Transcripts live in the
//! store; `feed.rs` wakes those who follow one. `approvals.rs` decides approvals: by an answer,
//! by their timeout (failing closed), or by a cancel.

mod approvals;
pub mod command_approvals;
mod error;
mod feed;
mod harness;
mod lines;
mod prompt;
mod rpc;
mod runner;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

pub use error::SessionError;
pub use prompt::MAX_PROMPT_BYTES;

use crate::config::harness_names;
use crate::events::AgentEvent;
use crate::lifecycle::Lifecycle;
use crate::model::sessions::{
    ApprovalRecord, EventKind, NewEvent, PromptData, SessionRecord, StoredEvent, TurnData,
};
use crate::store::Store;
use runner::{Command, Mode};

/// The directory a session's harness runs in unless it asks for another.
pub const DEFAULT_CWD: &str = "/home/agent";
/// Longest session title, in characters.
pub const MAX_TITLE: usize = 200;
/// Longest `cwd`, in bytes.
const MAX_CWD: usize = 4096;

/// What a new session asks for.
#[derive(Debug, Default, Clone)]
pub struct NewSession {
    pub harness: Option<String>,
    pub cwd: Option<String>,
    pub title: Option<String>,
}

struct RunnerHandle {
    generation: u64,
    tx: mpsc::UnboundedSender<Command>,
}

pub struct Sessions {
    store: Store,
    lc: Arc<Lifecycle>,
    feeds: feed::Feeds,
    runners: Mutex<HashMap<String, RunnerHandle>>,
    generation: AtomicU64,
    /// The expiry of each pending approval.
    timers: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// The held commands' requests, waiting for their approval's decision.
    waiters: Mutex<HashMap<String, tokio::sync::oneshot::Sender<ApprovalRecord>>>,
}

impl Sessions {
    pub fn new(store: Store, lc: Arc<Lifecycle>) -> Arc<Sessions> {
        Arc::new(Sessions {
            store,
            lc,
            feeds: feed::Feeds::default(),
            runners: Mutex::default(),
            generation: AtomicU64::new(0),
            timers: Mutex::default(),
            waiters: Mutex::default(),
        })
    }

    fn max_transcript(&self) -> u64 {
        self.lc.config().sessions.transcript_max_bytes()
    }

    /// Makes a session on agent `agent`; its harness starts with the first prompt.
    pub async fn create(
        &self,
        agent: &str,
        req: NewSession,
    ) -> Result<SessionRecord, SessionError> {
        let a = self.lc.get(agent).await?;
        let config = self.lc.config();
        let preset_harness = a
            .preset
            .as_ref()
            .and_then(|p| config.presets.get(p))
            .and_then(|p| p.harness.clone());
        let harness = req
            .harness
            .or(preset_harness)
            .or_else(|| config.sandbox.default_harness.clone());
        if config.harnesses.is_empty() {
            return Err(SessionError::Conflict(
                "this server has no harness configured (see `harnesses` in config.example.yaml)"
                    .to_string(),
            ));
        }
        let harness = match harness {
            Some(h) if config.harnesses.contains_key(&h) => h,
            Some(h) => {
                return Err(SessionError::Invalid {
                    field: "harness",
                    why: format!(
                        "no harness {:?}; {}",
                        h.chars().take(80).collect::<String>(),
                        harness_names(&config)
                    ),
                })
            }
            None => {
                return Err(SessionError::Conflict(format!(
                    "name a harness: the agent's preset names none and sandbox.default_harness \
                     is not set; {}",
                    harness_names(&config)
                )))
            }
        };
        let cwd = req.cwd.unwrap_or_else(|| DEFAULT_CWD.to_string());
        check_cwd(&cwd)?;
        let title = req.title.unwrap_or_else(|| "New session".to_string());
        check_title(&title)?;
        let record = SessionRecord {
            id: crate::model::new_agent_id(),
            agent_id: a.id,
            harness,
            title,
            cwd,
            running: false,
            acp_session_id: None,
            restore: None,
            process_id: None,
            created_at: String::new(),
            updated_at: String::new(),
            turns: 0,
            output_offset: 0,
            prompt_rpc: None,
            next_rpc: 1,
            last_seq: 0,
        };
        let made = self
            .store
            .add_session(record, config.sessions.max_per_agent)
            .await?;
        self.announce(&made);
        Ok(made)
    }

    /// The agent's sessions, oldest first.
    pub async fn list(&self, agent: &str) -> Result<Vec<SessionRecord>, SessionError> {
        self.lc.get(agent).await?;
        Ok(self.store.sessions_of(agent).await?)
    }

    /// Session `sid` of agent `agent`.
    pub async fn get(&self, agent: &str, sid: &str) -> Result<SessionRecord, SessionError> {
        self.lc.get(agent).await?;
        match self.store.session(sid).await {
            Ok(s) if s.agent_id == agent => Ok(s),
            Ok(_) => Err(SessionError::NoSession(sid.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn rename(
        &self,
        agent: &str,
        sid: &str,
        title: String,
    ) -> Result<SessionRecord, SessionError> {
        self.get(agent, sid).await?;
        check_title(&title)?;
        let s = self.store.rename_session(sid, title).await?;
        self.announce(&s);
        Ok(s)
    }

    /// Deletes the session: a running turn is cancelled, the harness ended, the transcript
    /// and approvals deleted.
    pub async fn delete(self: &Arc<Self>, agent: &str, sid: &str) -> Result<(), SessionError> {
        let s = self.get(agent, sid).await?;
        let me = self.clone();
        // Carried out whole even if the client goes away meanwhile.
        tokio::spawn(async move {
            me.store.delete_session(&s.id).await?;
            me.command(&s.id, Command::Stop);
            me.feeds.forget(&s.id);
            me.lc.announce(AgentEvent::SessionDeleted {
                id: s.id.clone(),
                agent_id: s.agent_id.clone(),
            });
            // The harness may run without a runner (an idle session after a restart).
            if let (Some(conn), Some(pid)) = (me.lc.conn(&s.agent_id), s.process_id) {
                if let Ok(name) = crate::tunnel::conn::ProcessName::parse(pid) {
                    let _ = conn.remove_process(&name).await;
                }
            }
            Ok::<_, SessionError>(())
        })
        .await
        .map_err(|e| SessionError::Conflict(format!("the session was not deleted: {e}")))?
    }

    /// Starts a turn with `prompt` (ACP content blocks): `Ok(turn)` once it is recorded; the
    /// turn goes on in the background (waking the agent, starting the harness).
    pub async fn prompt(
        self: &Arc<Self>,
        agent: &str,
        sid: &str,
        prompt: Vec<serde_json::Value>,
    ) -> Result<u64, SessionError> {
        self.get(agent, sid).await?;
        let blocks = prompt::check(&prompt)?;
        // The turn's start and its hand-over to the runner happen together even if the client
        // goes away meanwhile (a dropped request must not leave a turn recorded and never run).
        let me = self.clone();
        let sid = sid.to_string();
        tokio::spawn(async move {
            let max = me.max_transcript();
            let (s, turn) = me
                .store
                .start_turn(
                    &sid,
                    move |turn| {
                        vec![
                            NewEvent::of(EventKind::Prompt, &PromptData { turn, prompt }),
                            NewEvent::of(
                                EventKind::Turn,
                                &TurnData {
                                    turn,
                                    state: "started",
                                    stop_reason: None,
                                },
                            ),
                        ]
                    },
                    max,
                )
                .await?;
            me.feeds.grew(&sid, s.last_seq);
            me.announce(&s);
            me.dispatch(&s, Command::Prompt { turn, blocks });
            Ok::<_, SessionError>(turn)
        })
        .await
        .map_err(|e| SessionError::Conflict(format!("the prompt was not taken: {e}")))?
    }

    /// Cancels the running turn.
    pub async fn cancel(&self, agent: &str, sid: &str) -> Result<(), SessionError> {
        let s = self.get(agent, sid).await?;
        if !s.running {
            return Err(SessionError::Conflict(
                "no turn is running in this session".to_string(),
            ));
        }
        if !self.command(sid, Command::Cancel) {
            // No runner: the turn's runner ended without ending it (it cannot, but a turn
            // must never stay running): end it here.
            self.end_orphan_turn(&s, "cancelled").await;
        }
        Ok(())
    }

    /// Events after `after`, at most `limit`.
    pub async fn events(
        &self,
        agent: &str,
        sid: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, SessionError> {
        self.get(agent, sid).await?;
        Ok(self.store.session_events(sid, after, limit).await?)
    }

    /// Changes whenever the session's transcript grows (closed when it is deleted).
    pub fn follow(&self, sid: &str) -> watch::Receiver<u64> {
        self.feeds.follow(sid)
    }

    /// Events after `after` for a follower that already knows the session exists.
    pub async fn events_after(
        &self,
        sid: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, SessionError> {
        Ok(self.store.session_events(sid, after, limit).await?)
    }

    /// Carries on what a server that stopped left: turns that were running, and approvals
    /// that were pending.
    pub async fn recover(self: &Arc<Self>) -> Result<(), SessionError> {
        for s in self.store.running_sessions().await? {
            tracing::info!(session = %s.id, agent = %s.agent_id, turn = s.turns, "carrying on a turn the last server left running");
            self.spawn_runner(&s, Mode::Recover(Box::new(s.clone())));
        }
        self.rearm_approvals().await
    }

    /// Sends `cmd` to the session's runner; `false` when it has none.
    fn command(&self, sid: &str, cmd: Command) -> bool {
        let runners = self.runners.lock().unwrap_or_else(|e| e.into_inner());
        runners.get(sid).is_some_and(|r| r.tx.send(cmd).is_ok())
    }

    /// Sends `cmd` to the session's runner, starting one if it has none.
    fn dispatch(self: &Arc<Self>, s: &SessionRecord, cmd: Command) {
        let mut runners = self.runners.lock().unwrap_or_else(|e| e.into_inner());
        let cmd = match runners.get(&s.id) {
            Some(r) => match r.tx.send(cmd) {
                Ok(()) => return,
                Err(mpsc::error::SendError(cmd)) => cmd,
            },
            None => cmd,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(cmd);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        runners.insert(s.id.clone(), RunnerHandle { generation, tx });
        tokio::spawn(runner::run(
            self.clone(),
            s.clone(),
            rx,
            generation,
            Mode::Fresh,
        ));
    }

    fn spawn_runner(self: &Arc<Self>, s: &SessionRecord, mode: Mode) {
        let (tx, rx) = mpsc::unbounded_channel();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        self.runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(s.id.clone(), RunnerHandle { generation, tx });
        tokio::spawn(runner::supervise(
            self.clone(),
            s.clone(),
            rx,
            generation,
            mode,
        ));
    }

    /// A runner that ends takes itself out of the map (unless a newer one replaced it), then
    /// hands on the commands that reached it too late: a prompt goes to a new runner.
    fn runner_ended(
        self: &Arc<Self>,
        sid: &str,
        generation: u64,
        mut rx: mpsc::UnboundedReceiver<Command>,
    ) {
        {
            let mut runners = self.runners.lock().unwrap_or_else(|e| e.into_inner());
            if runners.get(sid).is_some_and(|r| r.generation == generation) {
                runners.remove(sid);
            }
        }
        rx.close();
        let mut late = Vec::new();
        while let Ok(cmd) = rx.try_recv() {
            if matches!(cmd, Command::Prompt { .. }) {
                late.push(cmd);
            }
        }
        if late.is_empty() {
            return;
        }
        let me = self.clone();
        let sid = sid.to_string();
        tokio::spawn(async move {
            if let Ok(s) = me.store.session(&sid).await {
                for cmd in late {
                    me.dispatch(&s, cmd);
                }
            }
        });
    }

    /// Ends a running turn that no runner carries (`error` or `cancelled`).
    async fn end_orphan_turn(&self, s: &SessionRecord, reason: &str) {
        let events = vec![NewEvent::of(
            EventKind::Turn,
            &TurnData {
                turn: s.turns,
                state: "ended",
                stop_reason: Some(reason.to_string()),
            },
        )];
        if let Ok(Some(s)) = self
            .store
            .end_turn(&s.id, events, self.max_transcript())
            .await
        {
            self.feeds.grew(&s.id, s.last_seq);
            self.announce(&s);
        }
    }

    fn announce(&self, s: &SessionRecord) {
        self.lc.announce(AgentEvent::Session(Box::new(s.clone())));
    }
}

fn check_title(title: &str) -> Result<(), SessionError> {
    if title.chars().count() > MAX_TITLE || title.chars().any(char::is_control) {
        return Err(SessionError::Invalid {
            field: "title",
            why: format!("a title is at most {MAX_TITLE} characters, none a control character"),
        });
    }
    Ok(())
}

fn check_cwd(cwd: &str) -> Result<(), SessionError> {
    let bad = !cwd.starts_with('/')
        || cwd.len() > MAX_CWD
        || cwd.contains('\0')
        || cwd.split('/').any(|c| c == "..");
    if bad {
        return Err(SessionError::Invalid {
            field: "cwd",
            why: format!(
                "cwd must be an absolute path of at most {MAX_CWD} bytes, without '..' or NUL"
            ),
        });
    }
    Ok(())
}
