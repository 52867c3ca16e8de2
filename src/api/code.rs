//! `POST /api/v1/agents/{id}/code` and `/code/contexts`: code run in a kernel that keeps its
//! variables between runs (see [`crate::code`]). Answers with the whole run, or streams NDJSON
//! when asked to.

use agenthold_proto::CodeEvent;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::error::{ApiError, ApiJson, ApiQuery, ErrorBody};
use super::exec::{error_line, line, NDJSON};
use super::types::{CodeContext, Execution, RunCode};
use super::AppState;
use crate::code::{check_run, collect, kernel_env};
use crate::launch::exec_timeout;
use crate::tunnel::conn::CodeRunStream;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CodeQuery {
    /// `true`: NDJSON lines as the run goes (as `Accept: application/x-ndjson` does).
    #[serde(default)]
    pub stream: Option<bool>,
}

/// Runs code in a context's kernel; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/code", tag = "code", operation_id = "runCode", request_body = RunCode,
    params(("id" = String, Path, description = "The agent's id"), CodeQuery),
    responses((status = 200, body = Execution, description = "The run, once it has ended; with `?stream=true` (or `Accept: application/x-ndjson`), NDJSON lines as it goes: `{\"stdout\": text}`, `{\"stderr\": text}`, `{\"result\": {mime: data}}`, `{\"error\": {name, value, traceback}}`, and last `{\"done\": {executionCount, truncated}}`; a lost sandbox connection ends it with an `ErrorBody` line (`{\"error\": {code, message}}`) instead"),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint (`field` names it: `language`, `context`, `timeoutMs`)"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such context"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken; or its image has no `python3-ipykernel`; or it has 16 contexts already and this run would make the default one"),
        (status = 413, body = ErrorBody, description = "`code` is over 1 MiB"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn run(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<CodeQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RunCode>,
) -> Result<Response, ApiError> {
    let timeout_ms = exec_timeout(body.timeout_ms, &st.config().server)?;
    let agent = st.lc.get(&id).await?;
    let run = check_run(
        body.code,
        body.language.as_deref(),
        body.context,
        timeout_ms,
        &agent.env,
    )?;
    let streaming = q.stream.unwrap_or(false)
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains(NDJSON));
    let conn = st.lc.wake_conn(&id).await?;
    // Checked above with the agent's env; sent with this boot's placeholders too.
    let mut run = run;
    run.env = kernel_env(&conn.launch_env(&agent))?;
    let run = conn.run_code(run).await?;
    if streaming {
        return Ok(ndjson_response(run));
    }
    Ok(Json(Execution::from(collect(run).await?)).into_response())
}

fn ndjson_response(mut run: CodeRunStream) -> Response {
    let body = async_stream::stream! {
        while let Some(event) = run.next().await {
            match event {
                Ok(CodeEvent::Error(e)) => {
                    yield Ok::<_, std::io::Error>(line(&serde_json::json!({
                        "error": super::types::CodeError::from(e)
                    })));
                }
                Ok(event) => yield Ok(line(&event)),
                Err(e) => yield Ok(error_line(e)),
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

/// Makes a context: a kernel of its own, started at once; wakes a sleeping agent first.
#[utoipa::path(post, path = "/api/v1/agents/{id}/code/contexts", tag = "code", operation_id = "createCodeContext",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 201, body = CodeContext, description = "Made, its kernel ready"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken; or its image has no `python3-ipykernel`; or it has 16 contexts already"),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn create_context(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<CodeContext>), ApiError> {
    let agent = st.lc.get(&id).await?;
    let conn = st.lc.wake_conn(&id).await?;
    let env = kernel_env(&conn.launch_env(&agent))?;
    let made = conn.create_code_context(env).await?;
    Ok((StatusCode::CREATED, Json(made.into())))
}

/// The agent's contexts, oldest first. Never wakes the agent: kernels end when it sleeps, so
/// a sleeping agent has none (`[]`).
#[utoipa::path(get, path = "/api/v1/agents/{id}/code/contexts", tag = "code", operation_id = "listCodeContexts",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [CodeContext]), (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "The sandbox connection failed; see `Retry-After`")))]
pub async fn list_contexts(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<CodeContext>>, ApiError> {
    let all = st.lc.list_code_contexts(&id).await?;
    Ok(Json(all.into_iter().map(Into::into).collect()))
}

/// Starts the context's kernel anew: its variables are gone (a run in it ends with
/// `KernelDied`). Wakes a sleeping agent first; the default context is made if need be.
#[utoipa::path(post, path = "/api/v1/agents/{id}/code/contexts/{cid}/restart", tag = "code", operation_id = "restartCodeContext",
    params(("id" = String, Path, description = "The agent's id"), ("cid" = String, Path, description = "The context's id, or `default`", pattern = "^(default|[a-z0-9]{16})$")),
    responses((status = 200, body = CodeContext, description = "Restarted, its kernel ready"),
        (status = 400, body = ErrorBody, description = "`cid` is not a context id"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such context"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken, or its image has no `python3-ipykernel`"),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn restart_context(
    State(st): State<AppState>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<Json<CodeContext>, ApiError> {
    check_context(&cid)?;
    let agent = st.lc.get(&id).await?;
    let conn = st.lc.wake_conn(&id).await?;
    let env = kernel_env(&conn.launch_env(&agent))?;
    Ok(Json(conn.restart_code_context(&cid, env).await?.into()))
}

/// Kills the context's kernel and everything it started, and forgets the context. Wakes a
/// sleeping agent first.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/code/contexts/{cid}", tag = "code", operation_id = "removeCodeContext",
    params(("id" = String, Path, description = "The agent's id"), ("cid" = String, Path, description = "The context's id, or `default`", pattern = "^(default|[a-z0-9]{16})$")),
    responses((status = 204, description = "Gone"),
        (status = 400, body = ErrorBody, description = "`cid` is not a context id"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such context"),
        (status = 409, body = ErrorBody, description = "The agent cannot be woken"),
        (status = 429, body = ErrorBody, description = "Too many channels open to the agent; try again after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "The agent did not wake within `server.wake_timeout`, or the sandbox connection failed; see `Retry-After`")))]
pub async fn remove_context(
    State(st): State<AppState>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    check_context(&cid)?;
    let conn = st.lc.wake_conn(&id).await?;
    conn.remove_code_context(&cid).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn check_context(cid: &str) -> Result<(), ApiError> {
    agenthold_proto::check_context_id(cid).map_err(|e| ApiError {
        field: Some("cid"),
        ..ApiError::invalid(e.to_string())
    })
}
