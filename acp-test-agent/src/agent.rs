//! The agent's side of the protocol: each line from the client is decoded and handled here.
//! Requests are answered in order on this task, except `session/prompt`, whose turn runs on a
//! task of its own so that `session/cancel` and the client's answers keep coming in meanwhile.

use std::cell::RefCell;
use std::rc::Rc;

use agent_client_protocol_schema::v1::{
    AgentCapabilities, AgentResponse, ClientCapabilities, ClientNotification, ClientRequest,
    ContentBlock, ContentChunk, Error, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, LoadSessionResponse, NewSessionRequest, NewSessionResponse, PromptRequest,
    PromptResponse, RequestId, ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities,
    SessionResumeCapabilities, SessionUpdate,
};
use agent_client_protocol_schema::MethodDispatchError;
use agent_client_protocol_schema::ProtocolVersion;
use serde_json::Value;

use crate::client::Client;
use crate::options::Restore;
use crate::script::Command;
use crate::sessions::Sessions;
use crate::turn::Turn;
use crate::wire::{self, Incoming};

#[derive(Clone)]
pub struct Agent {
    restore: Restore,
    client: Client,
    state: Rc<RefCell<State>>,
}

struct State {
    /// What the client offered in `initialize`; `None` until then.
    client_capabilities: Option<ClientCapabilities>,
    sessions: Sessions,
}

impl Agent {
    pub fn new(restore: Restore, sessions: Sessions, client: Client) -> Agent {
        Agent {
            restore,
            client,
            state: Rc::new(RefCell::new(State {
                client_capabilities: None,
                sessions,
            })),
        }
    }

    pub async fn handle_line(&self, line: &[u8]) {
        match wire::decode(line) {
            Ok(Incoming::Request { id, method, params }) => self.request(id, &method, params).await,
            Ok(Incoming::Notification { method, params }) => self.notification(&method, &params),
            Ok(Incoming::Response { id, result }) => self.client.answer(id, result),
            Err(malformed) => {
                crate::log!("a bad line from the client: {malformed}");
                let (id, error) = malformed.into_response();
                self.reply(id, Err(error)).await;
            }
        }
    }

    async fn request(&self, id: RequestId, method: &str, params: Value) {
        let request = match ClientRequest::from_method_and_params(method, &params) {
            Ok(request) => request,
            Err(error) => return self.reply(id, Err(dispatch_error(error))).await,
        };
        let initialized = self.state.borrow().client_capabilities.is_some();
        if !initialized && !matches!(request, ClientRequest::InitializeRequest(_)) {
            let error = Error::invalid_request().data(format!("{method} before initialize"));
            return self.reply(id, Err(error)).await;
        }
        match request {
            ClientRequest::InitializeRequest(request) => {
                let answer = self.initialize(request);
                self.reply(id, Ok(AgentResponse::InitializeResponse(answer)))
                    .await;
            }
            ClientRequest::NewSessionRequest(request) => {
                let answer = self
                    .new_session(request)
                    .map(AgentResponse::NewSessionResponse);
                self.reply(id, answer).await;
            }
            ClientRequest::LoadSessionRequest(request) if self.restore.offers_load() => {
                let answer = self.load_session(request).await;
                self.reply(id, answer.map(AgentResponse::LoadSessionResponse))
                    .await;
            }
            ClientRequest::ResumeSessionRequest(request) if self.restore.offers_resume() => {
                let answer = self.resume_session(request);
                self.reply(id, answer.map(AgentResponse::ResumeSessionResponse))
                    .await;
            }
            ClientRequest::PromptRequest(request) => self.prompt(id, request).await,
            // Everything else this agent does not offer, `session/load` and `session/resume`
            // included when `initialize` did not advertise them.
            _ => {
                let error = Error::method_not_found().data(format!("{method} is not offered"));
                self.reply(id, Err(error)).await;
            }
        }
    }

    fn notification(&self, method: &str, params: &Value) {
        match ClientNotification::from_method_and_params(method, params) {
            Ok(ClientNotification::CancelNotification(cancel)) => {
                let cancelled = self.state.borrow_mut().sessions.cancel(&cancel.session_id);
                if !cancelled {
                    crate::log!(
                        "session/cancel for {}, which has no turn running",
                        cancel.session_id
                    );
                }
            }
            Ok(_) => crate::log!("ignored notification {method}"),
            Err(error) => crate::log!("ignored notification: {error}"),
        }
    }

