//! `/api/v1/agents`: the agents and their lifecycle actions.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, ApiJson, ErrorBody};
use super::types::{CreateAgent, Health, Limits, UpdateAgent};
use super::AppState;
use crate::config::{Preset, PresetInfo};
use crate::model::{new_agent_id, Agent, AgentPatch, NewAgent, MIN_DISK_MB};

/// Longest agent name: one DNS label.
const MAX_NAME: usize = 63;
/// Longest image reference Docker accepts in practice.
const MAX_IMAGE: usize = 255;
/// The longest idle time one can ask for: a week.
pub const MAX_IDLE_MINUTES: u32 = 7 * 24 * 60;

/// The server's limits and defaults for agents, files and exec.
#[utoipa::path(get, path = "/api/v1/limits", tag = "agents", operation_id = "getLimits",
    responses((status = 200, body = Limits)))]
pub async fn limits(State(st): State<AppState>) -> Json<Limits> {
    let sb = &st.config.sandbox;
    let server = &st.config.server;
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
    })
}

/// The preset called `name`, or a `400` that names the known ones.
fn find_preset<'a>(st: &'a AppState, name: &str) -> Result<&'a Preset, ApiError> {
    st.config.presets.get(name).ok_or_else(|| {
        let known: Vec<&str> = st.config.presets.keys().map(String::as_str).collect();
        let known = if known.is_empty() {
            "this server has none".to_string()
        } else {
            format!("the presets are: {}", known.join(", "))
        };
        let shown: String = name.chars().take(80).collect();
        ApiError::invalid_field("preset", format!("no preset {shown:?}; {known}"))
    })
}

fn check_env(env: &std::collections::BTreeMap<String, String>) -> Result<(), ApiError> {
    crate::agent_env::check(env)
        .map_err(|why| ApiError::invalid_field("env", format!("env: {why}")))
}

/// The presets agents can be created from, sorted by name.
#[utoipa::path(get, path = "/api/v1/presets", tag = "agents", operation_id = "listPresets",
    responses((status = 200, body = [PresetInfo])))]
pub async fn presets(State(st): State<AppState>) -> Json<Vec<PresetInfo>> {
    Json(st.config.preset_infos())
}

pub fn validate_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: &str| Err(ApiError::invalid_field("name", format!("name {why}")));
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > MAX_NAME {
        return bad(&format!("is longer than {MAX_NAME} characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("may only hold lowercase letters, digits and '-'");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("must start and end with a letter or digit");
    }
    Ok(())
}

/// An image reference is printable ASCII without spaces (Docker's references are ASCII), 1 to
/// [`MAX_IMAGE`] characters: the pattern the OpenAPI document states.
fn validate_image(image: &str) -> Result<(), ApiError> {
    if image.is_empty() || image.len() > MAX_IMAGE {
        return Err(ApiError::invalid_field(
            "image",
            format!("image must be 1 to {MAX_IMAGE} characters"),
        ));
    }
    if !image.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::invalid_field(
            "image",
            "image may hold only printable ASCII characters, without spaces",
        ));
    }
    Ok(())
}

/// A runtime this server allows (`sandbox.docker.allowed_runtimes`).
fn validate_runtime(st: &AppState, runtime: &str) -> Result<(), ApiError> {
    let runtimes = st.lc.runtimes();
    if runtimes.allows(runtime) {
        return Ok(());
    }
    let shown: String = runtime.chars().take(64).collect();
    Err(ApiError::invalid_field(
        "runtime",
        format!(
            "runtime {shown:?} is not allowed on this server; allowed: {}",
            runtimes.allowed.join(", ")
        ),
    ))
}

/// What an agent asks for; `None` leaves a setting to its default (or as it is).
struct Resources {
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    disk_mb: Option<u64>,
    idle: Option<u32>,
}

fn validate_resources(st: &AppState, r: Resources) -> Result<(), ApiError> {
    let Resources {
        cpus,
        memory_mb,
        disk_mb,
        idle,
    } = r;
    let sb = &st.config.sandbox;
    if let Some(c) = cpus {
        if !(c.is_finite() && c > 0.0 && c <= sb.max_cpus) {
            return Err(ApiError::invalid_field(
                "cpus",
                format!("cpus must be above 0 and at most {}", sb.max_cpus),
            ));
        }
    }
    if let Some(m) = memory_mb {
        if !(16..=sb.max_memory_mb).contains(&m) {
            return Err(ApiError::invalid_field(
                "memoryMb",
                format!("memoryMb must be between 16 and {}", sb.max_memory_mb),
            ));
        }
    }
    if let Some(d) = disk_mb {
        if let Some(why) = st.lc.disk_limits_unavailable() {
            return Err(ApiError::invalid_field(
                "diskMb",
                format!("this server cannot limit an agent's disk: {why}"),
            ));
        }
        if !(MIN_DISK_MB..=sb.max_disk_mb).contains(&d) {
            return Err(ApiError::invalid_field(
                "diskMb",
                format!(
                    "diskMb must be between {MIN_DISK_MB} and {}",
                    sb.max_disk_mb
                ),
            ));
        }
    }
    if let Some(i) = idle {
        if i > MAX_IDLE_MINUTES {
            return Err(ApiError::invalid_field(
                "idleMinutes",
                format!("idleMinutes must be at most {MAX_IDLE_MINUTES} (0 = never sleep)"),
            ));
        }
    }
    Ok(())
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

/// Every agent.
#[utoipa::path(get, path = "/api/v1/agents", tag = "agents", operation_id = "listAgents",
    responses((status = 200, body = [Agent])))]
