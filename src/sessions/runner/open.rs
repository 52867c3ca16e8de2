//! Getting a session's harness ready for a prompt: waking the agent, finding the harness
//! still running or starting it, `initialize`, and opening the ACP session or reopening it
//! (resume, else load, else a new one with a `context_reset` notice). And carrying on a turn
//! that a server which stopped left running.

use agent_client_protocol_schema::v1::{
    ClientCapabilities, FileSystemCapabilities, Implementation, InitializeRequest,
    InitializeResponse, LoadSessionRequest, NewSessionRequest, ResumeSessionRequest,
};
use agent_client_protocol_schema::ProtocolVersion;
use serde_json::Value;
use tokio::time::Instant;

use super::{Failed, Gone, Runner, REATTACH_TIME};
use crate::model::sessions::{NewEvent, NoticeKind, Restore, SessionRecord};
use crate::model::AgentState;
use crate::sessions::harness;
use crate::tunnel::conn::{ProcessName, SandboxConn};

impl Runner {
    /// The harness runs, initialized, with the ACP session open; wakes the agent first.
    pub(super) async fn ensure_harness(&mut self) -> Result<(), Failed> {
        if self.harness.is_some() {
            // Idle between turns, the agent may have been paused with its harness in it: a
            // prompt thaws it, as every use does, before anything is written to the harness.
            self.s.lc.wake_conn(&self.agent).await.map_err(|e| {
                Failed::error(
                    NoticeKind::Error,
                    format!("The sandbox could not be woken: {e}"),
                )
            })?;
            return Ok(());
        }
        let agent = self
            .s
            .lc
            .get(&self.agent)
            .await
            .map_err(|e| Failed::error(NoticeKind::Error, e.to_string()))?;
        // Said only when the sandbox has to start (not while a running one reconnects).
        if !matches!(agent.state, AgentState::Running | AgentState::Starting) {
            self.pending.push(NewEvent::notice(
                NoticeKind::Waking,
                "Starting the sandbox…",
            ));
            self.flush().await;
        }
        let conn = self.s.lc.wake_conn(&self.agent).await.map_err(|e| {
            Failed::error(
                NoticeKind::Error,
                format!("The sandbox could not be started: {e}"),
            )
        })?;
        let record = self
            .s
            .store
            .session(&self.sid)
            .await
            .map_err(|e| Failed::error(NoticeKind::Error, e.to_string()))?;
        let max_line = self.s.lc.config().sessions.update_max_bytes();
        // A harness that still runs (between turns, or the server restarted) has the session
        // open: attached to again, never replaced while it runs.
        if let Some(name) = record
            .process_id
            .clone()
            .and_then(|p| ProcessName::parse(p).ok())
        {
            if conn
                .process(&name)
                .await
                .is_ok_and(|p| p.state.is_running())
            {
                let (h, _) = harness::attach(conn.clone(), name, record.output_offset, max_line)
                    .await
                    .map_err(|e| {
                        Failed::error(
                            NoticeKind::Error,
                            format!("The harness runs but could not be reached: {e}"),
                        )
                    })?;
                self.offset = record.output_offset;
                self.committed = record.output_offset;
                self.backlog.clear();
                self.harness = Some(h);
                if record.acp_session_id.is_some() {
                    return Ok(());
                }
                // Started, but it never opened the session: start over.
                self.stop_harness().await;
            }
        }
        self.start_harness(conn, &record, &agent, max_line).await?;
        let caps = self.initialize().await?;
        self.open_session(&record, caps).await
    }