    fn initialize(&self, request: InitializeRequest) -> InitializeResponse {
        crate::log!(
            "initialize: protocol version {} from {}",
            request.protocol_version,
            request
                .client_info
                .as_ref()
                .map_or("an unnamed client", |info| info.name.as_str())
        );
        self.state.borrow_mut().client_capabilities = Some(request.client_capabilities);
        let mut sessions = SessionCapabilities::new();
        if self.restore.offers_resume() {
            sessions = sessions.resume(SessionResumeCapabilities::new());
        }
        let capabilities = AgentCapabilities::new()
            .load_session(self.restore.offers_load())
            .session_capabilities(sessions);
        // Version 1 is the only one this agent speaks; a client that wants another disconnects.
        InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .agent_info(
                Implementation::new("acp-test-agent", env!("CARGO_PKG_VERSION"))
                    .title("agenthold's ACP test agent"),
            )
    }

    fn new_session(&self, request: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        check_absolute(&request.cwd)?;
        // MCP servers are accepted and not connected to: this agent has no model to give them.
        let created = self.state.borrow_mut().sessions.create(request.cwd);
        let id = created?;
        crate::log!(
            "session/new: {id} ({} MCP servers)",
            request.mcp_servers.len()
        );
        Ok(NewSessionResponse::new(id))
    }

    /// Replays the history as `session/update`s, then answers.
    async fn load_session(
        &self,
        request: LoadSessionRequest,
    ) -> Result<LoadSessionResponse, Error> {
        check_absolute(&request.cwd)?;
        let reopened = self.state.borrow_mut().sessions.reopen(&request.session_id);
        let history = reopened?;
        crate::log!(
            "session/load: {} ({} updates)",
            request.session_id,
            history.len()
        );
        for update in history {
            self.client.update(&request.session_id, update).await;
        }
        Ok(LoadSessionResponse::new())
    }

    /// Reopens the session without replaying anything.
    fn resume_session(
        &self,
        request: ResumeSessionRequest,
    ) -> Result<ResumeSessionResponse, Error> {
        check_absolute(&request.cwd)?;
        let reopened = self.state.borrow_mut().sessions.reopen(&request.session_id);
        reopened?;
        crate::log!("session/resume: {}", request.session_id);
        Ok(ResumeSessionResponse::new())
    }

    /// Starts the prompt's turn on its own task; the turn answers the request when it ends.
    async fn prompt(&self, id: RequestId, request: PromptRequest) {
        let command = match Command::parse(&prompt_text(&request.prompt)) {
            Ok(command) => command,
            Err(error) => {
                let error = Error::invalid_params().data(error.to_string());
                return self.reply(id, Err(error)).await;
            }
        };
        let session_id = request.session_id;
        // The turn is registered before this returns, so a `session/cancel` on the next line
        // already finds it.
        let started = self.state.borrow_mut().sessions.start_turn(&session_id);
        let cancel = match started {
            Ok(cancel) => cancel,
            Err(refused) => return self.reply(id, Err(refused.into())).await,
        };
        let fs = self
            .state
            .borrow()
            .client_capabilities
            .as_ref()
            .map(|capabilities| capabilities.fs.clone())
            .unwrap_or_default();
        let turn = Turn::new(session_id.clone(), self.client.clone(), fs, cancel);
        // The history keeps the user's side too, as `session/load` must replay it.
        let mut history: Vec<SessionUpdate> = request
            .prompt
            .into_iter()
            .map(|block| SessionUpdate::UserMessageChunk(ContentChunk::new(block)))
            .collect();
        let agent = self.clone();
        tokio::task::spawn_local(async move {
            let (end, transcript) = turn.run(command).await;
            history.extend(transcript);
            let saved = agent
                .state
                .borrow_mut()
                .sessions
                .finish_turn(&session_id, history);
            if let Err(error) = saved {
                crate::log!("the history of {session_id} was not saved: {error}");
            }
            let answer =
                end.map(|reason| AgentResponse::PromptResponse(PromptResponse::new(reason)));
            agent.reply(id, answer).await;
        });
    }

    async fn reply(&self, id: RequestId, answer: Result<AgentResponse, Error>) {
        self.client.outbox().send(wire::response(id, answer)).await;
    }
}

/// The text of a prompt: its text blocks, one after another on lines of their own. Other
/// blocks (images, resources) have no say in what the turn does.
fn prompt_text(prompt: &[ContentBlock]) -> String {
    let texts: Vec<&str> = prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

fn check_absolute(cwd: &std::path::Path) -> Result<(), Error> {
    if cwd.is_absolute() {
        Ok(())
    } else {
        Err(Error::invalid_params().data(format!("cwd `{}` is not absolute", cwd.display())))
    }
}

fn dispatch_error(error: MethodDispatchError) -> Error {
    match error {
        MethodDispatchError::UnknownMethod { method } => {
            Error::method_not_found().data(format!("no method {method}"))
        }
        MethodDispatchError::InvalidPayload { method, source } => {
            Error::invalid_params().data(format!("{method}: {source}"))
        }
        other => Error::invalid_request().data(other.to_string()),
    }
}