pub async fn list(State(st): State<AppState>) -> Result<Json<Vec<Agent>>, ApiError> {
    Ok(Json(st.lc.list().await?))
}

/// Creates an agent; it goes on to `running` in the background.
#[utoipa::path(post, path = "/api/v1/agents", tag = "agents", operation_id = "createAgent", request_body = CreateAgent,
    responses((status = 201, body = Agent, description = "Created, in `creating`"),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint (`field` names it)"),
        (status = 409, body = ErrorBody, description = "The name is taken")))]
pub async fn create(
    State(st): State<AppState>,
    ApiJson(body): ApiJson<CreateAgent>,
) -> Result<(StatusCode, Json<Agent>), ApiError> {
    validate_name(&body.name)?;
    if let Some(image) = &body.image {
        validate_image(image)?;
    }
    validate_resources(
        &st,
        Resources {
            cpus: body.cpus,
            memory_mb: body.memory_mb,
            disk_mb: body.disk_mb,
            idle: body.idle_minutes,
        },
    )?;
    let sb = &st.config.sandbox;
    let preset_name = body.preset.clone().or_else(|| sb.default_preset.clone());
    let preset = match &preset_name {
        Some(name) => Some(find_preset(&st, name)?),
        None => None,
    };
    let from_preset = preset.cloned().unwrap_or_default();
    if let Some(env) = &body.env {
        check_env(env)?;
    }
    let mut env = from_preset.env;
    env.extend(body.env.unwrap_or_default());
    check_env(&env)?;
    let disk_default = from_preset.disk_mb.unwrap_or(sb.default_disk_mb);
    // A preset's runtime is checked here, against what this engine allows now, like one the
    // request names.
    let runtime = body.runtime.or(from_preset.runtime);
    if let Some(runtime) = &runtime {
        validate_runtime(&st, runtime)?;
    }
    let new = NewAgent {
        id: new_agent_id(),
        name: body.name,
        image: body
            .image
            .or(from_preset.image)
            .unwrap_or_else(|| sb.default_image.clone()),
        cpus: body.cpus.or(from_preset.cpus).unwrap_or(sb.default_cpus),
        memory_mb: body
            .memory_mb
            .or(from_preset.memory_mb)
            .unwrap_or(sb.default_memory_mb),
        disk_mb: body.disk_mb.or((disk_default > 0).then_some(disk_default)),
        idle_minutes: body
            .idle_minutes
            .or(from_preset.idle_minutes)
            .unwrap_or(sb.default_idle_minutes),
        egress: body
            .egress
            .or(from_preset.egress)
            .unwrap_or_else(|| sb.egress.default.clone()),
        preset: preset_name,
        env,
        runtime: runtime.unwrap_or_else(|| st.lc.runtimes().default.clone()),
    };
    let agent = st.lc.create(new).await?;
    Ok((StatusCode::CREATED, Json(agent)))
}

/// One agent.
#[utoipa::path(get, path = "/api/v1/agents/{id}", tag = "agents", operation_id = "getAgent",
    params(("id" = String, Path, description = "The agent's id")), responses((status = 200, body = Agent), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Agent>, ApiError> {
    Ok(Json(st.lc.get(&id).await?))
}

/// Changes settings; a changed image, resource or runtime sets `needsRebuild`.
#[utoipa::path(patch, path = "/api/v1/agents/{id}", tag = "agents", operation_id = "updateAgent", request_body = UpdateAgent,
    params(("id" = String, Path, description = "The agent's id")),
    responses((status = 200, body = Agent),
        (status = 400, body = ErrorBody, description = "A field breaks its constraint, or `diskMb` is smaller than the home's (or the home has no limit)"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The name is taken, or the agent's state does not allow a change")))]
pub async fn update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateAgent>,
) -> Result<Json<Agent>, ApiError> {
    if let Some(name) = &body.name {
        validate_name(name)?;
    }
    if let Some(image) = &body.image {
        validate_image(image)?;
    }
    validate_resources(
        &st,
        Resources {
            cpus: body.cpus,
            memory_mb: body.memory_mb,
            disk_mb: body.disk_mb,
            idle: body.idle_minutes,
        },
    )?;
    if let Some(env) = &body.env {
        check_env(env)?;
    }
    if let Some(runtime) = &body.runtime {
        validate_runtime(&st, runtime)?;
    }
    let patch = AgentPatch {
        name: body.name,
        image: body.image,
        cpus: body.cpus,
        memory_mb: body.memory_mb,
        disk_mb: body.disk_mb,
        idle_minutes: body.idle_minutes,
        egress: body.egress,
        env: body.env,
        runtime: body.runtime,
    };
    Ok(Json(st.lc.patch(&id, patch).await?))
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
            Ok((StatusCode::ACCEPTED, Json(st.lc.$name(&id).await?)))
        }
    };
}

agent_action! {
    /// Destroys the agent: its sandbox, home volume and network, then the agent itself.
    destroy: delete "/api/v1/agents/{id}", "destroyAgent"
}

agent_action! {
    /// Starts a sleeping (or failed) agent.
    start: post "/api/v1/agents/{id}/start", "startAgent"
}

agent_action! {
    /// Puts a running agent to sleep: processes end, the disk stays.
    stop: post "/api/v1/agents/{id}/stop", "stopAgent"
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
    Ok((StatusCode::ACCEPTED, Json(st.lc.rerun_setup(&id).await?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_dns_labels() {
        for ok in ["a", "builder", "agent-7", &"x".repeat(63)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Builder",
            "-a",
            "a-",
            "a_b",
            "a.b",
            "ä",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
