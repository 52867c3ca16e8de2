//! `POST /api/v1/agents/{id}/exec`: one command without a terminal, the way an AI agent's tool
//! call runs one. Answers with the whole result, or streams NDJSON when asked to.

use std::collections::BTreeMap;

use agenthold_proto::{self as proto, ExecExit, ExecRequest, ExecTooLarge, Frame, FrameCodec};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{SinkExt, Stream, StreamExt};
use serde::Serialize;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::error::{ApiError, ApiJson, ErrorBody, ErrorDetail};
use super::types::{self, ExecBody, ExecLine, ExecResult, OutputStream};
use super::AppState;
use crate::activity::{Use, UseGuard};
use crate::utf8::Utf8Decoder;

pub const NDJSON: &str = "application/x-ndjson";

/// Checks a command line, its cwd and env the way every command the API runs is checked, and
/// makes the request sandboxd takes (with `timeout_ms` as given, already checked).
pub(super) fn command_request(
    command: &[String],
    cwd: Option<&str>,
    env: Option<&BTreeMap<String, String>>,
    timeout_ms: Option<u64>,
) -> Result<ExecRequest, ApiError> {
    if command.is_empty() || command[0].is_empty() {
        return Err(ApiError::invalid_field(
            "command",
            "command must name a program",
        ));
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err(ApiError::invalid_field(
            "command",
            "command may not contain NUL bytes",
        ));
    }
    let env = env.cloned().unwrap_or_default();
    for (k, v) in &env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(ApiError::invalid_field(
                "env",
                format!(
                    "{:?} is not a valid environment variable",
                    k.chars().take(80).collect::<String>()
                ),
            ));
        }
    }
    if cwd.is_some_and(|c| c.contains('\0')) {
        return Err(ApiError::invalid_field(
            "cwd",
            "cwd may not contain NUL bytes",
        ));
    }
    let req = ExecRequest {
        command: command.to_vec(),
        cwd: cwd.map(str::to_string),
        env: env.into_iter().collect(),
        timeout_ms,
        output_cap: None,
    };
    // Here, before waking the agent: past this limit the header would not be accepted.
    req.check_size().map_err(size_error)?;
    Ok(req)
}

fn size_error(e: ExecTooLarge) -> ApiError {
    match e {
        ExecTooLarge::Cwd(_) => ApiError::invalid_field(e.field(), e.to_string()),
        _ => ApiError {
            field: Some(e.field()),
            ..ApiError::too_large(e.to_string())
        },
    }
}

/// Puts the agent's `env` under the request's own (a variable the request names wins), and
/// checks the size again with it.
pub(super) async fn add_agent_env(
    st: &AppState,
    id: &str,
    req: &mut ExecRequest,
) -> Result<(), ApiError> {
    let agent_env = st.lc.get(id).await?.env;
    if agent_env.is_empty() {
        return Ok(());
    }
    let mut env: Vec<(String, String)> = agent_env
        .into_iter()
        .filter(|(k, _)| !req.env.iter().any(|(own, _)| own == k))
        .collect();
    env.append(&mut req.env);
    req.env = env;
    req.check_size().map_err(size_error)?;
    Ok(())
}

fn validate(st: &AppState, body: &ExecBody) -> Result<ExecRequest, ApiError> {
    let config = st.config();
    let server = &config.server;
    let max = server.exec_max_timeout.as_millis() as u64;
    let timeout_ms = body
        .timeout_ms
        .unwrap_or(server.exec_default_timeout.as_millis() as u64);
    if timeout_ms == 0 || timeout_ms > max {
        return Err(ApiError::invalid_field(
            "timeoutMs",
            format!("timeoutMs must be between 1 and {max}"),
        ));
    }
    command_request(
        &body.command,
        body.cwd.as_deref(),
        body.env.as_ref(),
        Some(timeout_ms),
    )
}

/// Runs one command; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/exec", tag = "exec", operation_id = "exec", request_body = ExecBody,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = ExecResult, description = "The result; with `Accept: application/x-ndjson`, a stream of `{stream,data}` lines and a last `{exitCode,timedOut,durationMs,truncated}` line (or an `{error}` line when the sandbox connection is lost)"),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint (`field` names it)"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, stopping, or its start failed)"),
        (status = 413, body = ErrorBody, description = "`command` and `env` together take over 1 MiB (each argument and each `KEY=VALUE` counted with a terminating NUL), or one of them over 131071 bytes (Linux's limit per string); the message says which and the limit"),
        (status = 503, body = ErrorBody), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again later")))]
