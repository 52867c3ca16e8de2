//! `POST /api/v1/agents/{id}/exec`: one command without a terminal, the way an AI agent's tool
//! call runs one. Answers with the whole result, or streams NDJSON when asked to.

use agenthold_proto as proto;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use super::access::CredentialEnds;
use super::audit::{AuditNote, LateOutcome};
use super::command_gate::{decided, gate, Gate};
use super::error::{ApiError, ApiJson, ErrorBody, ErrorDetail};
use super::types::conversation::Approval;
use super::types::{self, ExecBody, ExecLine, ExecResult, OutputStream};
use super::AppState;
use crate::audit::detail;
use crate::egress::DeniedWatch;
use crate::launch::{check_command, exec_timeout, Launch};
use crate::sessions::command_approvals::HeldCommand;
use crate::teams::command_rules::command_line;
use crate::teams::Principal;
use crate::tunnel::conn::{ConnError, ExecPiece, ExecRun};
use crate::utf8::Utf8Decoder;

pub const NDJSON: &str = "application/x-ndjson";

/// Runs one command; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/exec", tag = "exec", operation_id = "exec", request_body = ExecBody,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = ExecResult, description = "The result; with `Accept: application/x-ndjson`, a stream of `{stream,data}` lines and a last `{exitCode,timedOut,durationMs,truncated,egressDenied}` line (or an `{error}` line when the sandbox connection is lost). A command held for approval (the agent's `approvals.commands`) streams first an `{approval}` line (the `Approval`, kind `command`) and waits; refused, its next and last line is an `{error}` line with code `approval_rejected` or `approval_expired`"),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint (`field` names it)"), (status = 403, body = ErrorBody, description = "`user` is `root` and the agent's `allowRoot` is false; or the command waited for approval and was rejected (code `approval_rejected`, also at once for a token whose `approvals` is `deny`) or nobody answered within `sessions.approval_timeout` (code `approval_expired`): nothing was run"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken (destroying, stopping, or its start failed)"),
        (status = 413, body = ErrorBody, description = "`command` and `env` together take over 1 MiB (each argument and each `KEY=VALUE` counted with a terminating NUL), or one of them over 131071 bytes (Linux's limit per string); the message says which and the limit"),
        (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`"), (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds")))]
pub async fn exec(
    State(st): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
    note: AuditNote,
    ends: CredentialEnds,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ApiError> {
    note.detail(detail::command_line(&body.command));
    let timeout_ms = exec_timeout(body.timeout_ms, &st.config().server)?;
    let run = check_command(
        &body.command,
        body.cwd.as_deref(),
        body.env.as_ref(),
        Some(timeout_ms),
    )?;
    let agent = st.lc.get(&id).await?;
    let mut launch = Launch::new(run, &agent)?.as_user(body.user.map(Into::into), &agent)?;
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(NDJSON));
    if !streaming {
        launch = launch.with_output_cap(st.config().server.exec_output_cap_kb.saturating_mul(1024));
    }
    let stdin = body.stdin.unwrap_or_default().into_bytes();
    match gate(
        &st,
        &principal,
        &agent,
        command_line(&body.command),
        Some(&note),
    )
    .await?
    {
        Gate::Run => {}
        Gate::Held(held) if streaming => {
            let outcome = note.later();
            return Ok(held_ndjson(st, id, *held, launch, stdin, outcome));
        }
        Gate::Held(held) => decided(*held, &ends).await?,
    }
    let conn = st.lc.wake_conn(&id).await?;
    // What the proxy refuses for the agent from before the command starts until it has ended:
    // the proxy tells a refusal before the refused program can see it.
    let denied = st.lc.egress_log().watch(&agent.id);
    let run = conn.exec(launch, stdin).await?;
    if streaming {
        Ok(ndjson_response(run, denied))
    } else {
        Ok(collect(run, denied).await?.into_response())
    }
}

fn denied_list(denied: &DeniedWatch) -> Vec<types::EgressDenied> {
    denied.denied().into_iter().map(Into::into).collect()
}

/// The command's whole result, as one answer.
async fn collect(run: ExecRun, denied: DeniedWatch) -> Result<axum::Json<ExecResult>, ApiError> {
    let out = run.collect().await?;
    Ok(axum::Json(ExecResult {
        egress_denied: denied_list(&denied),
        exit_code: out.exit.exit_code,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        timed_out: out.exit.timed_out,
        duration_ms: out.exit.duration_ms,
        truncated: out.exit.truncated,
    }))
}

pub(super) fn line<T: Serialize>(value: &T) -> Bytes {
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// An error as the last line of an NDJSON answer, in the error body's shape.
pub(super) fn error_line(e: ConnError) -> Bytes {
    api_error_line(ApiError::from(e))
}

fn api_error_line(e: ApiError) -> Bytes {
    line(&ErrorBody {
        error: ErrorDetail {
            code: e.code.as_str().to_string(),
            message: e.message,
            field: None,
        },
    })
}

/// A streamed exec held for approval: the approval as the first line at once, then, once it is
/// allowed, the run's lines; or an error line (`approval_rejected`, `approval_expired`) and
/// nothing run. The client going away cancels the approval.
fn held_ndjson(
    st: AppState,
    id: String,
    held: HeldCommand,
    launch: Launch,
    stdin: Vec<u8>,
    outcome: LateOutcome,
) -> Response {
    let body = async_stream::stream! {
        yield Ok::<_, std::io::Error>(line(&ApprovalLine { approval: held.approval().clone().into() }));
        if let Err(refused) = held.decision().await {
            let e = ApiError::from(refused);
            outcome.tell(e.code.status());
            yield Ok(api_error_line(e));
            return;
        }
        outcome.tell(StatusCode::OK.as_u16());
        let conn = match st.lc.wake_conn(&id).await {
            Ok(c) => c,
            Err(e) => {
                yield Ok(api_error_line(e.into()));
                return;
            }
        };
        let denied = st.lc.egress_log().watch(&id);
        let run = match conn.exec(launch, stdin).await {
            Ok(r) => r,
            Err(e) => {
                yield Ok(api_error_line(e.into()));
                return;
            }
        };
        let lines = run_lines(run, denied);
        futures::pin_mut!(lines);
        while let Some(l) = futures::StreamExt::next(&mut lines).await {
            yield l;
        }
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, NDJSON)],
        Body::from_stream(body),
    )
        .into_response()
}

/// The first line of a streamed exec that waits for approval.
#[derive(Serialize)]
struct ApprovalLine {
    approval: Approval,
}

fn ndjson_response(run: ExecRun, denied: DeniedWatch) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, NDJSON)],
        Body::from_stream(run_lines(run, denied)),
    )
        .into_response()
}

/// A run's output and exit as NDJSON lines.
fn run_lines(
    mut run: ExecRun,
    denied: DeniedWatch,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    async_stream::stream! {
        let mut out = Utf8Decoder::default();
        let mut err = Utf8Decoder::default();
        while let Some(piece) = run.next().await {
            match piece {
                Ok(ExecPiece::Stdout(b)) => {
                    let text = out.decode(&b);
                    if !text.is_empty() {
                        yield Ok::<_, std::io::Error>(line(&ExecLine::Output { stream: OutputStream::Stdout, data: text }));
                    }
                }
                Ok(ExecPiece::Stderr(b)) => {
                    let text = err.decode(&b);
                    if !text.is_empty() {
                        yield Ok(line(&ExecLine::Output { stream: OutputStream::Stderr, data: text }));
                    }
                }
                Ok(ExecPiece::Exit(exit)) => {
                    for (stream, dec) in [(OutputStream::Stdout, &mut out), (OutputStream::Stderr, &mut err)] {
                        let rest = dec.finish();
                        if !rest.is_empty() {
                            yield Ok(line(&ExecLine::Output { stream, data: rest }));
                        }
                    }
                    let proto::ExecExit { exit_code, timed_out, duration_ms, truncated } = exit;
                    let egress_denied = denied_list(&denied);
                    yield Ok(line(&ExecLine::Exit(types::ExecExit { exit_code, timed_out, duration_ms, truncated, egress_denied })));
                }
                Err(e) => yield Ok(error_line(e)),
            }
        }
    }
}
