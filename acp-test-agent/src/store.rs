//! Session histories on disk, one JSON file per session id under `<state-dir>/sessions/`, so a
//! session outlives the process (the sandbox sleeping and waking) and `session/load` or
//! `session/resume` in a new process finds it.
//!
//! The files are small and written once per turn, with blocking calls: a test agent does not
//! need them off the async thread.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::{SessionId, SessionUpdate};
use serde::{Deserialize, Serialize};

/// What is kept of a session: every update it sent, the user's prompts included (as
/// `user_message_chunk`s), in order. `session/load` replays exactly this.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub session_id: SessionId,
    pub cwd: PathBuf,
    pub history: Vec<SessionUpdate>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The id came from the client; only ids this agent could have made are looked up, so none
    /// can name a path outside the store.
    #[error("`{0}` is not a session id of this agent")]
    ForeignId(SessionId),
    #[error("no session `{0}`")]
    Missing(SessionId),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store {
            dir: state_dir.join("sessions"),
        }
    }

    pub fn load(&self, id: &SessionId) -> Result<SessionRecord, StoreError> {
        let path = self.path(id)?;
        let text = fs::read(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => StoreError::Missing(id.clone()),
            _ => StoreError::Io {
                path: path.clone(),
                source,
            },
        })?;
        serde_json::from_slice(&text).map_err(|source| StoreError::Corrupt { path, source })
    }

    /// Replaces the session's file whole: written beside it, then renamed over it, so a crash
    /// mid-write leaves the previous history rather than half a file.
    pub fn save(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let path = self.path(&record.session_id)?;
        let io_error = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&self.dir).map_err(io_error)?;
        let text = serde_json::to_vec(record).map_err(|source| StoreError::Corrupt {
            path: path.clone(),
            source,
        })?;
        let temporary = path.with_extension("json.tmp");
        let mut file = fs::File::create(&temporary).map_err(io_error)?;
        file.write_all(&text).map_err(io_error)?;
        file.sync_all().map_err(io_error)?;
        fs::rename(&temporary, &path).map_err(io_error)
    }

    fn path(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        if !is_own_id(&id.0) {
            return Err(StoreError::ForeignId(id.clone()));
        }
        Ok(self.dir.join(format!("{}.json", id.0)))
    }
}

const ID_PREFIX: &str = "sess_";

/// A fresh session id: `sess_` and 16 hex digits from `/dev/urandom` (no crate needed for that;
/// the clock and pid stand in where the file is missing, as in a bare chroot).
pub fn new_session_id() -> SessionId {
    let mut bytes = [0u8; 8];
    let from_kernel =
        fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut bytes));
    if from_kernel.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default();
        bytes = ((nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    SessionId::new(format!("{ID_PREFIX}{hex}"))
}

fn is_own_id(id: &str) -> bool {
    id.strip_prefix(ID_PREFIX)
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|byte| byte.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol_schema::v1::{ContentChunk, SessionUpdate};

    #[test]
    fn a_saved_history_loads_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::new(dir.path());
        let id = new_session_id();
        let record = SessionRecord {
            session_id: id.clone(),
            cwd: PathBuf::from("/work"),
            history: vec![
                SessionUpdate::UserMessageChunk(ContentChunk::new("hi".into())),
                SessionUpdate::AgentMessageChunk(ContentChunk::new("hi".into())),
            ],
        };
        store.save(&record).expect("saved");
        let loaded = store.load(&id).expect("loaded");
        assert_eq!(loaded.history, record.history);
        assert_eq!(loaded.cwd, record.cwd);
    }

    #[test]
    fn ids_not_made_here_never_reach_the_filesystem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::new(dir.path());
        for id in ["../../etc/passwd", "sess_0123", "sess_../../../../x", ""] {
            assert!(matches!(
                store.load(&SessionId::new(id)),
                Err(StoreError::ForeignId(_))
            ));
        }
        assert!(matches!(
            store.load(&new_session_id()),
            Err(StoreError::Missing(_))
        ));
    }
}
