//! Runs the built agent as a child process and plays the client: JSON-RPC over its stdio, the
//! messages built and read with the schema crate's types, a deadline on every read.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1::{
    AgentRequest, CancelNotification, ClientCapabilities, ContentBlock, Error, ErrorCode,
    FileSystemCapabilities, InitializeRequest, InitializeResponse, JsonRpcMessage,
    NewSessionRequest, NewSessionResponse, Notification, PromptRequest, PromptResponse, Request,
    RequestId, Response, SessionId, SessionNotification, SessionUpdate,
};
use agent_client_protocol_schema::ProtocolVersion;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// How long any one read may take. Generous: the machine may be busy with other builds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// One message from the agent.
#[derive(Debug)]
pub enum Message {
    /// A request of the client (`session/request_permission`, `fs/*`, or anything else).
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Update(Box<SessionNotification>),
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
}

impl Message {
    /// The agent's request, typed by its method.
    pub fn into_agent_request(self) -> (RequestId, AgentRequest) {
        match self {
            Message::Request { id, method, params } => {
                let request = AgentRequest::from_method_and_params(&method, &params)
                    .unwrap_or_else(|error| panic!("agent request {method}: {error}"));
                (id, request)
            }
            other => panic!("expected a request from the agent, got {other:?}"),
        }
    }
}

/// A finished turn: the updates it sent and how `session/prompt` was answered.
#[derive(Debug)]
pub struct TurnResult {
    pub updates: Vec<SessionUpdate>,
    pub answer: Result<PromptResponse, Error>,
}

impl TurnResult {
    pub fn stop_reason(&self) -> agent_client_protocol_schema::v1::StopReason {
        match &self.answer {
            Ok(response) => response.stop_reason,
            Err(error) => panic!("the prompt failed: {error:?}"),
        }
    }

    /// The texts of the turn's `agent_message_chunk`s.
    pub fn said(&self) -> Vec<String> {
        self.updates
            .iter()
            .filter_map(said)
            .map(str::to_owned)
            .collect()
    }
}

/// The text of an `agent_message_chunk`; `None` for any other update.
pub fn said(update: &SessionUpdate) -> Option<&str> {
    match update {
        SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
            ContentBlock::Text(text) => Some(&text.text),
            other => panic!("a chunk that is not text: {other:?}"),
        },
        _ => None,
    }
}

pub struct AgentProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Lines of stdout; `None` once it closed.
    lines: mpsc::Receiver<Option<String>>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
}

