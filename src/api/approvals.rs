//! `/api/v1/approvals…`: the queue of questions waiting for a person (see
//! [`crate::sessions`]).

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use super::types::conversation::{AnswerApproval, Approval};
use super::AppState;
use crate::teams::command_rules::may_answer_command;
use crate::teams::Principal;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// `pending` or `resolved`; both by default.
    #[serde(default)]
    #[param(pattern = "^(pending|resolved)$")]
    pub state: Option<String>,
    /// Only this agent's (its id).
    #[serde(default)]
    pub agent: Option<String>,
}

/// Approvals, oldest first (at most the last 1000).
#[utoipa::path(get, path = "/api/v1/approvals", tag = "approvals", operation_id = "listApprovals",
    params(ApprovalsQuery),
    responses((status = 200, body = [Approval])))]
pub async fn list(
    State(st): State<AppState>,
    principal: Principal,
    ApiQuery(q): ApiQuery<ApprovalsQuery>,
) -> Result<Json<Vec<Approval>>, ApiError> {
    let pending = match q.state.as_deref() {
        None => None,
        Some("pending") => Some(true),
        Some("resolved") => Some(false),
        Some(_) => {
            return Err(ApiError::invalid_field(
                "state",
                "state is pending or resolved",
            ))
        }
    };
    let all = st.sessions.approvals(pending, q.agent).await?;
    Ok(Json(
        all.into_iter()
            .filter(|a| super::access::sees_agent(&st, &principal, &a.agent_id))
            .map(Approval::from)
            .collect(),
    ))
}

/// One approval.
#[utoipa::path(get, path = "/api/v1/approvals/{aid}", tag = "approvals", operation_id = "getApproval",
    params(("aid" = String, Path, description = "The approval's id")),
    responses((status = 200, body = Approval), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(st): State<AppState>,
    Path(aid): Path<String>,
) -> Result<Json<Approval>, ApiError> {
    Ok(Json(st.sessions.approval(&aid).await?.into()))
}

/// Answers an approval with one of its options, by id. The first answer wins.
#[utoipa::path(post, path = "/api/v1/approvals/{aid}", tag = "approvals", operation_id = "answerApproval",
    request_body = AnswerApproval,
    params(("aid" = String, Path, description = "The approval's id")),
    responses((status = 200, body = Approval),
        (status = 400, body = ErrorBody, description = "The option was not offered"),
        (status = 403, body = ErrorBody, description = "A command's approval, and the caller is not the agent's owner or an admin, or answers with a supervised token"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Already decided, or expired")))]
pub async fn answer(
    State(st): State<AppState>,
    principal: Principal,
    Path(aid): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<AnswerApproval>,
) -> Result<Json<Approval>, ApiError> {
    note.detail(body.option_id.as_str());
    // A command's approval is its agent's owner's (or an admin's) to answer.
    let owner = match st.sessions.approval(&aid).await {
        Ok(a) => st
            .auth
            .directory
            .agent_facts(&a.agent_id)
            .is_some_and(|f| f.owner_id == principal.user_id),
        Err(_) => false,
    };
    let may = may_answer_command(principal.requester(owner));
    let a = st
        .sessions
        .answer(&aid, &body.option_id, &principal.actor(), may)
        .await?;
    Ok(Json(a.into()))
}
