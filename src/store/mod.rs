//! The server's state: one SQLite file in WAL mode.
//!
//! rusqlite is blocking, so every method hands its SQL to `spawn_blocking` and one connection,
//! behind a mutex, serialises them. That also makes each method's read-check-write atomic with
//! respect to every other method of the same `Store`.

mod access;
mod agents;
pub mod audit;
mod migrations;
pub mod pool;
pub mod previews;
pub mod secrets;
pub mod sessions;
mod settings;
mod subnets;
pub mod tokens;
pub mod users;
mod web_sessions;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{ffi, Connection};

use crate::agents::spec::SpecError;
use crate::model::AgentState;

pub use subnets::SubnetBook;
pub use tokens::{constant_time_eq, hash_token, new_token, verify_token};

/// Why a store call failed. The first variants are the caller's business (404, 409, …); the
/// rest mean the database itself is in trouble.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("there is no agent with id {0}")]
    NotFound(String),
    #[error("the name {0:?} is already used by another agent")]
    NameTaken(String),
    /// The agent's state does not allow the operation; another request may have just moved it.
    #[error("agent {id} is {state}, which does not allow this")]
    Conflict { id: String, state: AgentState },
    #[error("an agent with id {0} already exists")]
    IdTaken(String),
    #[error("there is no user with id {0}")]
    UserNotFound(String),
    #[error("user {user} is not a member of agent {agent}")]
    MemberNotFound { agent: String, user: String },
    #[error("the name {0:?} is already used by another user")]
    UserNameTaken(String),
    /// The change would leave no admin.
    #[error("this is the last admin: make another user an admin first")]
    LastAdmin,
    #[error("the subnet {0} is already used by another agent")]
    SubnetTaken(String),
    /// A setting that breaks its rule whatever the agent (the request's fault).
    #[error("{why}")]
    BadChange { field: &'static str, why: String },
    /// A change the agent as it is cannot take (its home cannot shrink): a conflict with its
    /// current state, which the same request may not meet on another agent.
    #[error("{why}")]
    Unfit { field: &'static str, why: String },
    /// A value the database cannot hold (for example a number beyond SQLite's 64-bit integers).
    #[error("{0}")]
    Invalid(String),
    #[error("the database is damaged: {0}")]
    Corrupt(String),
    #[error(
        "{path} has schema version {found}, but this agenthold knows only up to {supported}: \
         it was written by a newer agenthold; run that version, or restore a backup"
    )]
    Newer {
        path: String,
        found: i64,
        supported: i64,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("a database task died: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("cannot create the data directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<SpecError> for StoreError {
    fn from(e: SpecError) -> StoreError {
        StoreError::BadChange {
            field: e.field,
            why: e.why,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A handle on the database; cheap to clone, all clones share one connection.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    path: Option<PathBuf>,
    /// Each agent's owner, policy and members, mirrored in memory: every request on an agent
    /// and every event checks them (see [`access`]).
    facts: access::FactsMirror,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// How long a write waits for another process's lock before giving up with "database is locked".
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

impl Store {
    /// Opens (creating if needed) the database at `path` and its directory, and brings its schema
    /// up to date.
    pub async fn open(path: &Path) -> Result<Store> {
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let conn = open_file(&path)?;
            let facts = access::FactsMirror::load(&conn)?;
            Ok(Store {
                conn: Arc::new(Mutex::new(conn)),
                path: Some(path),
                facts,
            })
        })
        .await?
    }

    /// A private database in memory, gone when the last clone drops; for tests.
    pub async fn open_in_memory() -> Result<Store> {
        tokio::task::spawn_blocking(|| {
            let mut conn = Connection::open_in_memory()?;
            configure(&mut conn, ":memory:")?;
            let facts = access::FactsMirror::load(&conn)?;
            Ok(Store {
                conn: Arc::new(Mutex::new(conn)),
                path: None,
                facts,
            })
        })
        .await?
    }

    /// Runs `f` on the connection in the blocking pool.
    async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            // A panic in an earlier call rolled its transaction back while unwinding, so the
            // connection is consistent and a poisoned lock is safe to reuse.
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut conn)
        })
        .await?
    }
}

fn open_file(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            use std::os::unix::fs::DirBuilderExt;
            // The database holds token hashes and agent settings: nobody else needs to read it.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| StoreError::Io {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
    }
    let shown = path.display().to_string();
    let mut conn = Connection::open(path).map_err(|e| explain_open_error(&shown, e))?;
    configure(&mut conn, &shown).map_err(|e| match e {
        StoreError::Sqlite(e) => explain_open_error(&shown, e),
        other => other,
    })?;
    Ok(conn)
}

fn configure(conn: &mut Connection, shown: &str) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // WAL lets readers (other processes, backups) run beside the writer; NORMAL sync is
    // crash-safe under WAL and loses at most the last commits on power loss.
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") && shown != ":memory:" {
        tracing::warn!(
            path = shown,
            mode,
            "the database could not switch to WAL mode (a network filesystem?); \
             it works, but other readers will block writes"
        );
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    migrations::migrate(conn, shown)
}

fn explain_open_error(shown: &str, e: rusqlite::Error) -> StoreError {
    match sqlite_code(&e) {
        Some(ffi::ErrorCode::NotADatabase) | Some(ffi::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(format!(
                "{shown} is not an SQLite database, or it is damaged ({e}); move it aside to \
                 start with an empty database, or restore a backup"
            ))
        }
        _ => StoreError::Sqlite(e),
    }
}

fn sqlite_code(e: &rusqlite::Error) -> Option<ffi::ErrorCode> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        _ => None,
    }
}

/// For a UNIQUE or PRIMARY KEY violation, the `table.column` it was on.
fn unique_violation(e: &rusqlite::Error) -> Option<&str> {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(msg))
            if f.extended_code == ffi::SQLITE_CONSTRAINT_UNIQUE
                || f.extended_code == ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
        {
            msg.strip_prefix("UNIQUE constraint failed: ")
        }
        _ => None,
    }
}

/// Timestamps are stored as fixed-width RFC 3339 UTC text so that text order is time order.
pub(crate) fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests;
