//! `/api/v1/agents`: the agents and their lifecycle actions. What a request may ask for is
//! [`crate::agents::spec`]'s business; the handlers here read it, hand it on and answer.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;

use super::access::sees_agent;
use super::audit::AuditNote;
use super::error::{ApiError, ApiJson, ErrorBody};
use super::types::{
    Agent, AgentState, CreateAgent, EgressLogEntry, HarnessInfo, Health, KeepAlive, Limits,
    PoolInfo, PresetInfo, UpdateAgent,
};
use super::AppState;
use crate::agents::labels::AgentFilter;
use crate::agents::spec::{self, AgentRequest, Allowed, MAX_IDLE_MINUTES};
use crate::config::Config;
use crate::model::AgentPatch;
use crate::teams::access::Standing;
use crate::teams::Principal;

/// The server's limits and defaults for agents, files and exec.
#[utoipa::path(get, path = "/api/v1/limits", tag = "agents", operation_id = "getLimits",
    responses((status = 200, body = Limits)))]
pub async fn limits(State(st): State<AppState>) -> Json<Limits> {
    let config = st.config();
    let (sb, server) = (&config.sandbox, &config.server);
    Json(Limits {
        default_image: sb.default_image.clone(),
        default_cpus: sb.default_cpus,
        default_memory_mb: sb.default_memory_mb,
        default_idle_minutes: sb.default_idle_minutes,
        max_cpus: sb.max_cpus,
        max_memory_mb: sb.max_memory_mb,
        default_disk_mb: (sb.default_disk_mb > 0).then_some(sb.default_disk_mb),
        max_disk_mb: st
            .lc
            .disk_limits_unavailable()
            .is_none()
            .then_some(sb.max_disk_mb),
        tmp_mb: (sb.tmp_mb > 0).then_some(sb.tmp_mb),
        rootfs_mb: st.lc.rootfs_limit_mb(),
        max_idle_minutes: MAX_IDLE_MINUTES,
        max_file_mb: server.max_file_mb,
        exec_output_cap_kb: server.exec_output_cap_kb,
        exec_default_timeout_ms: server.exec_default_timeout.as_millis() as u64,
        exec_max_timeout_ms: server.exec_max_timeout.as_millis() as u64,
        runtimes: st.lc.runtimes().allowed.clone(),
        harnesses: config
            .harnesses
            .iter()
            .map(|(name, h)| HarnessInfo {
                name: name.clone(),
                description: h.description.clone(),
            })
            .collect(),
        default_harness: sb.default_harness.clone(),
    })
}

/// The presets agents can be created from, sorted by name.
#[utoipa::path(get, path = "/api/v1/presets", tag = "agents", operation_id = "listPresets",
    responses((status = 200, body = [PresetInfo])))]
pub async fn presets(State(st): State<AppState>) -> Json<Vec<PresetInfo>> {
    Json(
        st.config()
            .preset_infos()
            .into_iter()
            .map(Into::into)
            .collect(),
    )
}

/// Each preset's warm pool (presets with `warm` above 0, and any whose entries are being
/// removed), sorted by preset.
#[utoipa::path(get, path = "/api/v1/pool", tag = "agents", operation_id = "listPools",
    responses((status = 200, body = [PoolInfo])))]
pub async fn pool(State(st): State<AppState>) -> Result<Json<Vec<PoolInfo>>, ApiError> {
    Ok(Json(
        st.lc
            .pool_status()
            .await?
            .into_iter()
            .map(Into::into)
            .collect(),
    ))
}

/// Liveness, version and driver; needs no token.
#[utoipa::path(get, path = "/api/v1/health", tag = "agents", operation_id = "getHealth", security(),
    responses((status = 200, body = Health)))]
pub async fn health(State(st): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        driver: st.lc.driver_kind().into(),
    })
}

/// The filters of `GET /api/v1/agents`, for the document; [`AgentFilter::from_query`] reads
/// them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ListQuery {
    /// `key=value`: agents with that label and value; `key`: with that label, whatever its
    /// value. Repeat it for more (all must hold).
    #[param(style = Form, explode, pattern = "^[a-z0-9._/-]{1,63}(=.*)?$", example = json!(["team=ml"]))]
    label: Option<Vec<String>>,
    /// Only agents in this state.
    state: Option<AgentState>,
    /// Only agents made from this preset.
    #[param(example = "dev")]
    preset: Option<String>,
    /// Only the agent with this name (and one being destroyed that had it).
    #[param(example = "builder")]
    name: Option<String>,
}

/// Every agent, oldest first; the filters (`label`, `state`, `preset`, `name`) combine: an agent is
/// listed when all of them hold.
#[utoipa::path(get, path = "/api/v1/agents", tag = "agents", operation_id = "listAgents",
    params(ListQuery),
    responses((status = 200, body = [Agent]),
        (status = 400, body = ErrorBody, description = "A filter is not one (`field` names it)")))]
