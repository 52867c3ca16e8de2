//! `/api/v1/secrets`: set, list and delete secrets (admins). The rules are
//! [`crate::secrets`]'s; no answer ever carries a value.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ErrorBody};
use super::types::{PutSecret, Secret};
use super::AppState;
use crate::secrets::NewSecret;

/// Every secret, by name, without values.
#[utoipa::path(get, path = "/api/v1/secrets", tag = "secrets", operation_id = "listSecrets",
    responses((status = 200, body = [Secret])))]
pub async fn list(State(st): State<AppState>) -> Json<Vec<Secret>> {
    Json(st.secrets.list().into_iter().map(Into::into).collect())
}

/// Sets a secret: a new one (`201`) or a new value and description for one (`200`; the next
/// request through the proxy uses it).
#[utoipa::path(put, path = "/api/v1/secrets/{name}", tag = "secrets", operation_id = "putSecret", request_body = PutSecret,
    params(("name" = String, Path, description = "Like an env variable's name: letters, digits and `_`, not starting with a digit; not `AGENTHOLD_*` nor the proxy's variables")),
    responses((status = 200, body = Secret, description = "Changed"),
        (status = 201, body = Secret, description = "Made"),
        (status = 400, body = ErrorBody, description = "A field breaks its rule (`field` names it)"),
        (status = 409, body = ErrorBody, description = "The server keeps its most secrets already")))]
pub async fn put(
    State(st): State<AppState>,
    Path(name): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<PutSecret>,
) -> Result<(StatusCode, Json<Secret>), ApiError> {
    let hosts: Vec<String> = body.hosts.iter().map(ToString::to_string).collect();
    note.detail(format!("{name} for {}", hosts.join(", ")));
    let new = NewSecret {
        value: body.value,
        hosts: body.hosts,
        header: body.header,
        format: body.format,
        in_body: body.in_body,
    };
    let (info, created) = st.secrets.put(&name, new).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info.into())))
}

/// Deletes a secret: requests that carry its placeholder are refused from the next one on.
#[utoipa::path(delete, path = "/api/v1/secrets/{name}", tag = "secrets", operation_id = "deleteSecret",
    params(("name" = String, Path, description = "The secret's name")),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(st): State<AppState>,
    Path(name): Path<String>,
    note: AuditNote,
) -> Result<StatusCode, ApiError> {
    note.detail(name.clone());
    st.secrets.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
