//! `/api/v1/agents/{id}/fs/*`: the file browser, over the `fs.*` channels. Reads and writes
//! stream; a write that does not arrive whole is thrown away by sandboxd. A watch is Server-Sent
//! Events for as long as the client stays.

use std::convert::Infallible;
use std::time::Duration;

use agenthold_proto as proto;
use axum::body::Body;
use axum::extract::{Multipart, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use utoipa::IntoParams;

use super::audit::AuditNote;
use super::download::{content_disposition, Disposition};
use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use super::types::{
    DirEntry, FileEvent, FileInfo, FileWritten, FilesWritten, PathExists, RenameBody,
};
use super::AppState;
use crate::tunnel::conn::{ConnError, SandboxConn, UploadLimit};

/// Files one `fs/write-files` call may carry.
pub const MAX_FILES_PER_CALL: usize = 1000;

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
    responses((status = 200, body = [DirEntry]), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking), or the path is not what the operation needs now (a directory where a file is wanted, or the reverse)"),
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
        (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking), or the path is not what the operation needs now (a directory where a file is wanted, or the reverse)"), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`")))]
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

/// Writes a file from the streamed body; it is replaced whole or not at all. Missing
/// directories above it are made first, as the agent's account (as `fs/mkdir` would).
#[utoipa::path(put, path = "/api/v1/agents/{id}/fs/write", tag = "files", operation_id = "writeFile",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes, streamed; at most `server.max_file_mb` MiB"),
    responses((status = 204, description = "Written whole"), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"),
        (status = 404, body = ErrorBody, description = "No such agent"), (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking), or the path is not what the operation needs now (a directory where a file is wanted, or the reverse)"),
        (status = 413, body = ErrorBody, description = "Larger than `server.max_file_mb`; nothing was written"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`"),
        (status = 507, body = ErrorBody, description = "The sandbox's disk is full (its home's `diskMb`, or `/tmp`); nothing was written")))]
pub async fn write(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    note: AuditNote,
    req: Request,
) -> Response {
    note.detail(q.path.as_str());
    match write_body(st, id, q, req).await {
        Ok(status) => status.into_response(),
        Err(e) => closing(e),
    }
}

/// A refusal of an upload: it may come before the whole body was read (too large, a full
/// disk), so the rest is still on its way and the connection cannot carry another request.
fn closing(e: ApiError) -> Response {
    let mut response = e.into_response();
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
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
    responses((status = 204, description = "The directory exists"), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken, or a file is in the way"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`"),
        (status = 507, body = ErrorBody, description = "The sandbox's disk is full")))]
