//! `/api/v1/tokens`: API tokens, each acting for the user who made it, with at most that
//! user's power. The rules are [`crate::teams`]'s.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ErrorBody};
use super::types::{CreateToken, CreatedToken, Token};
use super::AppState;
use crate::teams::{NewToken, Principal};

/// The caller's tokens; an admin's sees everyone's.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "tokens", operation_id = "listTokens",
    responses((status = 200, body = [Token])))]
pub async fn list(State(st): State<AppState>, principal: Principal) -> Json<Vec<Token>> {
    Json(
        st.auth
            .directory
            .tokens_for(&principal)
            .into_iter()
            .map(Into::into)
            .collect(),
    )
}

/// Makes a token for the caller, shown once in the answer.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "tokens", operation_id = "createToken", request_body = CreateToken,
    responses((status = 201, body = CreatedToken),
        (status = 400, body = ErrorBody, description = "A field breaks its rule (`field` names it)"),
        (status = 404, body = ErrorBody, description = "`agents` names an agent that does not exist for the caller (`field`: `agents`)"),
        (status = 403, body = ErrorBody, description = "A scope the caller does not have")))]
pub async fn create(
    State(st): State<AppState>,
    principal: Principal,
    note: AuditNote,
    ApiJson(body): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let known: Vec<(String, String)> = match body.agents {
        Some(_) => st
            .lc
            .list()
            .await?
            .into_iter()
            .filter(|a| super::access::sees_agent(&st, &principal, &a.id))
            .map(|a| (a.id, a.name))
            .collect(),
        None => Vec::new(),
    };
    let new = NewToken {
        name: body.name,
        scopes: body.scopes.into_iter().collect(),
        agents: body.agents,
        expires_in_days: body.expires_in_days,
        supervised: body.supervised,
        approvals: body.approvals,
    };
    let (token, info) = st
        .auth
        .directory
        .create_token(&principal, new, &known)
        .await?;
    note.detail(crate::audit::detail::token(&info));
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token,
            info: info.into(),
        }),
    ))
}

/// Revokes a token: it stops working at once. Another user's token is `404` (an admin may
/// revoke anyone's).
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "tokens", operation_id = "revokeToken",
    params(("id" = String, Path, description = "The token's id")),
    responses((status = 204, description = "Revoked"), (status = 404, body = ErrorBody)))]
pub async fn revoke(
    State(st): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    note: AuditNote,
) -> Result<StatusCode, ApiError> {
    note.detail(format!("token {id}"));
    st.auth.directory.revoke_token(&principal, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