pub async fn exec(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ApiError> {
    let mut req = validate(&st, &body)?;
    add_agent_env(&st, &id, &mut req).await?;
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(NDJSON));
    if !streaming {
        req.output_cap = Some(st.config().server.exec_output_cap_kb.saturating_mul(1024));
    }
    let handle = st.lc.wake(&id, || {}).await?;
    let guard = st.lc.activity().hold(&id, Use::Exec);
    let mut stream = handle.open().await?;
    proto::open(&mut stream, req).await?;
    let (rd, wr) = tokio::io::split(stream);
    let frames = FramedRead::new(rd, FrameCodec::default());
    let stdin = body.stdin.unwrap_or_default().into_bytes();
    // Stdin goes in its own task so a command that prints before it reads cannot deadlock us.
    let feeder = tokio::spawn(async move {
        let mut sink = FramedWrite::new(wr, FrameCodec::default());
        for chunk in stdin.chunks(proto::DATA_CHUNK) {
            sink.send(Frame::Data(Bytes::copy_from_slice(chunk)))
                .await?;
        }
        sink.send(Frame::StdinEof).await?;
        // Keep the write half open: dropping it would reset the stream and kill the command.
        futures::future::pending::<()>().await;
        Ok::<_, proto::ProtoError>(())
    });
    let frames = Frames {
        inner: frames,
        _feeder: AbortOnDrop(feeder),
        _guard: guard,
    };
    if streaming {
        Ok(ndjson_response(frames))
    } else {
        Ok(collect(frames).await?.into_response())
    }
}

/// The sandbox's frames, with the stdin feeder and the activity hold that live as long as they.
struct Frames<S> {
    inner: S,
    _feeder: AbortOnDrop,
    _guard: UseGuard,
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<(), proto::ProtoError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S: Stream<Item = Result<Frame, proto::ProtoError>> + Unpin> Frames<S> {
    async fn next(&mut self) -> Option<Result<Frame, proto::ProtoError>> {
        self.inner.next().await
    }
}

pub(super) fn lost() -> ApiError {
    ApiError::unavailable("the sandbox connection was lost while the command ran")
}

async fn collect<S>(mut frames: Frames<S>) -> Result<axum::Json<ExecResult>, ApiError>
where
    S: Stream<Item = Result<Frame, proto::ProtoError>> + Unpin,
{
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    while let Some(frame) = frames.next().await {
        match frame.map_err(|_| lost())? {
            Frame::Stdout(b) => stdout.extend_from_slice(&b),
            Frame::Stderr(b) => stderr.extend_from_slice(&b),
            Frame::ExecExit(exit) => {
                return Ok(axum::Json(ExecResult {
                    exit_code: exit.exit_code,
                    stdout: String::from_utf8_lossy(&stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                    timed_out: exit.timed_out,
                    duration_ms: exit.duration_ms,
                    truncated: exit.truncated,
                }))
            }
            _ => {}
        }
    }
    Err(lost())
}

pub(super) fn line<T: Serialize>(value: &T) -> Bytes {
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn ndjson_response<S>(frames: Frames<S>) -> Response
where
    S: Stream<Item = Result<Frame, proto::ProtoError>> + Unpin + Send + 'static,
{
    let body = async_stream::stream! {
        let mut frames = frames;
        let mut out = Utf8Decoder::default();
        let mut err = Utf8Decoder::default();
        loop {
            match frames.next().await {
                Some(Ok(Frame::Stdout(b))) => {
                    let text = out.decode(&b);
                    if !text.is_empty() {
                        yield Ok::<_, std::io::Error>(line(&ExecLine::Output { stream: OutputStream::Stdout, data: text }));
                    }
                }
                Some(Ok(Frame::Stderr(b))) => {
                    let text = err.decode(&b);
                    if !text.is_empty() {
                        yield Ok(line(&ExecLine::Output { stream: OutputStream::Stderr, data: text }));
                    }
                }
                Some(Ok(Frame::ExecExit(ExecExit { exit_code, timed_out, duration_ms, truncated }))) => {
                    for (stream, dec) in [(OutputStream::Stdout, &mut out), (OutputStream::Stderr, &mut err)] {
                        let rest = dec.finish();
                        if !rest.is_empty() {
                            yield Ok(line(&ExecLine::Output { stream, data: rest }));
                        }
                    }
                    yield Ok(line(&ExecLine::Exit(types::ExecExit { exit_code, timed_out, duration_ms, truncated })));
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    let e = lost();
                    yield Ok(line(&ErrorBody { error: ErrorDetail { code: e.code.as_str().to_string(), message: e.message, field: None } }));
                    break;
                }
            }
        }
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, NDJSON)],
        Body::from_stream(body),
    )
        .into_response()
}
