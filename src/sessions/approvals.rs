//! Deciding approvals: by an answer (by option id, never by position), by the timeout, which
//! fails closed (the offered `reject_once`, else `cancelled`), or by a cancel. Whichever comes
//! first wins; the store's guarded update decides which that is. The harness gets the
//! decision through the session's runner.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{RequestPermissionOutcome, SelectedPermissionOutcome};
use chrono::{DateTime, Utc};

use super::runner::Command;
use super::{SessionError, Sessions};
use crate::events::AgentEvent;
use crate::model::sessions::{ApprovalKind, ApprovalRecord, Outcome};

/// Who decided, when no person did.
pub const BY_TIMEOUT: &str = "timeout";
pub const BY_CANCEL: &str = "cancel";
/// A command's approval pending when the server stopped (its request ends with it).
pub const BY_RESTART: &str = "restart";

impl Sessions {
    /// Approvals, oldest first: `pending` only, resolved only, or both; of one agent.
    pub async fn approvals(
        &self,
        pending: Option<bool>,
        agent: Option<String>,
    ) -> Result<Vec<ApprovalRecord>, SessionError> {
        Ok(self.store.approvals(pending, agent, None).await?)
    }

    pub async fn approval(&self, id: &str) -> Result<ApprovalRecord, SessionError> {
        Ok(self.store.approval(id).await?)
    }

    /// Answers approval `id` with `option_id` (one it offered), on behalf of `by`;
    /// `may_answer_commands` says whether `by` may answer a command's
    /// ([`crate::teams::command_rules::may_answer_command`]).
    pub async fn answer(
        self: &Arc<Self>,
        id: &str,
        option_id: &str,
        by: &str,
        may_answer_commands: bool,
    ) -> Result<ApprovalRecord, SessionError> {
        let a = self.store.approval(id).await?;
        if a.kind == ApprovalKind::Command && !may_answer_commands {
            return Err(SessionError::Forbidden(
                "only the agent's owner or an admin (not with a supervised token) answers a \
                 command's approval"
                    .into(),
            ));
        }
        if let Some(o) = a.outcome {
            return Err(SessionError::Conflict(format!(
                "approval {id} was already {}",
                o.as_str()
            )));
        }
        if !a.options.iter().any(|o| o.option_id == option_id) {
            let offered: Vec<&str> = a.options.iter().map(|o| o.option_id.as_str()).collect();
            return Err(SessionError::Invalid {
                field: "optionId",
                why: format!(
                    "option {:?} was not offered; the options are: {}",
                    option_id.chars().take(80).collect::<String>(),
                    offered.join(", ")
                ),
            });
        }
        // Recorded and handed to the harness together, even if the client goes away.
        let me = self.clone();
        let (id, option_id, by) = (id.to_string(), option_id.to_string(), by.to_string());
        tokio::spawn(async move { me.decide(&id, Outcome::Selected, Some(option_id), by).await })
            .await
            .map_err(|e| SessionError::Conflict(format!("the answer was not taken: {e}")))?
    }

    /// Records the decision and tells the harness.
    pub(super) async fn decide(
        &self,
        id: &str,
        outcome: Outcome,
        option_id: Option<String>,
        by: String,
    ) -> Result<ApprovalRecord, SessionError> {
        let (a, seq) = self
            .store
            .resolve_approval(id, outcome, option_id.clone(), by, self.max_transcript())
            .await?;
        if let Some(t) = self
            .timers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        {
            t.abort();
        }
        self.lc.announce(AgentEvent::Approval(Box::new(a.clone())));
        let Some(sid) = &a.session_id else {
            // A command's: its request learns the decision (unless it is gone).
            let waiter = self
                .waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id);
            if let Some(w) = waiter {
                let _ = w.send(a.clone());
            }
            return Ok(a);
        };
        if let Some(seq) = seq {
            self.feeds.grew(sid, seq);
        }
        let answer = match option_id {
            Some(o) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o)),
            None => RequestPermissionOutcome::Cancelled,
        };
        self.command(
            sid,
            Command::Answer {
                rpc_id: super::rpc::id_from_value(&a.rpc_id),
                outcome: answer,
            },
        );
        Ok(a)
    }

    /// Resolves every pending approval of session `sid` `cancelled`.
    pub(super) async fn cancel_approvals(&self, sid: &str) {
        let pending = self
            .store
            .approvals(Some(true), None, Some(sid.to_string()))
            .await
            .unwrap_or_default();
        for a in pending {
            let _ = self
                .decide(&a.id, Outcome::Cancelled, None, BY_CANCEL.to_string())
                .await;
        }
    }

    /// Expires `a` when its time comes, unless it was decided before.
    pub(super) fn arm(self: &Arc<Self>, a: &ApprovalRecord) {
        let due = DateTime::parse_from_rfc3339(&a.expires_at)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|_| Utc::now());
        let wait = (due - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        // Fails closed: the offered "reject once", else a plain `cancelled`.
        let reject = reject_option(a);
        let me = self.clone();
        let id = a.id.clone();
        // Registered before it can run, so that its own removal always finds it.
        let mut timers = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        let task = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            me.timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            let _ = me
                .decide(&id, Outcome::Expired, reject, BY_TIMEOUT.to_string())
                .await;
        });
        timers.insert(a.id.clone(), task.abort_handle());
    }

    /// As the server stops: every held command's approval expires (by `restart`), so nothing of
    /// them runs and their requests end.
    pub async fn expire_held_commands(self: &Arc<Self>) {
        let pending = self
            .store
            .approvals(Some(true), None, None)
            .await
            .unwrap_or_default();
        for a in pending
            .into_iter()
            .filter(|a| a.kind == ApprovalKind::Command)
        {
            let reject = reject_option(&a);
            let _ = self
                .decide(&a.id, Outcome::Expired, reject, BY_RESTART.to_string())
                .await;
        }
    }

    /// At boot: pending approvals of running turns wait on; others can never be answered
    /// (their harness is gone) and are resolved `cancelled`. A command's request went with the
    /// server that held it: its approval expires, so nothing of it ever runs.
    pub(super) async fn rearm_approvals(self: &Arc<Self>) -> Result<(), SessionError> {
        for a in self.store.approvals(Some(true), None, None).await? {
            let Some(sid) = &a.session_id else {
                let reject = reject_option(&a);
                let _ = self
                    .decide(&a.id, Outcome::Expired, reject, BY_RESTART.to_string())
                    .await;
                continue;
            };
            let running = self.store.session(sid).await.is_ok_and(|s| s.running);
            if running {
                self.arm(&a);
            } else {
                let _ = self
                    .decide(&a.id, Outcome::Cancelled, None, BY_CANCEL.to_string())
                    .await;
            }
        }
        Ok(())
    }
}

/// The offered "reject once" option, what an approval that nobody answers resolves to.
fn reject_option(a: &ApprovalRecord) -> Option<String> {
    a.options
        .iter()
        .find(|o| o.kind == "reject_once")
        .map(|o| o.option_id.clone())
}
