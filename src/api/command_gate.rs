//! Holding exec, background process starts and terminal opens for a person's approval before
//! they run: whether one is held is [`crate::teams::command_rules`]'s rule, the waiting is the
//! approvals queue's ([`crate::sessions::command_approvals`]); here they are put together for
//! the handlers, and a refusal becomes its `403`.

use super::access::CredentialEnds;
use super::audit::AuditNote;
use super::error::ApiError;
use super::types::ErrorCode;
use super::AppState;
use crate::model::Agent;
use crate::sessions::command_approvals::{CommandRefused, HeldCommand};
use crate::teams::command_rules::{needs_approval, Verdict};
use crate::teams::Principal;

/// Whether a command may go on now, or waits.
pub(super) enum Gate {
    Run,
    Held(Box<HeldCommand>),
}

/// Whether `principal` owns `agent` (operators are members, not owners: their commands are
/// held like anyone's).
fn owns(principal: &Principal, agent: &Agent) -> bool {
    agent.owner_id == principal.user_id
}

/// Runs `command` (one line) of `agent` for `principal` through the approvals rule: `Run`
/// (noted in `note`, for an audited route, when the token's `allow` approved it in advance), held (its approval
/// already in the queue and announced), or refused at once.
pub(super) async fn gate(
    st: &AppState,
    principal: &Principal,
    agent: &Agent,
    command: String,
    note: Option<&AuditNote>,
) -> Result<Gate, ApiError> {
    let verdict = {
        let config = st.config();
        needs_approval(
            agent.approvals.commands,
            &command,
            &config.approvals.dangerous_patterns,
            principal.requester(owns(principal, agent)),
        )
    };
    match verdict {
        Verdict::Run => Ok(Gate::Run),
        Verdict::Allowed => {
            if let Some(note) = note {
                note.also("approved in advance by the token's approvals: allow");
            }
            Ok(Gate::Run)
        }
        Verdict::Deny => Err(CommandRefused::Denied.into()),
        Verdict::Ask => Ok(Gate::Held(Box::new(
            st.sessions
                .hold_command(&agent.id, command, principal.actor())
                .await?,
        ))),
    }
}

/// [`gate`], then the wait for a held command's decision: `Ok` once it may run.
pub(super) async fn approved(
    st: &AppState,
    principal: &Principal,
    agent: &Agent,
    command: String,
    ends: &CredentialEnds,
    note: Option<&AuditNote>,
) -> Result<(), ApiError> {
    match gate(st, principal, agent, command, note).await? {
        Gate::Run => Ok(()),
        Gate::Held(held) => decided(*held, ends).await,
    }
}

/// A held command's decision, unless the credential that asked ends first: then the wait is
/// dropped (which cancels its approval) and nothing runs, whatever is answered later.
pub(super) async fn decided(held: HeldCommand, ends: &CredentialEnds) -> Result<(), ApiError> {
    let id = held.id().to_string();
    tokio::select! {
        r = held.decision() => Ok(r?),
        () = ends.ended() => Err(CommandRefused::CredentialEnded { id }.into()),
    }
}

impl From<CommandRefused> for ApiError {
    fn from(e: CommandRefused) -> ApiError {
        let code = match e {
            CommandRefused::Rejected { .. } | CommandRefused::Denied => ErrorCode::ApprovalRejected,
            CommandRefused::Expired { .. } | CommandRefused::CredentialEnded { .. } => {
                ErrorCode::ApprovalExpired
            }
        };
        ApiError::new(code, e.to_string())
    }
}
