//! `/api/v1/agents/{id}/members`, `…/access-token` and `…/join`: who belongs to an agent. Who
//! may call each is the access table's ([`super::access::ROUTES`]); the rules are
//! [`crate::teams::membership`]'s.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ErrorBody};
use super::types::{AccessToken, AddMember, Agent, AgentMember, JoinAgent};
use super::AppState;
use crate::teams::Principal;

/// Longest access token a join may present.
const MAX_ACCESS_TOKEN: usize = 256;

/// The agent's members, by name (the owner is the agent's `owner`, not a member).
#[utoipa::path(get, path = "/api/v1/agents/{id}/members", tag = "access", operation_id = "listMembers",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [AgentMember]), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<AgentMember>>, ApiError> {
    st.lc.get(&id).await?;
    let members = st.auth.directory.members(&id).await?;
    Ok(Json(members.into_iter().map(Into::into).collect()))
}

/// Adds a member, or gives a member another role; the owner's and admins' to do.
#[utoipa::path(post, path = "/api/v1/agents/{id}/members", tag = "access", operation_id = "addMember", request_body = AddMember,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = AgentMember),
        (status = 400, body = ErrorBody, description = "`user` is empty, too long, or the owner (`field`: `user`)"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such user")))]
pub async fn add(
    State(st): State<AppState>,
    Path(id): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<AddMember>,
) -> Result<Json<AgentMember>, ApiError> {
    note.detail(format!("{} as {}", body.user, body.role.as_str()));
    st.lc.get(&id).await?;
    let member = st
        .auth
        .directory
        .add_member(&id, &body.user, body.role)
        .await?;
    Ok(Json(member.into()))
}

/// Removes a member (by the user's id or name); the owner's and admins' to do.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/members/{user}", tag = "access", operation_id = "removeMember",
    params(("id" = String, Path, description = "The agent's id"),
        ("user" = String, Path, description = "The member's user id or name")),
    responses((status = 204, description = "Removed"),
        (status = 404, body = ErrorBody, description = "No such agent, user, or membership")))]
pub async fn remove(
    State(st): State<AppState>,
    Path((id, user)): Path<(String, String)>,
    note: AuditNote,
) -> Result<StatusCode, ApiError> {
    note.detail(user.clone());
    st.lc.get(&id).await?;
    st.auth.directory.remove_member(&id, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Makes a new access token for a protected agent, shown this once (only its hash is kept);
/// the one before stops working. The owner's and admins' to do.
#[utoipa::path(post, path = "/api/v1/agents/{id}/access-token", tag = "access", operation_id = "rotateAccessToken",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 201, body = AccessToken),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent is not `protected`")))]
pub async fn rotate_access_token(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<AccessToken>), ApiError> {
    st.lc.get(&id).await?;
    let access_token = st.auth.directory.rotate_access_token(&id).await?;
    Ok((StatusCode::CREATED, Json(AccessToken { access_token })))
}

/// Joins a protected agent as a `user` member with its access token; answers the agent. The
/// owner and members stay as they are.
#[utoipa::path(post, path = "/api/v1/agents/{id}/join", tag = "access", operation_id = "joinAgent", request_body = JoinAgent,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = Agent),
        (status = 400, body = ErrorBody, description = "`accessToken` is empty or longer than 256 characters"),
        (status = 403, body = ErrorBody, description = "Not the agent's access token (`field`: `accessToken`)"),
        (status = 404, body = ErrorBody, description = "No such agent, or a private one"),
        (status = 409, body = ErrorBody, description = "The agent is not `protected`")))]
pub async fn join(
    State(st): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<JoinAgent>,
) -> Result<Json<Agent>, ApiError> {
    let n = body.access_token.chars().count();
    if n == 0 || n > MAX_ACCESS_TOKEN {
        return Err(ApiError::invalid_field(
            "accessToken",
            format!("accessToken must be 1 to {MAX_ACCESS_TOKEN} characters"),
        ));
    }
    st.lc.get(&id).await?;
    st.auth
        .directory
        .join(&id, &principal, &body.access_token)
        .await?;
    Ok(Json(st.lc.get(&id).await?.into()))
}
