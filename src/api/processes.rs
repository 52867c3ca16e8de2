//! `/api/v1/agents/{id}/processes…`: background processes, owned by the agent's sandboxd (the
//! `process.*` channels). Every call wakes a sleeping agent, as exec does: the processes and
//! their output live in the sandbox.

use std::time::Duration;

use agenthold_proto::process::{tag_problem, ProcessList, ProcessStart, ProcessWait};
use agenthold_proto::{
    self as proto, is_session_id, Frame, FrameCodec, ProcessGet, ProcessInfo, ProcessOutput,
    ProcessRemove, ProcessSignal, ProcessStdin, Reply, Size,
};
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::FramedRead;
use utoipa::IntoParams;

use super::download::{content_disposition, Disposition};
use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody, ErrorDetail};
use super::exec::{add_agent_env, command_request, line, lost, NDJSON};
use super::output_lines::OutputLines;
use super::types::process::{Process, ProcessState, SignalBody, StartProcess, StdinWritten};
use super::AppState;
use crate::tunnel::registry::LinkStream;

/// The longest `timeoutMs` a process may be started with (30 days).
pub const MAX_PROCESS_TIMEOUT_MS: u64 = 30 * 24 * 3600 * 1000;
/// Most variables a process's `env` may name.
pub const MAX_ENV_ENTRIES: usize = 4096;
/// How long `…/wait` waits when it is not told.
const DEFAULT_WAIT_MS: u64 = 30_000;
/// Processes read from one `process.list` at most (running and finished together).
const MAX_LISTED: usize = 4096;

/// How long a list may take to arrive once sandboxd has answered.
const LIST_TIME: Duration = Duration::from_secs(30);

/// A process as sandboxd reported it, cut to the shapes sandboxd makes (it runs in the
/// sandbox: its reports are input like any other).
fn shown(info: ProcessInfo) -> Result<Process, ApiError> {
    info.sanitized().map(Process::from).ok_or_else(malformed)
}

fn malformed() -> ApiError {
    ApiError::unavailable("the sandbox sent a malformed process report")
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "no process {:?} (by id or tag)",
        name.chars().take(80).collect::<String>()
    ))
}

/// A process is named by its id or its tag; anything else names none, without waking the
/// agent to say so.
fn check_name(name: &str) -> Result<(), ApiError> {
    if is_session_id(name) || tag_problem(name).is_none() {
        Ok(())
    } else {
        Err(not_found(name))
    }
}

/// Wakes the agent and opens `header`'s channel on its sandbox.
async fn open<C: proto::Channel>(
    st: &AppState,
    id: &str,
    header: C,
) -> Result<(LinkStream, C::Reply), ApiError> {
    let link = st.lc.wake(id, || {}).await?;
    let mut stream = link.open().await?;
    let reply = proto::open(&mut stream, header).await?;
    Ok((stream, reply))
}

