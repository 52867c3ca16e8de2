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

use super::{
    Command, Gone, Runner, AFTER_GAP, BATCH, BATCH_BYTES, CANCEL_GRACE, MAX_FILE_REQUESTS,
    MAX_OPEN_APPROVALS, MAX_OPTIONS, WRITE_TIME,
};
use crate::model::sessions::{
    ApprovalKind, ApprovalRecord, EventKind, NewEvent, NoticeKind, OptionRecord,
};
use crate::sessions::harness::{Line, Output};
use crate::sessions::rpc::{self, FromHarness};
use crate::tunnel::conn::{ConnError, SandboxConn, UploadLimit};

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
    /// [`WRITE_TIME`] is taken for stuck. A connection that broke is attached again and the
    /// line sent once more (what sandboxd took before the break was written whole or not at
    /// all: each frame is one write).
    pub(super) async fn send(&mut self, line: Vec<u8>) -> Result<(), Gone> {
        for attempt in 0..2 {
            let Some(h) = self.harness.as_mut() else {
                return Err(Gone::Exited(None));
            };
            match tokio::time::timeout(WRITE_TIME, h.stdin.write(&line)).await {
                Ok(Ok(())) => return Ok(()),
                // Its stdin closed: it is ending; its output will say how.
                Ok(Err(ConnError::StdinClosed)) => return Ok(()),
                Ok(Err(_)) if attempt == 0 => self.reattach().await?,
                Ok(Err(e)) => {
                    return Err(Gone::Lost(format!("The harness could not be reached: {e}")))
                }
                Err(_) => return Err(Gone::Stuck),
            }
        }
        Err(Gone::Stuck)
    }

    /// Writes the events gathered so far, with how far the output was read.
    pub(super) async fn flush(&mut self) {
        if self.pending.is_empty() && self.offset == self.committed {
            return;
        }
        let events = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        // Finished file requests are collected on the way.
        while self.file_tasks.try_join_next().is_some() {}
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
            while let Some(line) = self.backlog.pop_front() {
                if let Some(answer) = self.handle_line(line, Some(id)).await? {
                    self.flush().await;
                    return Ok(answer);
                }
            }
            let queued = self.harness.as_ref().map_or(0, |h| h.output.len());
            if queued == 0 || self.pending.len() >= BATCH || self.pending_bytes >= BATCH_BYTES {
                self.flush().await;
            }
            let Some(h) = self.harness.as_mut() else {
                return Err(Gone::Exited(None));
            };
            let limit = [deadline, self.cancel_deadline, self.after_gap]
                .into_iter()
                .flatten()
                .min();
            let sleep = async {
                match limit {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                out = h.output.recv() => self.on_output(out, Some(id)).await?,
                cmd = self.rx.recv() => self.on_command(cmd).await?,
                _ = sleep => {
                    self.flush().await;
                    if self.cancel_deadline.is_some_and(|t| t <= Instant::now()) {
                        return Err(Gone::CancelIgnored);
                    }
                    if self.after_gap.take().is_some_and(|t| t <= Instant::now()) {
                        return Err(Gone::OutputLost(format!(
                            "The harness said nothing for {} s after part of its output was \
                             lost; its answer may have been in it",
                            AFTER_GAP.as_secs()
                        )));
                    }
                    return Err(Gone::Timeout("no answer in time"));
                }
            }
        }
    }

    /// A command that came while a request waits.
    pub(super) async fn on_command(&mut self, cmd: Option<Command>) -> Result<(), Gone> {
        match cmd {
            Some(Command::Cancel) => self.cancel().await,
            Some(Command::Answer { rpc_id, outcome }) => {
                self.send(rpc::response(
                    rpc_id,
                    Ok(RequestPermissionResponse::new(outcome)),
                ))
                .await
            }
            Some(Command::Reply { process, line }) => {
                let ours = self
                    .harness
                    .as_ref()
                    .is_some_and(|h| h.process.as_str() == process);
                if ours {
                    self.send(line).await?;
                }
                Ok(())
            }
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
        if self.prompt_rpc.is_none() {
            // Cancelled while the harness was being started: the turn ends now, and the
            // harness, half started, with it.
            self.s.cancel_approvals(&self.sid).await;
            return Err(Gone::Stopped);
        }
        if let Some(acp) = self.acp_session.clone() {
            self.send(rpc::notification(
                "session/cancel",
                CancelNotification::new(acp),
            ))
            .await?;
        }
        self.cancel_deadline = Some(Instant::now() + CANCEL_GRACE);
        self.s.cancel_approvals(&self.sid).await;
        Ok(())
    }

    /// One piece of the reader's news: its lines go to the backlog (handled in order by the
    /// caller); an end or a loss of output is the harness gone, for a caller waiting for an
    /// answer.
    pub(super) async fn on_output(
        &mut self,
        out: Option<Output>,
        waiting: Option<i64>,
    ) -> Result<(), Gone> {
        match out {
            Some(Output::Lines(lines)) => {
                self.after_gap = None;
                self.backlog.extend(lines);
                Ok(())
            }
            Some(Output::Gap { from, to }) => {
                self.offset = to;
                let text = format!(
                    "{} bytes of the harness's output were lost before they could be read",
                    to.saturating_sub(from)
                );
                self.pending.push(NewEvent::notice(NoticeKind::Gap, text));
                if waiting.is_some() {
                    // What was lost may have been the answer waited for: a harness that says
                    // nothing more for a while after a loss is taken to have answered into it.
                    self.after_gap = Some(Instant::now() + AFTER_GAP);
                }
                Ok(())
            }
            Some(Output::Exited(info)) => {
                self.flush().await;
                Err(Gone::Exited(Some(info)))
            }
            Some(Output::Lost) | None => {
                self.flush().await;
                self.reattach().await
            }
        }
    }

    /// One line of the harness's: the answer to `waiting` when that is what it is.
    pub(super) async fn handle_line(
        &mut self,
        line: Line,
        waiting: Option<i64>,
    ) -> Result<Option<Result<Value, RpcError>>, Gone> {
        match line {
            Line::Whole(bytes, end) => {
                let answer = self.on_line(&bytes, end, waiting).await;
                self.offset = self.offset.max(end);
                answer
            }
            Line::TooLong(prefix, end) => {
                let answer = self.on_too_long(&prefix, waiting).await;
                self.offset = self.offset.max(end);
                answer
            }
        }
    }

    /// A line over `sessions.update_max_kb`, of which only the start was kept: a request is
    /// refused, an answer to what is waited for ends that wait with an error, anything else
    /// is dropped; each with a notice.
    async fn on_too_long(
        &mut self,
        prefix: &[u8],
        waiting: Option<i64>,
    ) -> Result<Option<Result<Value, RpcError>>, Gone> {
        let max = self.s.lc.config().sessions.update_max_kb;
        let (id, method) = sniff(prefix);
        let what = match &method {
            Some(m) => format!("a {m} message"),
            None => "a message".to_string(),
        };
        self.pending.push(NewEvent::notice(
            NoticeKind::Error,
            format!(
                "The harness sent {what} of more than {max} KiB (sessions.update_max_kb); it \
                 was dropped"
            ),
        ));
        match (id, method) {
            (Some(id), Some(_)) => {
                let error =
                    RpcError::invalid_request().data(format!("messages are limited to {max} KiB"));
                self.send(rpc::response::<()>(id, Err(error))).await?;
                Ok(None)
            }
            (Some(RequestId::Number(n)), None) if Some(n) == waiting => Ok(Some(Err(
                RpcError::internal_error().data(format!("the answer was over {max} KiB")),
            ))),
            _ => Ok(None),
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
        // On from the last whole line read (those in the backlog are handled still); attaching
        // to a process that has ended still reads what it wrote before it did.
        let from = match self.backlog.back() {
            Some(Line::Whole(_, end) | Line::TooLong(_, end)) => *end,
            None => self.offset,
        };
        let (h, _) = crate::sessions::harness::attach(conn, process, from, max_line)
            .await
            .map_err(|_| Gone::Exited(Some(info)))?;
        self.harness = Some(h);
        Ok(())
    }

    /// One whole line from the harness, which ends at output offset `end`.
    async fn on_line(
        &mut self,
        line: &[u8],
        end: u64,
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
                        let event = NewEvent::of(EventKind::Update, update);
                        self.pending_bytes += event.size();
                        self.pending.push(event);
                    }
                }
                Ok(None)
            }
            FromHarness::Request { id, method, params } => {
                self.on_request(id, &method, params, end).await?;
                Ok(None)
            }
        }
    }

    async fn on_request(
        &mut self,
        id: RequestId,
        method: &str,
        params: Value,
        end: u64,
    ) -> Result<(), Gone> {
        match method {
            "session/request_permission" => self.ask(id, params, end).await,
            "fs/read_text_file" | "fs/write_text_file" => {
                let Some((conn, process)) = self
                    .harness
                    .as_ref()
                    .map(|h| (h.conn.clone(), h.process.as_str().to_string()))
                else {
                    return Ok(());
                };
                if self.file_tasks.len() >= MAX_FILE_REQUESTS {
                    let error = RpcError::internal_error().data(format!(
                        "at most {MAX_FILE_REQUESTS} file requests are served at once"
                    ));
                    return self.send(rpc::response::<()>(id, Err(error))).await;
                }
                let config = self.s.lc.config();
                let limits = FileLimits {
                    write_mb: config.server.max_file_mb,
                    read_bytes: config.sessions.update_max_bytes() as u64,
                };
                let s = self.s.clone();
                let sid = self.sid.clone();
                let method = method.to_string();
                // Served on the side, so that a slow file does not hold up the conversation;
                // the answer goes back through the runner's commands, to this process only.
                self.file_tasks.spawn(async move {
                    let line = serve_file(&conn, &method, id, params, limits).await;
                    s.command(&sid, Command::Reply { process, line });
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
    async fn ask(&mut self, id: RequestId, params: Value, end: u64) -> Result<(), Gone> {
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
        // Outside a turn, after its cancel, or past the open questions a turn may have:
        // answered `cancelled` at once (failing closed).
        let refuse = if !self.in_turn || self.cancelled {
            Some(None)
        } else if self.open_approvals >= MAX_OPEN_APPROVALS {
            Some(Some(format!(
                "The harness asked more than {MAX_OPEN_APPROVALS} questions at once; the \
                 others were answered cancelled"
            )))
        } else {
            None
        };
        if let Some(notice) = refuse {
            if let Some(text) = notice {
                self.pending.push(NewEvent::notice(NoticeKind::Error, text));
            }
            let answer = RequestPermissionResponse::new(
                agent_client_protocol_schema::v1::RequestPermissionOutcome::Cancelled,
            );
            return self.send(rpc::response(id, Ok(answer))).await;
        }
        self.open_approvals += 1;
        let now = chrono::Utc::now();
        let timeout = self.s.lc.config().sessions.approval_timeout;
        let expires = now + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::MAX);
        let record = ApprovalRecord {
            id: crate::model::new_agent_id(),
            agent_id: self.agent.clone(),
            kind: ApprovalKind::Permission,
            session_id: Some(self.sid.clone()),
            command: None,
            requester: None,
            tool_call: params.get("toolCall").cloned().unwrap_or(Value::Null),
            options,
            created_at: rfc3339(now),
            expires_at: rfc3339(expires),
            outcome: None,
            option_id: None,
            decided_by: None,
            rpc_id: rpc::id_to_value(&id),
        };
        // Its event follows the updates before it; the offset past its request is recorded with
        // it, so that a restart neither loses nor repeats the question.
        self.flush().await;
        match self
            .s
            .store
            .add_approval(record.clone(), end, self.s.max_transcript())
            .await
        {
            Ok(seq) => {
                self.offset = self.offset.max(end);
                self.committed = self.offset;
                self.s.feeds.grew(&self.sid, seq);
                self.s
                    .lc
                    .announce(crate::events::AgentEvent::Approval(Box::new(
                        record.clone(),
                    )));
                self.s.arm(&record);
                Ok(())
            }
            Err(crate::store::sessions::SessionStoreError::NoSession(_)) => Err(Gone::Stopped),
            Err(e) => Err(Gone::Lost(format!(
                "The question could not be recorded: {e}"
            ))),
        }
    }
}

/// The `id` and `method` of a message of which only the start is known, when they are in it.
fn sniff(prefix: &[u8]) -> (Option<RequestId>, Option<String>) {
    fn after<T: serde::de::DeserializeOwned>(prefix: &[u8], key: &[u8]) -> Option<T> {
        let at = prefix.windows(key.len()).position(|w| w == key)? + key.len();
        let rest = &prefix[at..];
        let colon = rest.iter().position(|&b| !b.is_ascii_whitespace())?;
        if rest[colon] != b':' {
            return None;
        }
        serde_json::Deserializer::from_slice(&rest[colon + 1..])
            .into_iter::<T>()
            .next()?
            .ok()
    }
    let id = after::<Value>(prefix, b"\"id\"")
        .filter(|v| v.is_number() || v.is_string())
        .map(|v| rpc::id_from_value(&v));
    (id, after::<String>(prefix, b"\"method\""))
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

/// How large the files a harness reads and writes may be.
#[derive(Clone, Copy)]
struct FileLimits {
    /// `server.max_file_mb`.
    write_mb: u64,
    /// `sessions.update_max_kb`: the answer is one line the harness must take.
    read_bytes: u64,
}

/// Serves a harness's `fs/read_text_file` or `fs/write_text_file` through the agent's own
/// file access (as the agent account): the answer line.
async fn serve_file(
    conn: &SandboxConn,
    method: &str,
    id: RequestId,
    params: Value,
    limits: FileLimits,
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
            let max = limits.read_bytes;
            if file.size > max {
                return Err(failed(format!(
                    "the file is over {} KiB (sessions.update_max_kb)",
                    max / 1024
                )));
            }
            let mut bytes = Vec::with_capacity(file.size.min(max) as usize);
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
        conn.write_file(path, Box::pin(body), UploadLimit::mb(limits.write_mb))
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
    fn the_start_of_a_long_message_tells_what_it_was() {
        let (id, method) = sniff(br#"{"jsonrpc":"2.0","id":"p1","method":"session/request_permission","params":{"toolCall":{"con"#);
        assert_eq!(id, Some(RequestId::Str("p1".into())));
        assert_eq!(method.as_deref(), Some("session/request_permission"));
        let (id, method) = sniff(br#"{"jsonrpc":"2.0","id": 12,"result":{"stopReason":"end_tu"#);
        assert_eq!((id, method), (Some(RequestId::Number(12)), None));
        assert_eq!(sniff(b"xxxx"), (None, None));
    }

    #[test]
    fn line_and_limit_pick_lines() {
        let t = "a\nb\nc\n";
        assert_eq!(select_lines(t, None, None), t);
        assert_eq!(select_lines(t, Some(2), None), "b\nc\n");
        assert_eq!(select_lines(t, Some(1), Some(1)), "a\n");
    }
}
