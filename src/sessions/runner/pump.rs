//! The runner's exchange with a running harness: sending it lines, and taking in what it
//! writes — answers to the server's requests, `session/update`s (transcript events), and its
//! own requests (permission, which becomes an approval; files, served through the agent's own
//! file access; anything else, `-32601`) — while commands (cancel, answers) keep coming in.

use agent_client_protocol_schema::v1::{
    CancelNotification, Error as RpcError, ReadTextFileRequest, ReadTextFileResponse, RequestId,
    RequestPermissionResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::{Command, Gone, Runner, BATCH, CANCEL_GRACE, MAX_OPTIONS, WRITE_TIME};
use crate::model::sessions::{ApprovalRecord, EventKind, NewEvent, NoticeKind, OptionRecord};
use crate::sessions::harness::Output;
use crate::sessions::rpc::{self, FromHarness};
use crate::tunnel::conn::{SandboxConn, UploadLimit};

/// Longest option id, name and kind taken from a permission request, in bytes.
const MAX_OPTION_ID: usize = 256;
const MAX_OPTION_NAME: usize = 1024;
const MAX_OPTION_KIND: usize = 64;

impl Runner {
    /// The next JSON-RPC id (stored, so ids stay unique across restarts); with `prompt`, also
    /// recorded as the running turn's `session/prompt`.
    pub(super) async fn next_id(&self, prompt: bool) -> i64 {
        // The session is gone when this fails; whatever is sent then is answered to no one.
        self.s
            .store
            .next_rpc_id(&self.sid, prompt)
            .await
            .unwrap_or(i64::MAX)
    }

    /// Writes `line` to the harness's stdin; a harness that does not read it within
    /// [`WRITE_TIME`] is taken for stuck.
    pub(super) async fn send(&mut self, line: Vec<u8>) -> Result<(), Gone> {
        let Some(h) = self.harness.as_mut() else {
            return Err(Gone::Exited(None));
        };
        match tokio::time::timeout(WRITE_TIME, h.stdin.write(&line)).await {
            Ok(Ok(())) => Ok(()),
            // Its stdin closed: it is ending; its output will say how.
            Ok(Err(_)) => Ok(()),
            Err(_) => Err(Gone::Stuck),
        }
    }

    /// Writes the events gathered so far, with how far the output was read.
    pub(super) async fn flush(&mut self) {
        if self.pending.is_empty() && self.offset == self.committed {
            return;
        }
        let events = std::mem::take(&mut self.pending);
        match self
            .s
            .store
            .append_events(
                &self.sid,
                events,
                Some(self.offset),
                self.s.max_transcript(),
            )
            .await
        {
            Ok(seq) => {
                self.committed = self.offset;
                self.s.feeds.grew(&self.sid, seq);
            }
            Err(e) => tracing::debug!(session = %self.sid, "writing the transcript: {e}"),
        }
    }

    /// Takes in the harness's output and commands until the answer to request `id` comes
    /// (or `deadline` passes).
    pub(super) async fn wait_for(
        &mut self,
        id: i64,
        deadline: Option<Instant>,
    ) -> Result<Result<Value, RpcError>, Gone> {
        loop {
            let queued = self.harness.as_ref().map_or(0, |h| h.output.len());
            if queued == 0 || self.pending.len() >= BATCH {
                self.flush().await;
            }
            let Some(h) = self.harness.as_mut() else {
                return Err(Gone::Exited(None));
            };
            let limit = match (deadline, self.cancel_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let sleep = async {
                match limit {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                out = h.output.recv() => {
                    if let Some(answer) = self.on_output(out, Some(id)).await? {
                        self.flush().await;
                        return Ok(answer);
                    }
                }
                cmd = self.rx.recv() => self.on_command(cmd).await?,
                _ = sleep => {
                    self.flush().await;
                    if self.cancel_deadline.is_some_and(|t| t <= Instant::now()) {
                        return Err(Gone::CancelIgnored);
                    }
                    return Err(Gone::Timeout("no answer in time"));
                }
            }
        }
    }

    /// A command that came while a request waits.
    async fn on_command(&mut self, cmd: Option<Command>) -> Result<(), Gone> {
        match cmd {
            Some(Command::Cancel) => self.cancel().await,
            Some(Command::Answer { rpc_id, outcome }) => {
                self.send(rpc::response(
                    rpc_id,
                    Ok(RequestPermissionResponse::new(outcome)),
                ))
                .await
            }
            Some(Command::Reply(line)) => self.send(line).await,
            // A prompt cannot come while a turn runs (the store refuses the second); one
            // that did would be a bug, and is dropped loudly rather than run twice.
            Some(Command::Prompt { turn, .. }) => {
                tracing::error!(session = %self.sid, turn, "a prompt reached a runner in the middle of a turn");
                Ok(())
            }
            Some(Command::Stop) | None => Err(Gone::Stopped),
        }
    }

    /// Cancels the running turn: `session/cancel` once the prompt was sent, and every pending
    /// approval `cancelled`; the harness then has [`CANCEL_GRACE`] to end the turn.
    async fn cancel(&mut self) -> Result<(), Gone> {
        if self.cancelled {
            return Ok(());
        }
        self.cancelled = true;
        if self.prompt_rpc.is_some() {
            if let Some(acp) = self.acp_session.clone() {
                self.send(rpc::notification(
                    "session/cancel",
                    CancelNotification::new(acp),
                ))
                .await?;
            }
            self.cancel_deadline = Some(Instant::now() + CANCEL_GRACE);
        }
        self.s.cancel_approvals(&self.sid).await;
        Ok(())
    }

    /// One piece of the reader's news: the answer to `waiting` when that is what came.
    pub(super) async fn on_output(
        &mut self,
        out: Option<Output>,
        waiting: Option<i64>,
    ) -> Result<Option<Result<Value, RpcError>>, Gone> {
        match out {
            Some(Output::Line(line, end)) => {
                self.offset = end;
                self.on_line(&line, waiting).await
            }
            Some(Output::TooLong(end)) => {
                self.offset = end;
                let max = self.s.lc.config().sessions.update_max_kb;
                self.pending.push(NewEvent::notice(
                    NoticeKind::Error,
                    format!(
                        "The harness sent a message of more than {max} KiB \
                         (sessions.update_max_kb); it was dropped"
                    ),
                ));
                Ok(None)
            }
            Some(Output::Gap { from, to }) => {
                self.offset = to;
                self.pending.push(NewEvent::notice(
                    NoticeKind::Gap,
                    format!(
                        "{} bytes of the harness's output were lost before they could be read",
                        to.saturating_sub(from)
                    ),
                ));
                Ok(None)
            }
            Some(Output::Exited(info)) => {
                self.flush().await;
                Err(Gone::Exited(Some(info)))
            }
            Some(Output::Lost) | None => {
                self.flush().await;
                self.reattach().await?;
                Ok(None)
            }
        }
    }

    /// The sandbox connection broke: attach again from what was read, once the sandbox is
    /// back; the harness is gone when its agent stopped or its process ended.
    async fn reattach(&mut self) -> Result<(), Gone> {
        let Some(old) = self.harness.take() else {
            return Err(Gone::Exited(None));
        };
        let process = old.process.clone();
        drop(old);
        let conn = self.await_sandbox().await?;
        let info = conn
            .process(&process)
            .await
            .map_err(|_| Gone::Exited(None))?;
        let max_line = self.s.lc.config().sessions.update_max_bytes();
        // Attaching to a process that has ended still reads what it wrote before it did.
        let (h, _) = crate::sessions::harness::attach(conn, process, self.committed, max_line)
            .await
            .map_err(|_| Gone::Exited(Some(info)))?;
        self.offset = self.committed;
        self.harness = Some(h);
        Ok(())
    }

    /// One line from the harness.
    async fn on_line(
        &mut self,
        line: &[u8],
        waiting: Option<i64>,
    ) -> Result<Option<Result<Value, RpcError>>, Gone> {
        let message = match rpc::decode(line) {
            Ok(m) => m,
            Err(why) => {
                tracing::debug!(session = %self.sid, "a line from the harness is ignored: {why}");
                return Ok(None);
            }
        };
        match message {
            FromHarness::Response { id, result } => {
                if matches!((id, waiting), (RequestId::Number(n), Some(w)) if n == w) {
                    return Ok(Some(result));
                }
                Ok(None)
            }
            FromHarness::Notification { method, params } => {
                if method == "session/update" && !self.replaying {
                    if let Some(update) = params.get("update") {
                        self.pending.push(NewEvent::of(EventKind::Update, update));
                    }
                }
                Ok(None)
            }
            FromHarness::Request { id, method, params } => {
                self.on_request(id, &method, params).await?;
                Ok(None)
            }
        }
    }

    async fn on_request(&mut self, id: RequestId, method: &str, params: Value) -> Result<(), Gone> {
        match method {
            "session/request_permission" => self.ask(id, params).await,
            "fs/read_text_file" | "fs/write_text_file" => {
                let Some(conn) = self.harness.as_ref().map(|h| h.conn.clone()) else {
                    return Ok(());
                };
                let max_mb = self.s.lc.config().server.max_file_mb;
                let s = self.s.clone();
                let sid = self.sid.clone();
                let method = method.to_string();
                // Served on the side, so that a slow file does not hold up the conversation;
                // the answer goes back through the runner's commands.
                tokio::spawn(async move {
                    let line = serve_file(&conn, &method, id, params, max_mb).await;
                    s.command(&sid, Command::Reply(line));
                });
                Ok(())
            }
            _ => {
                let error =
                    RpcError::method_not_found().data(format!("agenthold does not offer {method}"));
                self.send(rpc::response::<()>(id, Err(error))).await
            }
        }
    }

    /// `session/request_permission`: an approval, pending until someone answers it, its
    /// timeout passes, or the turn is cancelled.
    async fn ask(&mut self, id: RequestId, params: Value) -> Result<(), Gone> {
        let options = match permission_options(&params) {
            Ok(o) => o,
            Err(why) => {
                self.pending.push(NewEvent::notice(
                    NoticeKind::Error,
                    format!("The harness asked permission in a way that cannot be answered: {why}; the request was refused"),
                ));
                return self
                    .send(rpc::response::<()>(
                        id,
                        Err(RpcError::invalid_params().data(why)),
                    ))
                    .await;
            }
        };
        if self.cancelled {
            let answer = RequestPermissionResponse::new(
                agent_client_protocol_schema::v1::RequestPermissionOutcome::Cancelled,
            );
            return self.send(rpc::response(id, Ok(answer))).await;
        }
        let now = chrono::Utc::now();
        let timeout = self.s.lc.config().sessions.approval_timeout;
        let expires = now + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::MAX);
        let record = ApprovalRecord {
            id: crate::model::new_agent_id(),
            agent_id: self.agent.clone(),
            session_id: self.sid.clone(),
            tool_call: params.get("toolCall").cloned().unwrap_or(Value::Null),
            options,
            created_at: rfc3339(now),
            expires_at: rfc3339(expires),
            outcome: None,
            option_id: None,
            decided_by: None,
            rpc_id: rpc::id_to_value(&id),
        };
        // Its event follows the updates before it.
        self.flush().await;
        match self
            .s
            .store
            .add_approval(record.clone(), self.s.max_transcript())
            .await
        {
            Ok(seq) => {
                self.s.feeds.grew(&self.sid, seq);
                self.s
                    .lc
                    .announce(crate::events::AgentEvent::Approval(Box::new(
                        record.clone(),
                    )));
                self.s.arm(&record);
                Ok(())
            }
            Err(e) => {
                tracing::debug!(session = %self.sid, "recording an approval: {e}");
                Err(Gone::Stopped)
            }
        }
    }
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The options of a permission request, each named by its id (never its place), or why they
/// cannot be offered to anyone.
fn permission_options(params: &Value) -> Result<Vec<OptionRecord>, String> {
    let Some(list) = params.get("options").and_then(Value::as_array) else {
        return Err("it offers no options".to_string());
    };
    if list.is_empty() || list.len() > MAX_OPTIONS {
        return Err(format!(
            "it offers {} options; 1 to {MAX_OPTIONS} are accepted",
            list.len()
        ));
    }
    let mut out: Vec<OptionRecord> = Vec::with_capacity(list.len());
    for o in list {
        let field = |name: &str, max: usize| {
            o.get(name)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty() && v.len() <= max)
                .map(str::to_string)
        };
        let Some(option_id) = field("optionId", MAX_OPTION_ID) else {
            return Err(format!(
                "an option has no optionId of 1 to {MAX_OPTION_ID} bytes"
            ));
        };
        if out.iter().any(|x| x.option_id == option_id) {
            return Err(format!("two options share the id {option_id:?}"));
        }
        out.push(OptionRecord {
            name: field("name", MAX_OPTION_NAME).unwrap_or_else(|| option_id.clone()),
            kind: field("kind", MAX_OPTION_KIND).unwrap_or_default(),
            option_id,
        });
    }
    Ok(out)
}

/// Serves a harness's `fs/read_text_file` or `fs/write_text_file` through the agent's own
/// file access (as the agent account): the answer line.
async fn serve_file(
    conn: &SandboxConn,
    method: &str,
    id: RequestId,
    params: Value,
    max_mb: u64,
) -> Vec<u8> {
    let failed = |e: String| RpcError::internal_error().data(e);
    if method == "fs/read_text_file" {
        let answer = async {
            let req: ReadTextFileRequest = serde_json::from_value(params)
                .map_err(|e| RpcError::invalid_params().data(e.to_string()))?;
            let path = req.path.to_string_lossy().to_string();
            let file = conn
                .read_file(path)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let max = max_mb.saturating_mul(1024 * 1024);
            if file.size > max {
                return Err(failed(format!(
                    "the file is over server.max_file_mb ({max_mb} MiB)"
                )));
            }
            let mut bytes = Vec::with_capacity(file.size as usize);
            file.bytes
                .take(max)
                .read_to_end(&mut bytes)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let text = String::from_utf8_lossy(&bytes);
            Ok(ReadTextFileResponse::new(select_lines(
                &text, req.line, req.limit,
            )))
        }
        .await;
        return rpc::response(id, answer);
    }
    let answer = async {
        let req: WriteTextFileRequest = serde_json::from_value(params)
            .map_err(|e| RpcError::invalid_params().data(e.to_string()))?;
        let path = req.path.to_string_lossy().to_string();
        let body = futures::stream::once(async move {
            Ok::<_, std::io::Error>(bytes::Bytes::from(req.content))
        });
        conn.write_file(path, Box::pin(body), UploadLimit::mb(max_mb))
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok(WriteTextFileResponse::default())
    }
    .await;
    rpc::response(id, answer)
}

/// Lines `line` (1-based) on, at most `limit` of them.
fn select_lines(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_string();
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_are_named_by_id_and_bounded() {
        let ok = permission_options(&json!({"options": [
            {"optionId": "b7", "name": "No", "kind": "reject_always"},
            {"optionId": "a2", "name": "Yes", "kind": "allow_once"}
        ]}))
        .expect("options");
        assert_eq!(ok[1].option_id, "a2");
        assert_eq!(ok[1].kind, "allow_once");
        let many: Vec<Value> = (0..10_000)
            .map(|i| json!({"optionId": format!("o{i}"), "name": "x", "kind": "allow_once"}))
            .collect();
        let e = permission_options(&json!({ "options": many })).unwrap_err();
        assert!(e.contains("10000 options"), "{e}");
        assert!(
            permission_options(&json!({"options": [{"optionId": "a"}, {"optionId": "a"}]}))
                .is_err()
        );
        assert!(permission_options(&json!({})).is_err());
    }

    #[test]
    fn line_and_limit_pick_lines() {
        let t = "a\nb\nc\n";
        assert_eq!(select_lines(t, None, None), t);
        assert_eq!(select_lines(t, Some(2), None), "b\nc\n");
        assert_eq!(select_lines(t, Some(1), Some(1)), "a\n");
    }
}
