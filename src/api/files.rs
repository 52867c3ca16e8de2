//! `/api/v1/agents/{id}/fs/*`: the file browser, over the `fs.*` channels. Reads and writes
//! stream; a write that does not arrive whole is thrown away by sandboxd.

use agenthold_proto::{self as proto, Channel, FsList, FsMkdir, FsRead, FsRemove, FsWrite, Reply};
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use utoipa::IntoParams;

use super::download::{content_disposition, Disposition};
use super::error::{ApiError, ApiQuery, ErrorBody};
use super::types::DirEntry;
use super::AppState;
use crate::tunnel::registry::LinkStream;

/// Largest `fs.list` answer read from a sandbox.
const MAX_LISTING: u64 = 64 * 1024 * 1024;

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

/// Opens the channel of `header` on a running agent's sandbox, returning its reply. File
/// operations do not wake an agent.
pub(super) async fn open<C: Channel>(
    st: &AppState,
    id: &str,
    header: C,
) -> Result<(LinkStream, C::Reply), ApiError> {
    let Some(handle) = st.lc.tunnels().get(id) else {
        let agent = st.lc.get(id).await?;
        return Err(ApiError::conflict(format!(
            "agent {} is {}; file operations need a running agent",
            agent.name, agent.state
        )));
    };
    st.lc.activity().touch(id);
    let mut stream = handle.open().await?;
    let ok = proto::open(&mut stream, header).await?;
    Ok((stream, ok))
}

fn check_path(path: &str) -> Result<(), ApiError> {
    if path.is_empty() {
        return Err(ApiError::invalid_field("path", "path is required"));
    }
    Ok(())
}

/// Lists a directory.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/list", tag = "files", operation_id = "listFiles",
    params(("id" = String, Path, description = "The agent's id"), ListQuery),
    responses((status = 200, body = [DirEntry]), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent is not running"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Vec<DirEntry>>, ApiError> {
    let (stream, _) = open(&st, &id, FsList { path: q.path }).await?;
    let mut body = Vec::new();
    stream
        .take(MAX_LISTING)
        .read_to_end(&mut body)
        .await
        .map_err(|e| ApiError::unavailable(format!("reading the listing failed: {e}")))?;
    let entries = serde_json::from_slice(&body)
        .map_err(|e| ApiError::internal(format!("the sandbox sent a bad listing: {e}")))?;
    Ok(Json(entries))
}

/// Reads a file, streamed.
#[utoipa::path(get, path = "/api/v1/agents/{id}/fs/read", tag = "files", operation_id = "readFile",
    params(("id" = String, Path, description = "The agent's id"), ReadQuery),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>, description = "The file's bytes, streamed (with `Content-Length`, `X-Content-Type-Options: nosniff` and `Content-Disposition: attachment` naming the file, or `inline` when asked)"),
        (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"), (status = 409, body = ErrorBody, description = "The agent is not running"), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
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
    let (stream, size) = open(&st, &id, FsRead { path: q.path }).await?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(
        stream,
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
        .insert(header::CONTENT_LENGTH, header::HeaderValue::from(size.size));
    Ok(resp)
}

/// Writes a file from the streamed body; it is replaced whole or not at all.
#[utoipa::path(put, path = "/api/v1/agents/{id}/fs/write", tag = "files", operation_id = "writeFile",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes, streamed; at most `server.max_file_mb` MiB"),
    responses((status = 204, description = "Written whole"), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"),
        (status = 404, body = ErrorBody, description = "No such agent, or the parent directory does not exist"), (status = 409, body = ErrorBody, description = "The agent is not running"),
        (status = 413, body = ErrorBody, description = "Larger than `server.max_file_mb`; nothing was written"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed"),
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
    let max_file_mb = st.config().server.max_file_mb;
    let limit = max_file_mb.saturating_mul(1024 * 1024);
    let too_large = || {
        ApiError::too_large(format!(
            "the file is larger than the server's limit of {max_file_mb} MiB (server.max_file_mb)"
        ))
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let (stream, _) = open(&st, &id, FsWrite { path: q.path }).await?;
    let (mut from_sandbox, mut to_sandbox) = tokio::io::split(stream);
    let mut body = req.into_body().into_data_stream();
    let upload = async {
        let mut written: u64 = 0;
        while let Some(chunk) = body.next().await {
            // Returning early drops the stream without a shutdown: a reset, so sandboxd
            // discards the partial file.
            let chunk =
                chunk.map_err(|e| ApiError::invalid(format!("the upload broke off: {e}")))?;
            written += chunk.len() as u64;
            if written > limit {
                return Err(too_large());
            }
            to_sandbox.write_all(&chunk).await.map_err(|e| {
                ApiError::unavailable(format!("the sandbox connection failed: {e}"))
            })?;
        }
        to_sandbox
            .shutdown()
            .await
            .map_err(|e| ApiError::unavailable(format!("the sandbox connection failed: {e}")))
    };
    // sandboxd answers once, at the end; an answer before that is a failure (a full disk) after
    // which it reads no more, so the rest of the body would wait forever on the stream's window.
    let answer = proto::read_message::<_, Reply>(&mut from_sandbox);
    tokio::pin!(answer);
    tokio::select! {
        // An answer that is already there wins over a send that failed because of it.
        biased;
        early = &mut answer => {
            let reply = early.map_err(|e| {
                ApiError::unavailable(format!("the sandbox did not confirm the write: {e}"))
            })?;
            reply.into_result()?;
            return Err(ApiError::unavailable(
                "the sandbox confirmed the write before the upload ended",
            ));
        }
        sent = upload => sent?,
    }
    let reply = answer.await.map_err(|e| {
        ApiError::unavailable(format!("the sandbox did not confirm the write: {e}"))
    })?;
    reply.into_result()?;
    Ok(StatusCode::NO_CONTENT)
}

/// Makes a directory and its parents.
#[utoipa::path(post, path = "/api/v1/agents/{id}/fs/mkdir", tag = "files", operation_id = "makeDir",
    params(("id" = String, Path, description = "The agent's id"), PathQuery),
    responses((status = 204, description = "The directory exists"), (status = 400, body = ErrorBody, description = "A bad path (`..`, NUL, a name over 255 bytes, a path over 4096 bytes, outside the home on the fake driver), or a directory where a file is wanted (or the reverse)"), (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent"),
        (status = 409, body = ErrorBody, description = "The agent is not running, or a file is in the way"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed"),
        (status = 507, body = ErrorBody, description = "The sandbox's disk is full")))]
pub async fn mkdir(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<StatusCode, ApiError> {
    check_path(&q.path)?;
    open(&st, &id, FsMkdir { path: q.path }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a file, or a directory (`recursive=true` for one that is not empty).
#[utoipa::path(delete, path = "/api/v1/agents/{id}/fs/remove", tag = "files", operation_id = "removeFile",
    params(("id" = String, Path, description = "The agent's id"), RemoveQuery),
    responses((status = 204, description = "Removed"),
        (status = 400, body = ErrorBody, description = "A bad path (as for the other file operations), the home itself, or a directory that is not empty without `recursive=true`"),
        (status = 403, body = ErrorBody, description = "The sandbox's account may not do this; a symbolic link that leads out of the home; or the request came from the sandbox network"), (status = 404, body = ErrorBody, description = "No such agent, or no such path"),
        (status = 409, body = ErrorBody, description = "The agent is not running"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed")))]
pub async fn remove(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<RemoveQuery>,
) -> Result<StatusCode, ApiError> {
    check_path(&q.path)?;
    open(
        &st,
        &id,
        FsRemove {
            path: q.path,
            recursive: q.recursive,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