pub async fn list(
    State(st): State<AppState>,
    principal: Principal,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Agent>>, ApiError> {
    let pairs = form_urlencoded::parse(query.as_deref().unwrap_or_default().as_bytes());
    let filter = AgentFilter::from_query(pairs)
        .map_err(|(field, why)| ApiError::invalid_field(field, why))?;
    Ok(Json(
        st.lc
            .list()
            .await?
            .into_iter()
            .filter(|a| sees_agent(&st, &principal, &a.id) && filter.matches(a))
            .map(Into::into)
            .collect(),
    ))
}

/// Creates an agent; it goes on to `running` in the background.
#[utoipa::path(post, path = "/api/v1/agents", tag = "agents", operation_id = "createAgent", request_body = CreateAgent,
    responses((status = 201, body = Agent, description = "Created, in `creating`"),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint (`field` names it)"),
        (status = 403, body = ErrorBody, description = "`secrets` names a secret the preset does not grant, and the caller is not an admin (only admins grant secrets)"),
        (status = 409, body = ErrorBody, description = "The name is taken (names are unique on the server; the answer does not say by which agent)")))]
pub async fn create(
    State(st): State<AppState>,
    note: AuditNote,
    principal: Principal,
    ApiJson(body): ApiJson<CreateAgent>,
) -> Result<(StatusCode, Json<Agent>), ApiError> {
    let config = st.config();
    let mut new = spec::resolve(body.into(), &allowed(&st, &config))?;
    let preset_grants = new
        .preset
        .as_ref()
        .and_then(|p| config.presets.get(p))
        .map(|p| p.secrets.clone())
        .unwrap_or_default();
    crate::agents::grants::may_grant(principal.is_admin(), &new.secrets, &preset_grants)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    new.owner_id = principal.user_id;
    let agent = st.lc.create(new).await?;
    note.agent(&agent.id, &agent.name);
    Ok((StatusCode::CREATED, Json(agent.into())))
}

/// One agent.
#[utoipa::path(get, path = "/api/v1/agents/{id}", tag = "agents", operation_id = "getAgent",
    params(("id" = String, Path, description = "The agent's id")), responses((status = 200, body = Agent, description = "The agent; one whose `DELETE` was accepted (`202`) answers as `destroying` until it is gone"), (status = 404, body = ErrorBody, description = "No such agent, or one destroyed to the end")))]
pub async fn get(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Agent>, ApiError> {
    Ok(Json(st.lc.get(&id).await?.into()))
}

/// Changes settings; a changed image, resource, runtime or `allowRoot` sets `needsRebuild`.
#[utoipa::path(patch, path = "/api/v1/agents/{id}", tag = "agents", operation_id = "updateAgent", request_body = UpdateAgent,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = Agent),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint, or `diskMb` on a server that cannot limit disks"),
        (status = 403, body = ErrorBody, description = "`access` by an operator (only the owner and admins change it); `secrets` adding a secret, by anyone but an admin (only admins grant secrets)"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The name is taken, the agent's state does not allow a change, or `diskMb` is smaller than the home's (or the home has no limit)")))]
pub async fn update(
    State(st): State<AppState>,
    standing: Standing,
    principal: Principal,
    Path(id): Path<String>,
    note: AuditNote,
    ApiJson(body): ApiJson<UpdateAgent>,
) -> Result<Json<Agent>, ApiError> {
    let patch = AgentPatch::from(body);
    if let Some(requested) = &patch.secrets {
        let held = st.lc.get(&id).await?.secrets;
        crate::agents::grants::may_grant(principal.is_admin(), requested, &held)
            .map_err(|e| ApiError::forbidden(e.to_string()))?;
    }
    note.detail(crate::audit::detail::agent_update(&patch));
    let config = st.config();
    spec::check_patch(&patch, &allowed(&st, &config))?;
    Ok(Json(st.lc.patch(&id, patch, standing).await?.into()))
}

/// Restarts the agent's lifetime from now: `ttlMinutes` (or its own again) until it is
/// destroyed; `expiresAt` moves.
#[utoipa::path(post, path = "/api/v1/agents/{id}/keep-alive", tag = "agents", operation_id = "keepAgentAlive", request_body = KeepAlive,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = Agent),
        (status = 400, body = ErrorBody, description = "`ttlMinutes` is out of bounds"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent is being destroyed, or has no TTL and the request gives none")))]
pub async fn keep_alive(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<KeepAlive>,
) -> Result<Json<Agent>, ApiError> {
    if let Some(ttl) = body.ttl_minutes {
        spec::check_ttl_minutes(ttl)?;
    }
    Ok(Json(st.lc.keep_alive(&id, body.ttl_minutes).await?.into()))
}

/// The agent's recent egress decisions, oldest first: the last 200, kept in the server's memory
/// (so none after a restart).
#[utoipa::path(get, path = "/api/v1/agents/{id}/egress/log", tag = "agents", operation_id = "egressLog",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = [EgressLogEntry], description = "Oldest first; an allowed connection's `bytesUp` and `bytesDown` are null until it closes"),
        (status = 404, body = ErrorBody)))]