pub async fn mkdir(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    note: AuditNote,
) -> Result<StatusCode, ApiError> {
    note.detail(q.path.as_str());
    check_path(&q.path)?;
    running(&st, &id).await?.mkdir(q.path).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a file, or a directory (`recursive=true` for one that is not empty); wakes a sleeping
/// agent first.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/fs/remove", tag = "files", operation_id = "removeFile",
    params(("id" = String, Path, description = "The agent's id"), RemoveQuery),
    responses((status = 204, description = "Removed"),
        (status = 400, body = ErrorBody, description = "A bad path (as for the other file operations)"),
        (status = 403, body = ErrorBody, description = "The home itself (never removed); the sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking), or a directory that is not empty without `recursive=true`"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the connection to the sandbox failed; see `Retry-After`")))]
pub async fn remove(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<RemoveQuery>,
    note: AuditNote,
) -> Result<StatusCode, ApiError> {
    note.detail(q.path.as_str());
    check_path(&q.path)?;
    running(&st, &id)
        .await?
        .remove_path(q.path, q.recursive)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `?path=&recursive=` of `fs/watch`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WatchQuery {
    /// The directory, relative to /home/agent unless absolute.
    #[serde(default)]
    #[param(required = true, min_length = 1, max_length = 4096, example = "src")]
    pub path: String,
    /// Its subdirectories too, those made later included.
    #[serde(default)]
    pub recursive: bool,
}

/// Moves or renames a file or directory, as the agent's account.
#[utoipa::path(post, path = "/api/v1/agents/{id}/fs/rename", tag = "files", operation_id = "renameFile",
    params(("id" = String, Path, description = "The agent's id")),
    request_body = RenameBody,
    responses((status = 204, description = "Moved"),
        (status = 400, body = ErrorBody, description = "A bad path (as for the other file operations), or two filesystems (move within one)"),
        (status = 403, body = ErrorBody, description = "The home itself as `from` or `to` (never moved); the sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"),
        (status = 404, body = ErrorBody, description = "No such agent, no such `from`, or `to`'s directory does not exist"),
        (status = 409, body = ErrorBody, description = "The agent is not running, `to` exists (without `overwrite`, or a directory that is not empty), or `from` is a directory `to` is inside"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn rename(
    State(st): State<AppState>,
    Path(id): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<RenameBody>,
) -> Result<StatusCode, ApiError> {
    note.detail(format!("{} -> {}", body.from, body.to));
    if body.from.is_empty() {
        return Err(ApiError::invalid_field("from", "from is required"));
    }
    if body.to.is_empty() {
        return Err(ApiError::invalid_field("to", "to is required"));
    }
    running(&st, &id)
        .await?
        .rename_path(body.from, body.to, body.overwrite)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What a path is: its type, size, mode, modification time and owner. A symbolic link is
/// described itself, not what it points to.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/stat", tag = "files", operation_id = "statFile",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    responses((status = 200, body = FileInfo),
        (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver)"),
        (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent is not running, or a file is where a directory is on the way"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn stat(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<FileInfo>, ApiError> {
    check_path(&q.path)?;
    let stat = running(&st, &id).await?.stat(q.path).await?;
    Ok(Json(stat.into()))
}

/// Whether the agent's account can see that a path exists. Missing, outside the home on the
/// fake driver, behind a symbolic link out of the home, or in a directory the account may not
/// search: all `false`, never `403` or `404`. The parent is not listed.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/exists", tag = "files", operation_id = "fileExists",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    responses((status = 200, body = PathExists),
        (status = 400, body = ErrorBody, description = "A malformed path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes)"),
        (status = 404, body = ErrorBody, description = "No such agent"), (status = 409, body = ErrorBody, description = "The agent is not running"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn exists(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<PathExists>, ApiError> {
    check_path(&q.path)?;
    let exists = running(&st, &id).await?.exists(q.path).await?;
    Ok(Json(PathExists { exists }))
}

/// Writes several files in one call, from a `multipart/form-data` body: each part is a file,
/// its `filename` (or, without one, its field name) the path. Parts stream to the sandbox one
/// after the other, each whole or not at all, with its parent directories made as for
/// `fs/write`; one that fails does not stop the others. The answer lists every part's result.
#[utoipa::path(post, path = "/api/v1/agents/{id}/fs/write-files", tag = "files", operation_id = "writeFiles",
    params(("id" = String, Path, description = "The agent's id")),
    request_body(content = String, content_type = "multipart/form-data", description = "One part per file (at most 1000), each at most `server.max_file_mb` MiB; the part's `filename` is the path (relative to /home/agent unless absolute)"),
    responses((status = 200, body = FilesWritten, description = "Every part's result, in order: `error` is null for a file written whole"),
        (status = 400, body = ErrorBody, description = "Not a multipart body, one with no parts, one that broke off, or more than 1000 parts (the files before the fault are written)"),
        (status = 404, body = ErrorBody, description = "No such agent"), (status = 409, body = ErrorBody, description = "The agent is not running"),
        (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn write_files(
    State(st): State<AppState>,
    Path(id): Path<String>,
    note: AuditNote,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    match write_parts(st, id, multipart).await {
        Ok(written) => {
            let paths: Vec<&str> = written.files.iter().map(|f| f.path.as_str()).collect();
            note.detail(paths.join("\n"));
            Json(written).into_response()
        }
        Err(e) => closing(e),
    }
}

async fn write_parts(
    st: AppState,
    id: String,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<FilesWritten, ApiError> {
    let mut multipart = multipart.map_err(|e| ApiError::invalid(e.body_text()))?;
    let limit = UploadLimit::mb(st.config().server.max_file_mb);
    let conn = running(&st, &id).await?;
    let mut files = Vec::new();
    let broken = |e: axum::extract::multipart::MultipartError, done: usize| {
        ApiError::invalid(format!(
            "the multipart body is malformed or broke off after {done} files: {}",
            e.body_text()
        ))
    };
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| broken(e, files.len()))?
    {
        if files.len() == MAX_FILES_PER_CALL {
            return Err(ApiError::invalid(format!(
                "more than {MAX_FILES_PER_CALL} files in one call; the first {MAX_FILES_PER_CALL} are written"
            )));
        }
        let path = field
            .file_name()
            .or(field.name())
            .unwrap_or_default()
            .to_string();
        let result = if path.is_empty() {
            Err(ApiError::invalid_field(
                "path",
                "a part has neither a filename nor a field name",
            ))
        } else {
            match conn.write_file(path.clone(), field, limit).await {
                Ok(()) => Ok(()),
                // The request's body broke, not this file: nothing after it can be read.
                Err(ConnError::UploadCut(e)) => {
                    return Err(ApiError::invalid(format!(
                        "the multipart body broke off after {} files: {e}",
                        files.len()
                    )))
                }
                Err(e) => Err(ApiError::from(e)),
            }
        };
        files.push(FileWritten {
            path,
            error: result.err().map(ApiError::detail),
        });
    }
    if files.is_empty() {
        return Err(ApiError::invalid(
            "the form has no parts: send one part per file, its filename the path",
        ));
    }
    Ok(FilesWritten { files })
}

/// Follows changes under a directory, as Server-Sent Events named after their `type`
/// (`create`, `write`, `remove`, `rename`, `gap`), each with a [`FileEvent`] as its data, as
/// the agent's account sees them: a directory the account may not read is not watched.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/watch", tag = "files", operation_id = "watchDir",
    params(("id" = String, Path, description = "The agent's id"), WatchQuery),
    responses((status = 200, content_type = "text/event-stream", body = [FileEvent], description = "Server-Sent Events, each named after its `type`, its data a `FileEvent`, sent as inotify reports them. A rename is `rename` of the old path then `create` of the new one; a flood beyond what the client reads is cut short with one `gap`. The stream ends when the directory is removed or the agent stops"),
        (status = 400, body = ErrorBody, description = "A bad path (as for the other file operations)"),
        (status = 403, body = ErrorBody, description = "The sandbox's account may not read the directory; a symbolic link that leads out of the home; or the request came from the sandbox network"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such directory"),
        (status = 409, body = ErrorBody, description = "The agent is not running, the path is not a directory, or the sandbox's watches are used up (8 at once, 4096 directories between them)"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn watch(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<WatchQuery>,
) -> Result<Response, ApiError> {
    check_path(&q.path)?;
    let events = running(&st, &id).await?.watch(q.path, q.recursive).await?;
    let counted = st.lc.metrics().sse_subscriber();
    let stream = events.map(move |e| {
        let _counted = &counted;
        let e = FileEvent::from(e);
        let name = serde_json::to_value(e.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let data = serde_json::to_string(&e).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().event(name).data(data))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}
