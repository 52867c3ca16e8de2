//! Why a session call was refused, told apart as the API answers it.

use crate::lifecycle::LifecycleError;
use crate::store::sessions::SessionStoreError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no session {0:?} on this agent")]
    NoSession(String),
    #[error("no approval {0:?}")]
    NoApproval(String),
    /// Bad input; `field` is the request's field.
    #[error("{why}")]
    Invalid { field: &'static str, why: String },
    #[error("the prompt is {size} bytes as JSON; at most {max} are accepted")]
    PromptTooLarge { size: usize, max: usize },
    /// Not possible as things stand (a turn runs, the queue decided already, …).
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl From<SessionStoreError> for SessionError {
    fn from(e: SessionStoreError) -> Self {
        match e {
            SessionStoreError::NoSession(id) => SessionError::NoSession(id),
            SessionStoreError::NoApproval(id) => SessionError::NoApproval(id),
            SessionStoreError::Store(e) => SessionError::Store(e),
            other @ (SessionStoreError::TooMany(_)
            | SessionStoreError::TurnRunning
            | SessionStoreError::NoTurn
            | SessionStoreError::Decided(..)) => SessionError::Conflict(other.to_string()),
        }
    }
}