impl AgentProcess {
    pub fn start(state_dir: &Path, args: &[&str]) -> AgentProcess {
        // ACP_TEST_AGENT_BIN runs the suite against another build, such as the static one of
        // scripts/build-acp-test-agent.sh.
        let binary = std::env::var_os("ACP_TEST_AGENT_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_acp-test-agent").into());
        let mut child = Command::new(binary)
            .arg("--state-dir")
            .arg(state_dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the agent starts");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match stdout.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = sender.send(None);
                        return;
                    }
                    Ok(_) => {
                        if sender.send(Some(line)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        // Kept to show with a failing test's output.
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut child_stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let log = stderr.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while matches!(child_stderr.read_line(&mut line), Ok(n) if n > 0) {
                log.lock().expect("log").push_str(&line);
                line.clear();
            }
        });
        AgentProcess {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            next_id: 1,
        }
    }

    /// Starts an agent and initializes it, offering both `fs/*` methods.
    pub fn initialized(state_dir: &Path, args: &[&str]) -> AgentProcess {
        let mut agent = AgentProcess::start(state_dir, args);
        agent.initialize(
            ClientCapabilities::new().fs(FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true)),
        );
        agent
    }

    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .expect("the agent reads stdin");
        stdin.flush().expect("flushed");
    }

    fn send<M: Serialize>(&mut self, message: M) {
        let line = serde_json::to_string(&JsonRpcMessage::wrap(message)).expect("encoded");
        self.send_line(&line);
    }

    pub fn request(&mut self, method: &str, params: impl Serialize) -> RequestId {
        let id = RequestId::Number(self.next_id);
        self.next_id += 1;
        self.send(Request {
            id: id.clone(),
            method: method.into(),
            params: Some(params),
        });
        id
    }

    pub fn notify(&mut self, method: &str, params: impl Serialize) {
        self.send(Notification {
            method: method.into(),
            params: Some(params),
        });
    }

    pub fn answer<R: Serialize>(&mut self, id: RequestId, result: Result<R, Error>) {
        self.send(Response::new(id, result));
    }

    pub fn cancel(&mut self, session: &SessionId) {
        self.notify("session/cancel", CancelNotification::new(session.clone()));
    }

    /// The next line of stdout, as it came; `None` when stdout closed.
    pub fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!("no line from the agent in {DEADLINE:?}"),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    pub fn next_message(&mut self) -> Message {
        let line = self.next_line().expect("a message, not the end of stdout");
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
        match (value.get("method"), value.get("id")) {
            (Some(method), Some(id)) => Message::Request {
                id: parse(id.clone()),
                method: method.as_str().expect("a method name").to_owned(),
                params: value.get("params").cloned().unwrap_or(Value::Null),
            },
            (Some(method), None) => {
                assert_eq!(method, "session/update", "{line}");
                Message::Update(Box::new(parse(value["params"].clone())))
            }
            _ => match parse::<Response<Value>>(value) {
                Response::Result { id, result } => Message::Response {
                    id,
                    result: Ok(result),
                },
                Response::Error { id, error } => Message::Response {
                    id,
                    result: Err(error),
                },
            },
        }
    }

    /// The answer to request `id`, which must be the next message.
    pub fn response(&mut self, id: &RequestId) -> Result<Value, Error> {
        match self.next_message() {
            Message::Response {
                id: answered,
                result,
            } if &answered == id => result,
            other => panic!("expected the answer to request {id}, got {other:?}"),
        }
    }

    /// Makes a request and returns its answer, which must be the next message.
    pub fn call(&mut self, method: &str, params: impl Serialize) -> Result<Value, Error> {
        let id = self.request(method, params);
        self.response(&id)
    }

    /// Like `call`, for a request that must fail: its error code.
    pub fn call_error(&mut self, method: &str, params: impl Serialize) -> ErrorCode {
        match self.call(method, params) {
            Ok(result) => panic!("{method} succeeded: {result}"),
            Err(error) => error.code,
        }
    }

    pub fn initialize(&mut self, capabilities: ClientCapabilities) -> InitializeResponse {
        let request = InitializeRequest::new(ProtocolVersion::V1).client_capabilities(capabilities);
        parse(self.call("initialize", request).expect("initialize"))
    }

    pub fn new_session(&mut self, cwd: &Path) -> SessionId {
        let answer: NewSessionResponse = parse(
            self.call("session/new", NewSessionRequest::new(cwd))
                .expect("session/new"),
        );
        answer.session_id
    }

    pub fn prompt(&mut self, session: &SessionId, text: &str) -> RequestId {
        self.request(
            "session/prompt",
            PromptRequest::new(session.clone(), vec![text.into()]),
        )
    }

    /// The next update, which must be one of `session`'s.
    pub fn next_update(&mut self, session: &SessionId) -> SessionUpdate {
        match self.next_message() {
            Message::Update(notification) if &notification.session_id == session => {
                notification.update
            }
            other => panic!("expected an update of {session}, got {other:?}"),
        }
    }

    /// Reads the turn of prompt `id` to its end: its updates, then its answer. The agent must not
    /// make a request of the client meanwhile.
    pub fn finish_turn(&mut self, id: &RequestId) -> TurnResult {
        let mut updates = Vec::new();
        loop {
            match self.next_message() {
                Message::Update(notification) => updates.push(notification.update),
                Message::Response {
                    id: answered,
                    result,
                } if &answered == id => {
                    return TurnResult {
                        updates,
                        answer: result.map(parse),
                    };
                }
                other => panic!("unexpected during the turn: {other:?}"),
            }
        }
    }

    /// Sends a prompt and reads its turn to the end.
    pub fn turn(&mut self, session: &SessionId, text: &str) -> TurnResult {
        let id = self.prompt(session, text);
        self.finish_turn(&id)
    }

    /// Closes the agent's stdin, which ends it.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Reads stdout to its end, which must come without another message, then the exit status.
    pub fn exit_status(&mut self) -> ExitStatus {
        if let Some(line) = self.next_line() {
            panic!("expected the end of stdout, got {line}");
        }
        // stdout closes as the process exits; the wait is short.
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the agent did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes stdin and checks the agent then exits cleanly.
    pub fn stop(mut self) {
        self.close_stdin();
        let status = self.exit_status();
        assert!(status.success(), "{status}");
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- the agent's stderr ---\n{}",
                self.stderr
                    .lock()
                    .map(|log| log.clone())
                    .unwrap_or_default()
            );
        }
    }
}

/// Parses a JSON value into a schema type, naming the value when it does not fit.
pub fn parse<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value.clone()).unwrap_or_else(|error| panic!("{error}: {value}"))
}
