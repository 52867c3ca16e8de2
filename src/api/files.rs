//! `/api/v1/agents/{id}/fs/*`: the file browser, over the `fs.*` channels. Reads and writes
//! stream; a write that does not arrive whole is thrown away by sandboxd.

use agenthold_proto as proto;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::download::{content_disposition, Disposition};
use super::error::{ApiError, ApiQuery, ErrorBody};
use super::types::DirEntry;
use super::AppState;
use crate::tunnel::conn::{SandboxConn, UploadLimit};

/// `?path=` of `fs/list`: the home when absent.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// The directory, relative to /home/agent unless absolute; the home itself when absent or
    /// empty.
    #[serde(default)]
    #[param(max_length = 4096, example = "src")]
    pub path: String,
}

/// `?path=` of a file operation.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PathQuery {
    /// Relative to /home/agent unless absolute; at most 4096 bytes (a relative path counted
    /// with `/home/agent/` before it), each name at most 255, no `..`.
    // Missing and empty are both refused by `check_path`, with the field named.
    #[serde(default)]
    #[param(
        required = true,
        min_length = 1,
        max_length = 4096,
        example = "src/app.py"
    )]
    pub path: String,
}

/// `?path=` of a file read, and how the browser is to take it.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// Relative to /home/agent unless absolute.
    #[serde(default)]
    #[param(
        required = true,
        min_length = 1,
        max_length = 4096,
        example = "src/app.py"
    )]
    pub path: String,
    /// Answer with `Content-Disposition: inline` (for an editor that shows the bytes itself)
    /// rather than `attachment`, which makes a browser save the file instead of showing it.
    #[serde(default)]
    pub inline: bool,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RemoveQuery {
    /// Relative to /home/agent unless absolute.
    #[serde(default)]
    #[param(required = true, min_length = 1, max_length = 4096, example = "build")]
    pub path: String,
    /// Remove a directory that is not empty, with everything in it.
    #[serde(default)]
    pub recursive: bool,
}

/// The agent's sandbox: a file operation wakes a sleeping agent, as every operation that needs
/// the sandbox does.
async fn running(st: &AppState, id: &str) -> Result<SandboxConn, ApiError> {
    Ok(st.lc.wake_conn(id).await?)
}

fn check_path(path: &str) -> Result<(), ApiError> {
    if path.is_empty() {
        return Err(ApiError::invalid_field("path", "path is required"));
    }
    Ok(())
}

/// Lists a directory; wakes a sleeping agent first.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/list", tag = "files", operation_id = "listFiles",
    params(("id" = String, Path, description = "The agent's id"), ListQuery),
    responses((status = 200, body = [DirEntry]), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`")))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Vec<DirEntry>>, ApiError> {
    let entries = running(&st, &id).await?.list_dir(q.path).await?;
    Ok(Json(entries))
}

/// Reads a file, streamed; wakes a sleeping agent first.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/read", tag = "files", operation_id = "readFile",
    params(("id" = String, Path, description = "The agent's id"), ReadQuery),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>, description = "The file's bytes, streamed (with `Content-Length`, `X-Content-Type-Options: nosniff` and `Content-Disposition: attachment` naming the file, or `inline` when asked)"),
        (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`")))]
pub async fn read(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ReadQuery>,
) -> Result<Response, ApiError> {
    check_path(&q.path)?;
    let how = if q.inline {
        Disposition::Inline
    } else {
        Disposition::Attachment
    };
    let disposition = content_disposition(&q.path, how);
    let file = running(&st, &id).await?.read_file(q.path).await?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(
        file.bytes,
        proto::DATA_CHUNK,
    ));
    let mut resp = (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/octet-stream"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        body,
    )
        .into_response();
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, header::HeaderValue::from(file.size));
    Ok(resp)
}

/// Writes a file from the streamed body; it is replaced whole or not at all. Wakes a sleeping
/// agent first.
#[utoipa::path(put, path = "/api/v1/agents/{id}/fs/write", tag = "files", operation_id = "writeFile",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes, streamed; at most `server.max_file_mb` MiB"),
    responses((status = 204, description = "Written whole"), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"),
        (status = 404, body = ErrorBody, description = "No such agent, or the parent directory does not exist"), (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"),
        (status = 413, body = ErrorBody, description = "Larger than `server.max_file_mb`; nothing was written"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`"),
        (status = 507, body = ErrorBody, description = "The sandbox's disk is full (its home's `diskMb`, or `/tmp`); nothing was written")))]
pub async fn write(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    req: Request,
) -> Response {
    match write_body(st, id, q, req).await {
        Ok(status) => status.into_response(),
        // A refusal may come before the whole body was read (too large, a full disk): the rest
        // of it is still on its way, so the connection cannot carry another request.
        Err(e) => {
            let mut response = e.into_response();
            response.headers_mut().insert(
                header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            response
        }
    }
}

async fn write_body(
    st: AppState,
    id: String,
    q: PathQuery,
    req: Request,
) -> Result<StatusCode, ApiError> {
    check_path(&q.path)?;
    let limit = UploadLimit::mb(st.config().server.max_file_mb);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    limit.admit(declared)?;
    let conn = running(&st, &id).await?;
    let body = req.into_body().into_data_stream();
    conn.write_file(q.path, body, limit).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Makes a directory and its parents; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/fs/mkdir", tag = "files", operation_id = "makeDir",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    responses((status = 204, description = "The directory exists"), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken, or a file is in the way"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`"),
        (status = 507, body = ErrorBody, description = "The sandbox's disk is full")))]
pub async fn mkdir(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<StatusCode, ApiError> {
    check_path(&q.path)?;
    running(&st, &id).await?.mkdir(q.path).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a file, or a directory (`recursive=true` for one that is not empty); wakes a sleeping
/// agent first.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/fs/remove", tag = "files", operation_id = "removeFile",
    params(("id" = String, Path, description = "The agent's id"), RemoveQuery),
    responses((status = 204, description = "Removed"),
        (status = 400, body = ErrorBody, description = "A bad path (as for the other file operations), the home itself, or a directory that is not empty without `recursive=true`"),
        (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`")))]
pub async fn remove(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<RemoveQuery>,
) -> Result<StatusCode, ApiError> {
    check_path(&q.path)?;
    running(&st, &id)
        .await?
        .remove_path(q.path, q.recursive)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
