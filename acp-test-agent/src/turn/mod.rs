//! One prompt turn: carries out the prompt's command, sending its `session/update`s, and says
//! how the turn ended. A `session/cancel` ends any turn `cancelled`: loops look at the cancel
//! switch before each update, and every wait (for the client's answer, for the cancel itself)
//! races it.

mod fs;
mod tool;

use agent_client_protocol_schema::v1::{
    AgentRequest, ClientResponse, ContentChunk, Error, ErrorCode, FileSystemCapabilities, Plan,
    PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionId, SessionUpdate, StopReason,
};
use tokio::sync::watch;

use crate::client::{CallError, Client};
use crate::script::Command;

/// The method of the request `garbage` sends: no client has it, so it must answer -32601.
pub const UNKNOWN_CLIENT_METHOD: &str = "acp-test-agent/no-such-method";
/// The line `garbage` sends that is not JSON.
pub const NOT_JSON_LINE: &str = "this line is not JSON {";

pub struct Turn {
    session_id: SessionId,
    client: Client,
    /// What the client said in `initialize` it serves of `fs/*`.
    fs: FileSystemCapabilities,
    cancel: watch::Receiver<bool>,
    /// Every update sent, for the session's history.
    transcript: Vec<SessionUpdate>,
}

impl Turn {
    pub fn new(
        session_id: SessionId,
        client: Client,
        fs: FileSystemCapabilities,
        cancel: watch::Receiver<bool>,
    ) -> Turn {
        Turn {
            session_id,
            client,
            fs,
            cancel,
            transcript: Vec::new(),
        }
    }

    /// Runs the command. Returns how the turn ended (a stop reason, or the error `session/prompt`
    /// is answered with) and the updates it sent.
    pub async fn run(
        mut self,
        command: Command,
    ) -> (Result<StopReason, Error>, Vec<SessionUpdate>) {
        let end = self.perform(command).await;
        (end, self.transcript)
    }

    async fn perform(&mut self, command: Command) -> Result<StopReason, Error> {
        match command {
            Command::Echo(text) => {
                self.say(text).await;
            }
            Command::Stream(count) => {
                for index in 1..=count {
                    if self.is_cancelled() {
                        break;
                    }
                    self.say(format!("chunk {index} of {count}\n")).await;
                }
            }
            Command::Think(text) => {
                let thought = ContentChunk::new(text.into());
                self.send(SessionUpdate::AgentThoughtChunk(thought)).await;
            }
            Command::Plan => self.send(SessionUpdate::Plan(test_plan())).await,
            Command::Tool => return self.tool().await,
            Command::Wait => {
                self.say("waiting for session/cancel".to_owned()).await;
                until_cancelled(&mut self.cancel).await;
            }
            Command::Crash(code) => {
                self.say(format!("crashing with exit code {code}")).await;
                match self.client.outbox().exit(code.into()).await {}
            }
            Command::Flood(count) => {
                for index in 1..=count {
                    if self.is_cancelled() {
                        break;
                    }
                    self.say(format!("{index}\n")).await;
                }
            }
            Command::Big(size) => self.say(big_text(size)).await,
            Command::FsRead(path) => self.read_file(path).await,
            Command::FsWrite { path, text } => self.write_file(path, text).await,
            Command::Garbage => {
                let outbox = self.client.outbox();
                outbox.send_line(NOT_JSON_LINE.to_owned()).await;
                let params = serde_json::json!({ "sessionId": self.session_id });
                self.client
                    .call_without_waiting(UNKNOWN_CLIENT_METHOD, params)
                    .await;
                self.say(format!(
                    "sent a line that is not JSON and a request for `{UNKNOWN_CLIENT_METHOD}`"
                ))
                .await;
            }
            Command::Stop(reason) => return Ok(self.ending(reason)),
            Command::Fail(message) => {
                return Err(Error::new(ErrorCode::InternalError.into(), message));
            }
        }
        Ok(self.ending(StopReason::EndTurn))
    }

    /// The stop reason for a turn that got as far as `reason`: a cancel that came in meanwhile
    /// wins, as the protocol asks.
    fn ending(&self, reason: StopReason) -> StopReason {
        if self.is_cancelled() {
            StopReason::Cancelled
        } else {
            reason
        }
    }

    fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    async fn send(&mut self, update: SessionUpdate) {
        self.client.update(&self.session_id, update.clone()).await;
        self.transcript.push(update);
    }

    /// Sends one `agent_message_chunk`.
    async fn say(&mut self, text: String) {
        let chunk = ContentChunk::new(text.into());
        self.send(SessionUpdate::AgentMessageChunk(chunk)).await;
    }

    /// Makes a request of the client; `None` when the turn was cancelled first.
    async fn call(&mut self, request: AgentRequest) -> Option<Result<ClientResponse, CallError>> {
        tokio::select! {
            answer = self.client.call(request) => Some(answer),
            () = until_cancelled(&mut self.cancel) => None,
        }
    }
}

/// Resolves once the turn's cancel switch is on (or its session is gone).
async fn until_cancelled(cancel: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which ends the wait just the same.
    let _ = cancel.wait_for(|cancelled| *cancelled).await;
}

fn test_plan() -> Plan {
    Plan::new(vec![
        PlanEntry::new(
            "Read the prompt",
            PlanEntryPriority::High,
            PlanEntryStatus::Completed,
        ),
        PlanEntry::new(
            "Make a plan",
            PlanEntryPriority::Medium,
            PlanEntryStatus::InProgress,
        ),
        PlanEntry::new(
            "Carry it out",
            PlanEntryPriority::Low,
            PlanEntryStatus::Pending,
        ),
    ])
}

/// `size` bytes of `abc…xyzabc…`: a pattern, so a client that drops or reorders bytes shows.
fn big_text(size: usize) -> String {
    (b'a'..=b'z').cycle().take(size).map(char::from).collect()
}
