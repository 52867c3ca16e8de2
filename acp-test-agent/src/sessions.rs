//! The sessions open in this process: each one's record, and the cancel switch of its running
//! turn. A session is open once `session/new`, `session/load` or `session/resume` named it in
//! this process; only open sessions take prompts, as the protocol has it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::{Error, SessionId, SessionUpdate};
use tokio::sync::watch;

use crate::store::{new_session_id, SessionRecord, Store, StoreError};

struct OpenSession {
    record: SessionRecord,
    /// Set while a turn runs; sending `true` cancels it.
    running_turn: Option<watch::Sender<bool>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TurnRefused {
    #[error("no open session `{0}`")]
    NotOpen(SessionId),
    #[error("session `{0}` is already in a turn")]
    Busy(SessionId),
}

impl From<TurnRefused> for Error {
    fn from(refused: TurnRefused) -> Error {
        match refused {
            TurnRefused::NotOpen(id) => Error::session_not_found(id),
            TurnRefused::Busy(_) => Error::invalid_request().data(refused.to_string()),
        }
    }
}

impl From<StoreError> for Error {
    fn from(error: StoreError) -> Error {
        match error {
            StoreError::ForeignId(id) | StoreError::Missing(id) => Error::session_not_found(id),
            StoreError::Io { .. } | StoreError::Corrupt { .. } => {
                Error::internal_error().data(error.to_string())
            }
        }
    }
}

pub struct Sessions {
    open: HashMap<SessionId, OpenSession>,
    store: Store,
}

impl Sessions {
    pub fn new(state_dir: &Path) -> Sessions {
        Sessions {
            open: HashMap::new(),
            store: Store::new(state_dir),
        }
    }

    /// Opens a new, empty session; its file is written at once, so it can be reopened after a
    /// restart even before its first turn.
    pub fn create(&mut self, cwd: PathBuf) -> Result<SessionId, StoreError> {
        let record = SessionRecord {
            session_id: new_session_id(),
            cwd,
            history: Vec::new(),
        };
        self.store.save(&record)?;
        let id = record.session_id.clone();
        self.open.insert(
            id.clone(),
            OpenSession {
                record,
                running_turn: None,
            },
        );
        Ok(id)
    }

    /// Opens a session made earlier, in this process or (from its file) in an earlier one, and
    /// returns its history.
    pub fn reopen(&mut self, id: &SessionId) -> Result<Vec<SessionUpdate>, StoreError> {
        if let Some(open) = self.open.get(id) {
            return Ok(open.record.history.clone());
        }
        let record = self.store.load(id)?;
        let history = record.history.clone();
        self.open.insert(
            id.clone(),
            OpenSession {
                record,
                running_turn: None,
            },
        );
        Ok(history)
    }

    /// Marks a turn as running in the session; the receiver sees the cancel switch.
    pub fn start_turn(&mut self, id: &SessionId) -> Result<watch::Receiver<bool>, TurnRefused> {
        let open = self
            .open
            .get_mut(id)
            .ok_or_else(|| TurnRefused::NotOpen(id.clone()))?;
        if open.running_turn.is_some() {
            return Err(TurnRefused::Busy(id.clone()));
        }
        let (switch, cancel) = watch::channel(false);
        open.running_turn = Some(switch);
        Ok(cancel)
    }

    /// Ends the session's turn: its updates join the history, which is saved before the turn is
    /// answered, so a client that restarts the agent right after finds the turn in it.
    pub fn finish_turn(
        &mut self,
        id: &SessionId,
        transcript: Vec<SessionUpdate>,
    ) -> Result<(), StoreError> {
        let Some(open) = self.open.get_mut(id) else {
            return Err(StoreError::Missing(id.clone()));
        };
        open.running_turn = None;
        open.record.history.extend(transcript);
        self.store.save(&open.record)
    }

    /// Cancels the session's running turn; false when none runs.
    pub fn cancel(&mut self, id: &SessionId) -> bool {
        match self
            .open
            .get(id)
            .and_then(|open| open.running_turn.as_ref())
        {
            Some(switch) => {
                switch.send_replace(true);
                true
            }
            None => false,
        }
    }
}
