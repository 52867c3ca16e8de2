//! `/api/v1/agents/{id}/processes…`: background processes, owned by the agent's sandboxd (the
//! `process.*` channels). Every call but the list wakes a sleeping agent, as exec does: the
//! processes and their output live in the sandbox. The list never wakes one: while the agent is
//! not running it is what the server last heard (see [`crate::lifecycle::Lifecycle::list_processes`]).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::access::CredentialEnds;
use super::audit::AuditNote;
use super::command_gate::approved;
use super::download::{content_disposition, Disposition};
use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use super::exec::{error_line, line, NDJSON};
use super::output_lines::OutputLines;
use super::types::process::{Process, ProcessState, SignalBody, StartProcess, StdinWritten};
use super::AppState;
use crate::launch::{check_command, check_process, Launch, ProcessOptions};
use crate::lifecycle::Lifecycle;
use crate::teams::command_rules::command_line;
use crate::teams::Principal;
use crate::tunnel::conn::{ConnError, OutputPiece, ProcessName};

/// How long `…/wait` waits when it is not told.
const DEFAULT_WAIT_MS: u64 = 30_000;

/// Starts a background process; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/processes", tag = "processes", operation_id = "startProcess",
    request_body = StartProcess, params(("id" = String, Path, description = "The agent's id")),
    responses((status = 201, body = Process, description = "It runs (or, when its program could not be run, it has already exited with 127 or 126 and says why on stderr)"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "`user` is `root` and the agent's `allowRoot` is false; or the start waited for approval (the agent's `approvals.commands`; the answer comes once it is decided) and was rejected (`approval_rejected`) or expired (`approval_expired`): nothing was run"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken, runs `sandbox.max_processes` processes already, or a running process has this tag"),
        (status = 413, body = ErrorBody, description = "`command` and `env` over exec's size limits"),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn start(
    State(st): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    note: AuditNote,
    ends: CredentialEnds,
    ApiJson(body): ApiJson<StartProcess>,
) -> Result<(StatusCode, Json<Process>), ApiError> {
    note.detail(crate::audit::detail::command_line(&body.command));
    let vars = body.env.as_ref().map_or(0, |e| e.len());
    check_process(body.timeout_ms, body.tag.as_deref(), vars)?;
    let run = check_command(
        &body.command,
        body.cwd.as_deref(),
        body.env.as_ref(),
        body.timeout_ms,
    )?;
    let agent = st.lc.get(&id).await?;
    let launch = Launch::new(run, &agent)?.as_user(body.user.map(Into::into), &agent)?;
    approved(
        &st,
        &principal,
        &agent,
        command_line(&body.command),
        &ends,
        Some(&note),
    )
    .await?;
    let options = ProcessOptions {
        tag: body.tag,
        stdin: body.stdin,
        keep_awake: body.keep_awake,
    };
    let conn = st.lc.wake_conn(&id).await?;
    // Watched from before it starts, kept as the process's once it has an id.
    let denied = st.lc.egress_log().watch(&agent.id);
    let info = conn.start_process(launch, options).await?;
    st.lc
        .egress_log()
        .keep_for_process(&agent.id, &info.id, denied);
    Ok((StatusCode::CREATED, Json(record(&st.lc, &agent.id, info))))
}

/// The API's form of process `info` of agent `id`, with what the egress proxy refused while it
/// ran: the same wherever a process is shown (its record, its output's exit line, its event).
pub(super) fn record(lc: &Lifecycle, id: &str, info: agenthold_proto::ProcessInfo) -> Process {
    let egress_denied = lc
        .egress_denied_of(id, &info)
        .into_iter()
        .map(Into::into)
        .collect();
    Process {
        egress_denied,
        ..Process::from(info)
    }
}

/// Lists the agent's processes, running and finished, oldest first. Never wakes the agent: while
/// it is not running, the list is what the server last heard from its sandbox (a process that
/// ran when it went to sleep shows as `lost`; `outputBytes` as of the process's last change;
/// empty if the server restarted since the agent last ran).
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes", tag = "processes", operation_id = "listProcesses",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [Process]), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The connection to the sandbox failed; see `Retry-After`")))]
pub async fn list(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Process>>, ApiError> {
    let all = st.lc.list_processes(&id).await?;
    Ok(Json(
        all.into_iter().map(|p| record(&st.lc, &id, p)).collect(),
    ))
}

/// One process, by id or tag (a tag names the running process with it, else the one started
/// last); wakes a sleeping agent first (the process's state lives in the sandbox).
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes/{pid}", tag = "processes", operation_id = "getProcess",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")),
    responses((status = 200, body = Process), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"), (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn get(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<Json<Process>, ApiError> {
    let name = ProcessName::parse(pid)?;
    let info = st.lc.wake_conn(&id).await?.process(&name).await?;
    Ok(Json(record(&st.lc, &id, info)))
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

/// The process's output from a byte offset, as NDJSON; wakes a sleeping agent first.
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes/{pid}/output", tag = "processes", operation_id = "processOutput",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), OutputQuery),
    responses((status = 200, content_type = "application/x-ndjson", description = "One line per piece: `{offset, stream, data}` (UTF-8 text) or `{offset, stream, data64}` (base64, for bytes that are not UTF-8 or are mostly control characters), `{gap: {from, to}}` where output left the buffer, and a last `{exit: Process}` once the process has ended and all its output was sent. Without `follow` the response ends at the output so far. A stream cut short ends with an error line; read again from the last offset you got."),
        (status = 400, body = ErrorBody, description = "The offset is past the output so far"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn output(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<OutputQuery>,
) -> Result<Response, ApiError> {
    let name = ProcessName::parse(pid)?;
    // A process's output is the sandbox's bytes too: saved, never shown as a page.
    let disposition = content_disposition(
        &format!("{}.ndjson", name.as_str()),
        Disposition::Attachment,
    );
    let conn = st.lc.wake_conn(&id).await?;
    let mut output = conn.output(&name, q.offset, q.follow).await?;
    let mut lines = OutputLines::new(q.offset);
    let lc = st.lc.clone();
    let body = async_stream::stream! {
        while let Some(piece) = output.next().await {
            let out = match piece {
                Ok(OutputPiece::Stdout(b)) => lines.stdout(&b),
                Ok(OutputPiece::Stderr(b)) => lines.stderr(&b),
                Ok(OutputPiece::Gap { from, to }) => lines.gap(from, to),
                // The last piece: the process as it now is. An exit line only if it has ended.
                Ok(OutputPiece::End(info)) => match record(&lc, &id, info) {
                    p if p.state != ProcessState::Running => lines.exit(p),
                    _ => lines.finish(),
                },
                // A last report no sandboxd sends ends the answer without a last line.
                Err(ConnError::MalformedReport) => Vec::new(),
                // Ended without its last piece: cut.
                Err(e) => {
                    for l in lines.finish() {
                        yield Ok::<_, std::io::Error>(line(&l));
                    }
                    yield Ok(error_line(e));
                    continue;
                }
            };
            for l in out {
                yield Ok::<_, std::io::Error>(line(&l));
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

/// Writes the raw request body to the process's stdin (started with `"stdin": true`); wakes a
/// sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/processes/{pid}/stdin", tag = "processes", operation_id = "writeProcessStdin",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), StdinQuery),
    request_body(content = String, content_type = "application/octet-stream", description = "Bytes for the process's stdin; may be empty (with `eof=true`, to close it)"),
    responses((status = 200, body = StdinWritten), (status = 400, body = ErrorBody, description = "The process has ended, was started without stdin, or no longer reads it"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn stdin(
    State(st): State<AppState>,
    principal: Principal,
    Path((id, pid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<StdinQuery>,
    ends: CredentialEnds,
    req: Request,
) -> Result<Json<StdinWritten>, ApiError> {
    let shown = pid.clone();
    let name = ProcessName::parse(pid)?;
    // What is written to a process's stdin may be commands (a shell reading them): under
    // `always` it waits for approval as a new command would.
    let agent = st.lc.get(&id).await?;
    approved(
        &st,
        &principal,
        &agent,
        format!("(input to process {shown})"),
        &ends,
        None,
    )
    .await?;
    let conn = st.lc.wake_conn(&id).await?;
    let body = req.into_body().into_data_stream();
    let written = conn.write_stdin(&name, body, q.eof).await?;
    Ok(Json(StdinWritten { written }))
}

/// Sends a signal to the process's whole process group; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/processes/{pid}/signal", tag = "processes", operation_id = "signalProcess",
    request_body = SignalBody,
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")),
    responses((status = 204, description = "Sent"), (status = 400, body = ErrorBody, description = "Not a signal, or the process has ended"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn signal(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<StatusCode, ApiError> {
    let name = ProcessName::parse(pid)?;
    if agenthold_proto::process::parse_signal(&body.signal).is_none() {
        return Err(ApiError::invalid_field(
            "signal",
            format!(
                "{:?} is not a signal: give a name such as TERM, INT, KILL or HUP, or a number",
                body.signal.chars().take(32).collect::<String>()
            ),
        ));
    }
    st.lc
        .wake_conn(&id)
        .await?
        .signal(&name, body.signal)
        .await?;
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

/// Waits for the process to end; wakes a sleeping agent first.
#[utoipa::path(get, path = "/api/v1/agents/{id}/processes/{pid}/wait", tag = "processes", operation_id = "waitProcess",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"), WaitQuery),
    responses((status = 200, body = Process, description = "It has ended"),
        (status = 408, body = Process, description = "The time was up first: the process as it is, still running"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"), (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn wait(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<WaitQuery>,
) -> Result<Response, ApiError> {
    let name = ProcessName::parse(pid)?;
    let max = st.config().server.exec_max_timeout.as_millis() as u64;
    let timeout_ms = q.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
    if timeout_ms > max {
        return Err(ApiError::invalid_field(
            "timeoutMs",
            format!("timeoutMs must be at most {max}"),
        ));
    }
    // The wait starts once the agent is awake.
    let conn = st.lc.wake_conn(&id).await?;
    let p = record(
        &st.lc,
        &id,
        conn.wait(&name, Duration::from_millis(timeout_ms)).await?,
    );
    let status = if p.state == ProcessState::Running {
        StatusCode::REQUEST_TIMEOUT
    } else {
        StatusCode::OK
    };
    Ok((status, Json(p)).into_response())
}

/// Kills the process's whole tree if it runs, then forgets it and its output; wakes a sleeping
/// agent first.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/processes/{pid}", tag = "processes", operation_id = "removeProcess",
    params(("id" = String, Path, description = "The agent's id"), ("pid" = String, Path, description = "The process's id or tag", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")),
    responses((status = 204, description = "Gone"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, in error, or stopped while waking)"), (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"), (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn remove(
    State(st): State<AppState>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let name = ProcessName::parse(pid)?;
    st.lc.remove_process(&id, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
