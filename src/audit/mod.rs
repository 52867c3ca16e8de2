//! The audit log: who did what, to which agent, from where, and how it ended. Entries are kept
//! in the store for `server.audit_retention` and, when `server.audit_log` names a file, also
//! appended to it as JSON lines. Recording never fails the action it records: a store or file
//! error is logged.
//!
//! Who may read which entries is [`visible_to`]'s one rule.

pub mod detail;
mod file;
pub mod query;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

pub use crate::model::audit::{Action, AuditEntry, AuditQuery, Entry, Visible};
use crate::store::{Store, StoreError};
use crate::teams::Principal;
pub use file::JsonLines;
pub use query::{parse, Filters, QueryError, DEFAULT_LIMIT, MAX_LIMIT};

impl Entry {
    /// An entry of `principal`'s action.
    pub fn by(principal: &Principal, action: Action, address: IpAddr, status: u16) -> Entry {
        Entry {
            user_id: Some(principal.user_id.clone()),
            user_name: principal.user_name.clone(),
            token_name: principal.token.as_ref().map(|t| t.name.clone()),
            action,
            agent_id: None,
            agent_name: None,
            detail: None,
            address,
            status,
        }
    }

    /// An entry of someone not (yet) known: a sign-in, with the name tried.
    pub fn anonymous(name: &str, action: Action, address: IpAddr, status: u16) -> Entry {
        Entry {
            user_id: None,
            user_name: detail::clip(name, detail::NAME_CHARS),
            token_name: None,
            action,
            agent_id: None,
            agent_name: None,
            detail: None,
            address,
            status,
        }
    }
}

/// Why the audit log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("the audit log could not be read: {0}")]
    Store(#[from] StoreError),
}

/// The audit log.
pub struct Audit {
    store: Store,
    file: Option<JsonLines>,
}

impl Audit {
    /// The log in `store`, also appending to `file` when one is named (opened now: a path that
    /// cannot be opened is the caller's error to report).
    pub fn open(store: Store, file: Option<&Path>) -> std::io::Result<Audit> {
        let file = file.map(JsonLines::open).transpose()?;
        Ok(Audit { store, file })
    }

    /// Records `entry`, in the store and then in the file. Failures are logged, not returned:
    /// the action already happened.
    pub async fn record(&self, mut entry: Entry) {
        entry.detail = entry.detail.map(|d| detail::clip(&d, detail::MAX_CHARS));
        let kept = match self.store.add_audit_entry(&entry).await {
            Ok(kept) => kept,
            Err(e) => {
                tracing::error!(action = %entry.action, "an audit entry could not be kept: {e}");
                return;
            }
        };
        if let Some(file) = &self.file {
            file.append(&kept).await;
        }
    }

    /// The entries `query` asks for that `principal` may see, newest first.
    pub async fn query(
        &self,
        principal: &Principal,
        mut query: AuditQuery,
    ) -> Result<Vec<AuditEntry>, AuditError> {
        query.visible = visible_to(principal);
        Ok(self.store.audit_entries(query).await?)
    }

    /// Deletes the entries older than `retention`; how many went.
    pub async fn prune(&self, retention: Duration) -> Result<u64, StoreError> {
        let Ok(age) = chrono::Duration::from_std(retention) else {
            return Ok(0);
        };
        let Some(cutoff) = Utc::now().checked_sub_signed(age) else {
            return Ok(0);
        };
        self.store.prune_audit(cutoff).await
    }

    /// Prunes now and every `every`, with the retention `retention()` gives at that moment
    /// (a reload changes it); `None` keeps everything. Runs until aborted.
    pub async fn prune_periodically(
        self: Arc<Self>,
        every: Duration,
        retention: impl Fn() -> Option<Duration> + Send,
    ) {
        loop {
            if let Some(keep) = retention() {
                match self.prune(keep).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(entries = n, "old audit entries pruned"),
                    Err(e) => tracing::error!("pruning the audit log: {e}"),
                }
            }
            tokio::time::sleep(every).await;
        }
    }
}

/// Which entries `principal` may read: admins every entry; anyone else the entries of their
/// own actions and every entry of the agents they own.
pub fn visible_to(principal: &Principal) -> Visible {
    if principal.is_admin() {
        Visible::All
    } else {
        // A token limited to some agents reads of those only: the others do not exist for it.
        match principal.token.as_ref().and_then(|t| t.agents.as_ref()) {
            Some(agents) => {
                Visible::MineOf(principal.user_id.clone(), agents.iter().cloned().collect())
            }
            None => Visible::Mine(principal.user_id.clone()),
        }
    }
}