    pub(super) async fn start_harness(
        &mut self,
        conn: SandboxConn,
        record: &SessionRecord,
        agent: &crate::model::Agent,
        max_line: usize,
    ) -> Result<(), Failed> {
        let config = self.s.lc.config();
        let Some(hc) = config.harnesses.get(&record.harness) else {
            return Err(Failed::error(
                NoticeKind::Error,
                format!(
                    "The harness {:?} is not configured any more; {}",
                    record.harness,
                    crate::config::harness_names(&config)
                ),
            ));
        };
        let info = harness::start(&conn, record, hc, agent)
            .await
            .map_err(|e| Failed::error(NoticeKind::Error, e))?;
        let name = ProcessName::parse(info.id.clone())
            .map_err(|e| Failed::error(NoticeKind::Error, e.to_string()))?;
        let attached = async {
            let rec = self
                .s
                .store
                .set_session_harness(&self.sid, Some((info.id.clone(), 0)), None)
                .await
                .map_err(|e| Failed::error(NoticeKind::Error, e.to_string()))?;
            self.s.announce(&rec);
            harness::attach(conn.clone(), name.clone(), 0, max_line)
                .await
                .map_err(|e| {
                    Failed::error(
                        NoticeKind::Error,
                        format!("The harness could not be reached: {e}"),
                    )
                })
        }
        .await;
        match attached {
            Ok((h, _)) => {
                self.offset = 0;
                self.committed = 0;
                self.backlog.clear();
                self.harness = Some(h);
                Ok(())
            }
            Err(f) => {
                // Nobody else knows of it: it is ended here rather than left running.
                let _ = conn.signal(&name, "KILL".to_string()).await;
                Err(f)
            }
        }
    }

    /// `initialize`: what the harness can do to reopen a conversation (load, resume).
    pub(super) async fn initialize(&mut self) -> Result<(bool, bool), Failed> {
        let request = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(
                ClientCapabilities::new().fs(FileSystemCapabilities::new()
                    .read_text_file(true)
                    .write_text_file(true)),
            )
            .client_info(Implementation::new("agenthold", env!("CARGO_PKG_VERSION")));
        let answer = self
            .call(
                "initialize",
                request,
                self.start_time(),
                "The harness did not answer initialize within sessions.start_timeout; it was stopped",
            )
            .await?;
        let caps = serde_json::from_value::<InitializeResponse>(answer.clone())
            .map(|r| {
                (
                    r.agent_capabilities.load_session,
                    r.agent_capabilities.session_capabilities.resume.is_some(),
                )
            })
            .unwrap_or_else(|_| {
                let load = answer
                    .pointer("/agentCapabilities/loadSession")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let resume = answer
                    .pointer("/agentCapabilities/sessionCapabilities/resume")
                    .is_some_and(|v| !v.is_null());
                (load, resume)
            });
        Ok(caps)
    }

    /// Opens the conversation in a freshly started harness: a new ACP session for a session
    /// that never had one; else resume, load, or (neither possible) a new one, said so.
    pub(super) async fn open_session(
        &mut self,
        record: &SessionRecord,
        (can_load, can_resume): (bool, bool),
    ) -> Result<(), Failed> {
        let cwd = record.cwd.clone();
        let Some(acp) = record.acp_session_id.clone() else {
            let id = self.new_session(&cwd).await?;
            return self.opened(id, None).await;
        };
        if can_resume {
            let request = ResumeSessionRequest::new(acp.clone(), cwd.clone());
            match self
                .try_call("session/resume", request, self.start_time())
                .await
            {
                Ok(Ok(_)) => return self.opened(acp, Some(Restore::Resume)).await,
                Ok(Err(e)) => {
                    tracing::info!(session = %self.sid, "session/resume refused ({}); trying session/load", e.message)
                }
                Err(g) => return Err(self.failure(g)),
            }
        }
        if can_load {
            let request = LoadSessionRequest::new(acp.clone(), cwd.clone());
            self.replaying = true;
            let loaded = self
                .try_call("session/load", request, self.start_time())
                .await;
            self.replaying = false;
            match loaded {
                Ok(Ok(_)) => return self.opened(acp, Some(Restore::Load)).await,
                Ok(Err(e)) => {
                    tracing::info!(session = %self.sid, "session/load refused ({}); starting a new session", e.message)
                }
                Err(g) => return Err(self.failure(g)),
            }
        }
        let id = self.new_session(&cwd).await?;
        self.pending.push(NewEvent::notice(
            NoticeKind::ContextReset,
            "The harness could not restore the conversation; the context was reset",
        ));
        self.opened(id, Some(Restore::New)).await
    }

    pub(super) async fn new_session(&mut self, cwd: &str) -> Result<String, Failed> {
        let answer = self
            .call(
                "session/new",
                NewSessionRequest::new(cwd.to_string()),
                self.start_time(),
                "The harness did not answer session/new within sessions.start_timeout; it was \
                 stopped",
            )
            .await?;
        match answer.get("sessionId").and_then(Value::as_str) {
            Some(id) if !id.is_empty() && id.len() <= 1024 => Ok(id.to_string()),
            _ => Err(Failed::error(
                NoticeKind::Error,
                "The harness answered session/new without a session id",
            )
            .stopping()),
        }
    }

