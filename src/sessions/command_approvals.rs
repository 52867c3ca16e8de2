//! Commands (exec, background processes, terminal opens) held for a person's answer: each waits
//! as an approval of kind `command` in the same queue as the harnesses' permission requests,
//! answered, expired and announced the same way, and runs only when someone chose `allow`.
//! Whether a command is held at all is [`crate::teams::command_rules`]'s to say.

use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use serde_json::Value;
use tokio::sync::oneshot;

use super::approvals::BY_CANCEL;
use super::{SessionError, Sessions};
use crate::events::AgentEvent;
use crate::model::sessions::{ApprovalKind, ApprovalRecord, OptionRecord, Outcome};

/// The option that lets the command run once.
pub const ALLOW: &str = "allow";
/// The option that refuses it.
pub const REJECT: &str = "reject";

/// Why a held command did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandRefused {
    #[error("the command waited for approval {id} and {by} rejected it; nothing was run")]
    Rejected { id: String, by: String },
    #[error(
        "the command needs approval and this token answers every approval no (its approvals \
         is deny); nothing was run"
    )]
    Denied,
    #[error(
        "the command waited for approval {id} and nobody answered within \
         sessions.approval_timeout; nothing was run"
    )]
    Expired { id: String },
    #[error(
        "the credential that asked for command approval {id} ended (revoked, expired, or its user \
         lost power) while it waited; nothing was run"
    )]
    CredentialEnded { id: String },
}

/// A command waiting for its approval's decision. Dropped undecided (its request went away),
/// its approval is resolved `cancelled`, so a later answer cannot run a command nobody waits
/// for.
pub struct HeldCommand {
    sessions: Arc<Sessions>,
    approval: ApprovalRecord,
    answer: Option<oneshot::Receiver<ApprovalRecord>>,
}

fn options() -> Vec<OptionRecord> {
    vec![
        OptionRecord {
            option_id: ALLOW.into(),
            name: "Allow".into(),
            kind: "allow_once".into(),
        },
        OptionRecord {
            option_id: REJECT.into(),
            name: "Reject".into(),
            kind: "reject_once".into(),
        },
    ]
}

impl Sessions {
    /// Puts `command` of agent `agent_id`, asked for by `requester`, in the approvals queue.
    pub async fn hold_command(
        self: &Arc<Self>,
        agent_id: &str,
        command: String,
        requester: String,
    ) -> Result<HeldCommand, SessionError> {
        let now = Utc::now();
        let timeout = self.lc.config().sessions.approval_timeout;
        let expires = now + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::MAX);
        let approval = ApprovalRecord {
            id: crate::model::new_agent_id(),
            agent_id: agent_id.to_string(),
            kind: ApprovalKind::Command,
            session_id: None,
            command: Some(command),
            requester: Some(requester),
            tool_call: Value::Null,
            options: options(),
            created_at: now.to_rfc3339_opts(SecondsFormat::Micros, true),
            expires_at: expires.to_rfc3339_opts(SecondsFormat::Micros, true),
            outcome: None,
            option_id: None,
            decided_by: None,
            rpc_id: Value::Null,
        };
        let (tx, rx) = oneshot::channel();
        // Waiting before anyone can answer, so that no decision finds nobody to tell.
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(approval.id.clone(), tx);
        let held = HeldCommand {
            sessions: self.clone(),
            approval: approval.clone(),
            answer: Some(rx),
        };
        self.store.add_command_approval(approval.clone()).await?;
        tracing::info!(approval = %approval.id, agent = agent_id, "a command waits for approval");
        self.arm(&approval);
        self.lc.announce(AgentEvent::Approval(Box::new(approval)));
        Ok(held)
    }
}

impl HeldCommand {
    pub fn approval(&self) -> &ApprovalRecord {
        &self.approval
    }

    /// Waits for the decision: `Ok` when someone chose `allow`; refused otherwise (rejected,
    /// expired, or the server lost track of it, which counts as expired: nothing runs).
    /// The approval's id.
    pub fn id(&self) -> &str {
        &self.approval.id
    }

    pub async fn decision(mut self) -> Result<(), CommandRefused> {
        let id = self.approval.id.clone();
        // Left in place while waiting: dropped here, the wait cancels its approval.
        let got = match self.answer.as_mut() {
            Some(rx) => rx.await.ok(),
            None => None,
        };
        self.answer = None;
        let Some(a) = got else {
            return Err(CommandRefused::Expired { id });
        };
        match (a.outcome, a.option_id.as_deref()) {
            (Some(Outcome::Selected), Some(ALLOW)) => Ok(()),
            (Some(Outcome::Selected), _) => Err(CommandRefused::Rejected {
                id,
                by: a.decided_by.unwrap_or_default(),
            }),
            _ => Err(CommandRefused::Expired { id }),
        }
    }
}

impl Drop for HeldCommand {
    fn drop(&mut self) {
        if self.answer.is_none() {
            return;
        }
        let id = self.approval.id.clone();
        self.sessions
            .waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let sessions = self.sessions.clone();
        rt.spawn(async move {
            // Already decided is fine: then nothing is left to cancel.
            let _ = sessions
                .decide(&id, Outcome::Cancelled, None, BY_CANCEL.to_string())
                .await;
        });
    }
}