/// Starts a background process; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/processes", tag = "processes", operation_id = "startProcess",
    request_body = StartProcess, params(("id" = String, Path, description = "The agent's id")),
    responses((status = 201, body = Process, description = "It runs (or, when its program could not be run, it has already exited with 127 or 126 and says why on stderr)"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken, runs `sandbox.max_processes` processes already, or a running process has this tag"),
        (status = 413, body = ErrorBody, description = "`command` and `env` over exec's size limits"),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn start(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<StartProcess>,
) -> Result<(StatusCode, Json<Process>), ApiError> {
    if let Some(t) = body.timeout_ms {
        if t == 0 || t > MAX_PROCESS_TIMEOUT_MS {
            return Err(ApiError::invalid_field(
                "timeoutMs",
                format!("timeoutMs must be between 1 and {MAX_PROCESS_TIMEOUT_MS} (30 days)"),
            ));
        }
    }
    if let Some(why) = body.tag.as_deref().and_then(tag_problem) {
        return Err(ApiError::invalid_field("tag", why));
    }
    // Exec takes any count within its 1 MiB; a process refuses a hostile number of names.
    let vars = body.env.as_ref().map_or(0, |e| e.len());
    if vars > MAX_ENV_ENTRIES {
        return Err(ApiError::invalid_field(
            "env",
            format!("env names {vars} variables; a process may have at most {MAX_ENV_ENTRIES}"),
        ));
    }
    let mut run = command_request(
        &body.command,
        body.cwd.as_deref(),
        body.env.as_ref(),
        body.timeout_ms,
    )?;
    add_agent_env(&st, &id, &mut run).await?;
    let config = st.config();
    let sb = &config.sandbox;
    let header = ProcessStart {
        run,
        tag: body.tag,
        stdin: body.stdin,
        keep_awake: body.keep_awake,
        output_bytes: sb.process_output_kb.saturating_mul(1024),
        max_running: sb.max_processes,
        retention_ms: Some(sb.process_retention.as_millis() as u64),
    };
    let (_, info) = open(&st, &id, header).await?;
    Ok((StatusCode::CREATED, Json(shown(info)?)))
}

/// Lists the agent's processes, running and finished, oldest first.
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes", tag = "processes", operation_id = "listProcesses",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [Process]), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Process>>, ApiError> {
    let retention_ms = Some(st.config().sandbox.process_retention.as_millis() as u64);
    let (stream, count) = open(&st, &id, ProcessList { retention_ms }).await?;
    if count.size > MAX_LISTED as u64 {
        return Err(malformed());
    }
    let mut frames = FramedRead::new(stream, FrameCodec::default());
    let mut out = Vec::with_capacity(count.size as usize);
    // Exactly as many as sandboxd said: fewer is a cut stream, not a shorter list.
    let read_all = async {
        while out.len() < count.size as usize {
            match frames.next().await {
                Some(Ok(Frame::Process(info))) => out.push(shown(*info)?),
                Some(Ok(_)) => return Err(malformed()),
                Some(Err(_)) | None => return Err(lost()),
            }
        }
        Ok(())
    };
    tokio::time::timeout(LIST_TIME, read_all)
        .await
        .map_err(|_| lost())??;
    Ok(Json(out))
}

/// One process, by id or tag (a tag names the running process with it, else the one started
/// last).
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes/{pid}", tag = "processes", operation_id = "getProcess",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")),
    responses((status = 200, body = Process), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn get(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<Json<Process>, ApiError> {
    check_name(&pid)?;
    let (_, info) = open(&st, &id, ProcessGet { process: pid }).await?;
    Ok(Json(shown(info)?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OutputQuery {
    /// The byte offset to start from (over both streams); at most the output so far.
    #[serde(default)]
    pub offset: u64,
    /// Keep the response open for what comes next, until the process ends.
    #[serde(default)]
    pub follow: bool,
}

/// The process's output from a byte offset, as NDJSON.
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes/{pid}/output", tag = "processes", operation_id = "processOutput",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), OutputQuery),
    responses((status = 200, content_type = "application/x-ndjson", description = "One line per piece: `{offset, stream, data}` (UTF-8 text) or `{offset, stream, data64}` (base64, for bytes that are not UTF-8 or are mostly control characters), `{gap: {from, to}}` where output left the buffer, and a last `{exit: Process}` once the process has ended and all its output was sent. Without `follow` the response ends at the output so far. A stream cut short ends with an error line; read again from the last offset you got."),
        (status = 400, body = ErrorBody, description = "The offset is past the output so far"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn output(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<OutputQuery>,
) -> Result<Response, ApiError> {
    check_name(&pid)?;
    // A process's output is the sandbox's bytes too: saved, never shown as a page.
    let disposition = content_disposition(&format!("{pid}.ndjson"), Disposition::Attachment);
    let header = ProcessOutput {
        process: pid,
        offset: q.offset,
        follow: q.follow,
    };
    let (stream, _) = open(&st, &id, header).await?;
    let mut frames = FramedRead::new(stream, FrameCodec::default());
    let mut lines = OutputLines::new(q.offset);
    let body = async_stream::stream! {
        loop {
            let (out, last) = match frames.next().await {
                Some(Ok(Frame::Stdout(b))) => (lines.stdout(&b), false),
                Some(Ok(Frame::Stderr(b))) => (lines.stderr(&b), false),
                Some(Ok(Frame::Gap { from, to })) => (lines.gap(from, to), false),
                // The last frame: the process as it now is. An exit line only if it has ended.
                Some(Ok(Frame::Process(info))) => match shown(*info) {
                    Ok(p) if p.state != ProcessState::Running => (lines.exit(p), true),
                    Ok(_) => (lines.finish(), true),
                    Err(_) => (Vec::new(), true),
                },
                Some(Ok(_)) => continue,
                // Ended without its last frame: cut.
                Some(Err(_)) | None => {
                    for l in lines.finish() {
                        yield Ok::<_, std::io::Error>(line(&l));
                    }
                    let e = lost();
                    yield Ok(line(&ErrorBody { error: ErrorDetail { code: e.code.as_str().to_string(), message: e.message, field: None } }));
                    break;
                }
            };
            for l in out {
                yield Ok::<_, std::io::Error>(line(&l));
            }
            if last {
                break;
            }
        }
    };
    Ok((
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(NDJSON),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StdinQuery {
    /// Close the process's stdin after the body.
    #[serde(default)]
    pub eof: bool,
}

/// Writes the raw request body to the process's stdin (started with `"stdin": true`).
#[utoipa::path(post, path = "/api/v1/agents/{id}/processes/{pid}/stdin", tag = "processes", operation_id = "writeProcessStdin",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), StdinQuery),
    request_body(content = String, content_type = "application/octet-stream", description = "Bytes for the process's stdin; may be empty (with `eof=true`, to close it)"),
    responses((status = 200, body = StdinWritten), (status = 400, body = ErrorBody, description = "The process has ended, was started without stdin, or no longer reads it"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn stdin(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<StdinQuery>,
    req: Request,
) -> Result<Json<StdinWritten>, ApiError> {
    check_name(&pid)?;
    let header = ProcessStdin {
        process: pid,
        eof: q.eof,
    };
    let (stream, _) = open(&st, &id, header).await?;
    let (mut from_sandbox, mut to_sandbox) = tokio::io::split(stream);
    let mut body = req.into_body().into_data_stream();
    let send = async {
        while let Some(chunk) = body.next().await {
            // Returning early drops the stream without a shutdown: nothing more is written.
            let chunk = chunk.map_err(|e| ApiError::invalid(format!("the body broke off: {e}")))?;
            to_sandbox.write_all(&chunk).await.map_err(|_| lost())?;
        }
        to_sandbox.shutdown().await.map_err(|_| lost())
    };
    // sandboxd answers once, after the last byte; an answer before that is a failure (the
    // process stopped reading) after which it reads no more.
    let answer = proto::read_message::<_, Reply>(&mut from_sandbox);
    tokio::pin!(answer);
    let reply = tokio::select! {
        biased;
        early = &mut answer => early,
        sent = send => {
            sent?;
            answer.await
        }
    };
    let size: Size =
        serde_json::from_value(reply.map_err(|_| lost())?.into_result()?).map_err(|_| lost())?;
    Ok(Json(StdinWritten { written: size.size }))
}

/// Sends a signal to the process's whole process group.
#[utoipa::path(post, path = "/api/v1/agents/{id}/processes/{pid}/signal", tag = "processes", operation_id = "signalProcess",
    request_body = SignalBody,
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")),
    responses((status = 204, description = "Sent"), (status = 400, body = ErrorBody, description = "Not a signal, or the process has ended"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn signal(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<StatusCode, ApiError> {
    check_name(&pid)?;
    if proto::process::parse_signal(&body.signal).is_none() {
        return Err(ApiError::invalid_field(
            "signal",
            format!(
                "{:?} is not a signal: give a name such as TERM, INT, KILL or HUP, or a number",
                body.signal.chars().take(32).collect::<String>()
            ),
        ));
    }
    let header = ProcessSignal {
        process: pid,
        signal: body.signal,
    };
    open(&st, &id, header).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// How long to wait, in milliseconds (30000 by default, at most `server.exec_max_timeout`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Waits for the process to end.
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes/{pid}/wait", tag = "processes", operation_id = "waitProcess",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), WaitQuery),
    responses((status = 200, body = Process, description = "It has ended"),
        (status = 408, body = Process, description = "The time was up first: the process as it is, still running"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn wait(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<WaitQuery>,
) -> Result<Response, ApiError> {
    check_name(&pid)?;
    let max = st.config().server.exec_max_timeout.as_millis() as u64;
    let timeout_ms = q.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    if timeout_ms > max {
        return Err(ApiError::invalid_field(
            "timeoutMs",
            format!("timeoutMs must be at most {max}"),
        ));
    }
    let header = ProcessWait {
        process: pid,
        timeout_ms,
    };
    // The wait starts once the agent is awake; sandboxd answers at the end or when the time
    // is up, and a little slack covers the trip.
    let link = st.lc.wake(&id, || {}).await?;
    let mut stream = link.open().await?;
    let info: ProcessInfo = tokio::time::timeout(
        Duration::from_millis(timeout_ms) + Duration::from_secs(10),
        proto::open(&mut stream, header),
    )
    .await
    .map_err(|_| lost())??;
    let p = shown(info)?;
    let status = if p.state == ProcessState::Running {
        StatusCode::REQUEST_TIMEOUT
    } else {
        StatusCode::OK
    };
    Ok((status, Json(p)).into_response())
}

/// Kills the process's whole tree if it runs, then forgets it and its output.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/processes/{pid}", tag = "processes", operation_id = "removeProcess",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")),
    responses((status = 204, description = "Gone"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn remove(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    check_name(&pid)?;
    open(&st, &id, ProcessRemove { process: pid }).await?;
    Ok(StatusCode::NO_CONTENT)
}