pub async fn egress_log(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<EgressLogEntry>>, ApiError> {
    let agent = st.lc.get(&id).await?;
    let entries = st.lc.egress_log().entries(&agent.id);
    Ok(Json(entries.into_iter().map(Into::into).collect()))
}

/// Declares a route that runs one lifecycle action on an agent and answers `202` with the
/// agent: the handler `$name` calls the lifecycle's method of the same name.
macro_rules! agent_action {
    ($(#[doc = $doc:tt])* $name:ident: $method:ident $path:tt, $operation:tt) => {
        $(#[doc = $doc])*
        #[utoipa::path($method, path = $path, tag = "agents", operation_id = $operation,
            params(("id" = String, Path, description = "The agent's id")),
            responses((status = 202, body = Agent), (status = 404, body = ErrorBody),
                (status = 409, body = ErrorBody, description = "The agent's state does not allow it (the message names the state)")))]
        pub async fn $name(
            State(st): State<AppState>,
            Path(id): Path<String>,
        ) -> Result<(StatusCode, Json<Agent>), ApiError> {
            Ok((StatusCode::ACCEPTED, Json(st.lc.$name(&id).await?.into())))
        }
    };
}

agent_action! {
    /// Destroys the agent: its sandbox, home volume and network, then the agent itself.
    destroy: delete "/api/v1/agents/{id}", "destroyAgent"
}

/// Starts a sleeping (or failed) agent, or thaws a paused one. One that is stopping is started once its stop is over:
/// the answer waits for that, at most `server.wake_timeout`.
#[utoipa::path(post, path = "/api/v1/agents/{id}/start", tag = "agents", operation_id = "startAgent",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 202, body = Agent), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent's state does not allow it (the message names the state)"),
        (status = 503, body = ErrorBody, description = "The agent was stopping and its stop did not end within `server.wake_timeout`; see `Retry-After`")))]
pub async fn start(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Agent>), ApiError> {
    Ok((StatusCode::ACCEPTED, Json(st.lc.start(&id).await?.into())))
}

agent_action! {
    /// Puts a running (or paused) agent to sleep: processes end, the disk stays.
    stop: post "/api/v1/agents/{id}/stop", "stopAgent"
}

agent_action! {
    /// Pauses a running agent now: its sandbox is frozen, keeping processes, memory and terminal
    /// sessions; any use (or a start) thaws it. It is stopped after its `deepSleepMinutes`.
    pause: post "/api/v1/agents/{id}/pause", "pauseAgent"
}

agent_action! {
    /// Recreates the sandbox from the current image and resources, keeping the home.
    rebuild: post "/api/v1/agents/{id}/rebuild", "rebuildAgent"
}

/// Runs the preset's setup script again now, as a background process tagged `setup`.
#[utoipa::path(post, path = "/api/v1/agents/{id}/setup", tag = "agents", operation_id = "rerunSetup",
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 202, body = Agent, description = "Started (a sleeping agent is woken first); `setup` says how it stands"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The agent has no setup script, its setup runs already, or it cannot be woken"),
        (status = 503, body = ErrorBody)))]
pub async fn rerun_setup(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Agent>), ApiError> {
    Ok((
        StatusCode::ACCEPTED,
        Json(st.lc.rerun_setup(&id).await?.into()),
    ))
}

/// What this server offers agents now: its config in force, and what its engine can do.
fn allowed<'a>(st: &'a AppState, config: &'a Config) -> Allowed<'a> {
    Allowed {
        defaults: config.sandbox.agent_defaults(),
        presets: &config.presets,
        runtimes: st.lc.runtimes(),
        no_disk_limits: st.lc.disk_limits_unavailable(),
    }
}

impl From<CreateAgent> for AgentRequest {
    fn from(body: CreateAgent) -> AgentRequest {
        AgentRequest {
            name: body.name,
            preset: body.preset,
            image: body.image,
            cpus: body.cpus,
            memory_mb: body.memory_mb,
            disk_mb: body.disk_mb,
            idle_minutes: body.idle_minutes,
            deep_sleep_minutes: body.deep_sleep_minutes,
            egress: body.egress.map(Into::into),
            env: body.env,
            secrets: body.secrets,
            runtime: body.runtime,
            ttl_minutes: body.ttl_minutes,
            labels: body.labels,
            allow_root: body.allow_root,
            approvals: body.approvals,
            access: body.access,
        }
    }
}

impl From<UpdateAgent> for AgentPatch {
    fn from(body: UpdateAgent) -> AgentPatch {
        AgentPatch {
            name: body.name,
            image: body.image,
            cpus: body.cpus,
            memory_mb: body.memory_mb,
            disk_mb: body.disk_mb,
            idle_minutes: body.idle_minutes,
            deep_sleep_minutes: body.deep_sleep_minutes,
            egress: body.egress.map(Into::into),
            egress_default: Default::default(),
            env: body.env,
            secrets: body.secrets,
            runtime: body.runtime,
            ttl_minutes: body.ttl_minutes,
            expires_at: None,
            labels: body.labels,
            allow_root: body.allow_root,
            approvals: body.approvals,
            access: body.access,
        }
    }
}