    fn start_time(&self) -> std::time::Duration {
        self.s.lc.config().sessions.start_timeout
    }

    /// Records the ACP session the harness has open.
    pub(super) async fn opened(
        &mut self,
        acp: String,
        restore: Option<Restore>,
    ) -> Result<(), Failed> {
        let rec = self
            .s
            .store
            .set_session_harness(&self.sid, None, Some((acp.clone(), restore)))
            .await
            .map_err(|e| Failed::error(NoticeKind::Error, e.to_string()))?;
        self.s.announce(&rec);
        self.acp_session = Some(acp);
        self.flush().await;
        Ok(())
    }

    /// A request whose refusal fails the turn: its result, or the turn's failure.
    pub(super) async fn call<P: serde::Serialize>(
        &mut self,
        method: &str,
        params: P,
        time: std::time::Duration,
        timeout_text: &'static str,
    ) -> Result<Value, Failed> {
        match self.try_call(method, params, time).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Failed::error(
                NoticeKind::Error,
                format!("The harness refused {method}: {}", e.message),
            )
            .stopping()),
            Err(Gone::Timeout(_)) => Err(self.failure(Gone::Timeout(timeout_text))),
            Err(g) => Err(self.failure(g)),
        }
    }

    /// Sends a request and waits up to `time` for its answer.
    pub(super) async fn try_call<P: serde::Serialize>(
        &mut self,
        method: &str,
        params: P,
        time: std::time::Duration,
    ) -> Result<Result<Value, agent_client_protocol_schema::v1::Error>, Gone> {
        let id = self.next_id(false).await;
        self.send(crate::sessions::rpc::request(id, method, params))
            .await?;
        self.wait_for(id, Some(Instant::now() + time)).await
    }

    /// Carries on turn `record.turns`, which was running when the last server stopped: once
    /// the agent's sandboxd is back, reads on from where that server had read and waits for
    /// the prompt's answer; a harness that is gone ends the turn `error`.
    pub(super) async fn recover(&mut self, record: SessionRecord) {
        let turn = record.turns;
        let _busy = self
            .s
            .lc
            .activity()
            .hold(&self.agent, crate::activity::Use::Turn);
        let outcome = async {
            let Some(prompt) = record.prompt_rpc else {
                return Err(Failed::error(
                    NoticeKind::Error,
                    "The server restarted before the prompt reached the harness; send it again",
                ));
            };
            let conn = self.await_sandbox().await.map_err(|g| self.failure(g))?;
            let name = record
                .process_id
                .clone()
                .and_then(|p| ProcessName::parse(p).ok())
                .ok_or_else(|| self.failure(Gone::Exited(None)))?;
            let max_line = self.s.lc.config().sessions.update_max_bytes();
            let (h, _) = harness::attach(conn, name, record.output_offset, max_line)
                .await
                .map_err(|_| self.failure(Gone::Exited(None)))?;
            self.harness = Some(h);
            self.prompt_rpc = Some(prompt);
            self.await_prompt(prompt).await
        }
        .await;
        self.end_turn(turn, outcome).await;
    }

    /// The agent's sandbox once its sandboxd is connected (it redials a server that
    /// restarted), unless the agent is not running.
    pub(super) async fn await_sandbox(&self) -> Result<SandboxConn, Gone> {
        let deadline = Instant::now() + REATTACH_TIME;
        loop {
            if let Some(conn) = self.s.lc.conn(&self.agent) {
                return Ok(conn);
            }
            match self.s.lc.get(&self.agent).await {
                Ok(a)
                    if matches!(
                        a.state,
                        AgentState::Running | AgentState::Paused | AgentState::Starting
                    ) => {}
                Ok(a) => {
                    return Err(Gone::Lost(format!(
                        "The harness's process ended: the agent is {}",
                        a.state
                    )))
                }
                Err(e) => return Err(Gone::Lost(e.to_string())),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Gone::Lost(
                    "The sandbox could not be reached again; the harness is lost".to_string(),
                ));
            }
            // Wakes when the tunnel comes, or after a second to look at the agent again.
            let _ = self
                .s
                .lc
                .tunnels()
                .wait(&self.agent, left.min(std::time::Duration::from_secs(1)))
                .await;
        }
    }
}
