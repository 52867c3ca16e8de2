//! The client as the agent sees it: where `session/update`s go, and the requests the agent makes
//! of it (`session/request_permission`, `fs/*`), their answers matched back by JSON-RPC id.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use agent_client_protocol_schema::v1::{
    AgentNotification, AgentRequest, ClientResponse, Error, RequestId, SessionId,
    SessionNotification, SessionUpdate,
};
use agent_client_protocol_schema::MethodDispatchError;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::outbox::Outbox;
use crate::wire;

type Waiters = Rc<RefCell<HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>>>;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the client answered with error {}: {}", i32::from(.0.code), .0.message)]
    Refused(Error),
    #[error("the client's answer does not fit the method: {0}")]
    BadAnswer(MethodDispatchError),
    #[error("the agent is shutting down")]
    Gone,
}

#[derive(Clone)]
pub struct Client {
    outbox: Outbox,
    waiters: Waiters,
    next_id: Rc<Cell<i64>>,
}

impl Client {
    pub fn new(outbox: Outbox) -> Client {
        Client {
            outbox,
            waiters: Rc::default(),
            next_id: Rc::new(Cell::new(1)),
        }
    }

    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Sends one `session/update` notification.
    pub async fn update(&self, session_id: &SessionId, update: SessionUpdate) {
        let notification = AgentNotification::SessionNotification(SessionNotification::new(
            session_id.clone(),
            update,
        ));
        let method = notification.method().to_owned();
        self.outbox
            .send(wire::notification(&method, notification))
            .await;
    }

    /// Makes a request of the client and waits for its answer. Dropping the future (a cancelled
    /// turn stops waiting) forgets the request; a late answer is then only logged.
    pub async fn call(&self, request: AgentRequest) -> Result<ClientResponse, CallError> {
        let id = self.next_request_id();
        let method = request.method().to_owned();
        let (waiter, answer) = oneshot::channel();
        self.waiters.borrow_mut().insert(id.clone(), waiter);
        let _forget = ForgetOnDrop {
            waiters: self.waiters.clone(),
            id: id.clone(),
        };
        self.outbox.send(wire::request(id, &method, request)).await;
        match answer.await {
            Ok(Ok(result)) => ClientResponse::from_method_and_result(&method, result)
                .map_err(CallError::BadAnswer),
            Ok(Err(error)) => Err(CallError::Refused(error)),
            Err(_) => Err(CallError::Gone),
        }
    }

    /// Sends a request nobody waits for: its answer is only logged.
    pub async fn call_without_waiting(&self, method: &str, params: Value) {
        let id = self.next_request_id();
        self.outbox.send(wire::request(id, method, params)).await;
    }

    /// Hands the client's answer to the request with this id to whoever waits for it.
    pub fn answer(&self, id: RequestId, result: Result<Value, Error>) {
        let waiter = self.waiters.borrow_mut().remove(&id);
        match (waiter, result) {
            (Some(waiter), result) => {
                // The waiter may have stopped waiting in the meantime; nothing to do then.
                let _ = waiter.send(result);
            }
            (None, Ok(_)) => crate::log!("an answer to request {id}, which nobody waits for"),
            (None, Err(error)) => crate::log!(
                "error {} ({}) in answer to request {id}, which nobody waits for",
                i32::from(error.code),
                error.message
            ),
        }
    }

    fn next_request_id(&self) -> RequestId {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        RequestId::Number(id)
    }
}

struct ForgetOnDrop {
    waiters: Waiters,
    id: RequestId,
}

impl Drop for ForgetOnDrop {
    fn drop(&mut self) {
        self.waiters.borrow_mut().remove(&self.id);
    }
}
