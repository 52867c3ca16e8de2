//! `/api/v1/users` and `/api/v1/me`. The rules (names, passwords, the last admin) are
//! [`crate::teams`]'s; who may call each route is [`super::access`]'s.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ErrorBody};
use super::types::{CreateUser, Me, UpdateUser, User};
use super::AppState;
use crate::teams::{NewUser, Principal, UserUpdate};

/// Every user, oldest first (admins only).
#[utoipa::path(get, path = "/api/v1/users", tag = "users", operation_id = "listUsers",
    responses((status = 200, body = [User])))]
pub async fn list(State(st): State<AppState>) -> Json<Vec<User>> {
    Json(
        st.auth
            .directory
            .users()
            .into_iter()
            .map(Into::into)
            .collect(),
    )
}

/// Creates a user (admins only).
#[utoipa::path(post, path = "/api/v1/users", tag = "users", operation_id = "createUser", request_body = CreateUser,
    responses((status = 201, body = User),
        (status = 400, body = ErrorBody, description = "The name or the password breaks its rule (`field` names it)"),
        (status = 409, body = ErrorBody, description = "The name is taken")))]
pub async fn create(
    State(st): State<AppState>,
    note: AuditNote,
    ApiJson(body): ApiJson<CreateUser>,
) -> Result<(StatusCode, Json<User>), ApiError> {
    note.detail(format!("{} ({})", body.name, body.role.as_str()));
    let user = st
        .auth
        .directory
        .create_user(NewUser {
            name: body.name,
            role: body.role,
            password: body.password,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(user.into())))
}

/// Changes a user's name, role or password (admins only).
#[utoipa::path(patch, path = "/api/v1/users/{id}", tag = "users", operation_id = "updateUser", request_body = UpdateUser,
    params(("id" = String, Path, description = "The user's id")),
    responses((status = 200, body = User),
        (status = 400, body = ErrorBody, description = "The name or the password breaks its rule (`field` names it)"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The name is taken, the change would leave no admin, or it renames or demotes the built-in `admin`")))]
pub async fn update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<UpdateUser>,
) -> Result<Json<User>, ApiError> {
    note.detail(crate::audit::detail::user_update(
        &id,
        body.name.as_deref(),
        body.role.map(|r| r.as_str()),
        body.password.is_some(),
    ));
    let user = st
        .auth
        .update_user(
            &id,
            UserUpdate {
                name: body.name,
                role: body.role,
                password: body.password,
            },
        )
        .await?;
    Ok(Json(user.into()))
}

/// Deletes a user with their tokens and web sessions (admins only).
#[utoipa::path(delete, path = "/api/v1/users/{id}", tag = "users", operation_id = "deleteUser",
    params(("id" = String, Path, description = "The user's id")),
    responses((status = 204, description = "Deleted"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The last admin, or the built-in `admin`")))]
pub async fn delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    note: AuditNote,
) -> Result<StatusCode, ApiError> {
    note.detail(format!("user {id}"));
    st.auth.directory.delete_user(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who the credential is and what it may do.
#[utoipa::path(get, path = "/api/v1/me", tag = "users", operation_id = "getMe",
    responses((status = 200, body = Me)))]
pub async fn me(State(st): State<AppState>, principal: Principal) -> Result<Json<Me>, ApiError> {
    let dir = &st.auth.directory;
    let user = dir
        .user(&principal.user_id)
        .ok_or_else(ApiError::unauthorized)?;
    let token = principal.token.as_ref().and_then(|t| dir.token(&t.id));
    Ok(Json(Me::new(&principal, user, token)))
}
