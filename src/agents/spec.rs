//! The rules of an agent's settings (its name, image, resources, idle time, env and runtime),
//! checked the same way wherever an agent is asked for, and [`resolve`], which merges a request
//! with its preset and the server's defaults into the [`NewAgent`] the lifecycle makes.
//! [`check_patch`] checks a change to an agent by the same rules.

use std::collections::BTreeMap;

use super::defaults::Defaults;
use super::env;
use super::grants;
use super::labels;
use super::preset::Preset;
use super::runtimes::Runtimes;
use crate::egress::EgressRules;
use crate::model::teams::AgentApprovals;
use crate::model::{new_agent_id, AgentPatch, NewAgent};

/// Longest agent name: one DNS label.
pub const MAX_NAME: usize = 63;
/// Longest image reference Docker accepts in practice.
pub const MAX_IMAGE: usize = 255;
/// The longest idle time one can ask for: a week.
pub const MAX_IDLE_MINUTES: u32 = 7 * 24 * 60;
/// The longest lifetime one can ask for (`ttlMinutes`): a year.
pub const MAX_TTL_MINUTES: u32 = 365 * 24 * 60;
/// The least memory an agent may have, in MiB: Docker refuses limits under 6 MB, and nothing
/// useful runs in less than 16.
pub const MIN_MEMORY_MB: u64 = 16;
/// The smallest home an agent may have (`diskMb`): ext4's own structures take a few MiB, and a
/// shell's dotfiles need room besides.
pub const MIN_DISK_MB: u64 = 64;

/// A setting that breaks its rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{why}")]
pub struct SpecError {
    /// The setting's camelCase name, as the API's bodies and a preset's keys spell it.
    pub field: &'static str,
    /// What is wrong with it, as one sentence for the person who asked.
    pub why: String,
}

impl SpecError {
    fn new(field: &'static str, why: impl Into<String>) -> SpecError {
        SpecError {
            field,
            why: why.into(),
        }
    }
}

/// What is asked of a new agent; a setting left out comes from its preset, else from the
/// server's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentRequest {
    pub name: String,
    /// `sandbox.default_preset` when `None`.
    pub preset: Option<String>,
    pub image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub disk_mb: Option<u64>,
    pub idle_minutes: Option<u32>,
    pub deep_sleep_minutes: Option<u32>,
    pub egress: Option<EgressRules>,
    /// Merged over the preset's variables; these win.
    pub env: Option<BTreeMap<String, String>>,
    /// Granted secrets' names; replaces the preset's list when given (`[]` for none).
    pub secrets: Option<Vec<String>>,
    pub runtime: Option<String>,
    /// `Some(None)`: no lifetime, whatever the preset says; `None`: the preset's.
    pub ttl_minutes: Option<Option<u32>>,
    /// Merged over the preset's labels; these win.
    pub labels: Option<BTreeMap<String, String>>,
    /// The preset's when `None`.
    pub allow_root: Option<bool>,
    /// The preset's when `None`.
    pub approvals: Option<AgentApprovals>,
    /// `private` when `None`.
    pub access: Option<crate::model::teams::AgentAccess>,
}

/// What this server offers agents: its defaults and ceilings, its presets, and what its engine
/// can do.
#[derive(Debug, Clone)]
pub struct Allowed<'a> {
    pub defaults: Defaults,
    pub presets: &'a BTreeMap<String, Preset>,
    pub runtimes: &'a Runtimes,
    /// Why this server cannot limit a home's size, when it cannot: then no `diskMb` is taken.
    pub no_disk_limits: Option<String>,
}

/// The new agent `request` asks for, with the server's rules checked and the blanks filled from
/// its preset and the server's defaults; or the first setting that breaks its rule.
pub fn resolve(request: AgentRequest, allowed: &Allowed) -> Result<NewAgent, SpecError> {
    check_name(&request.name)?;
    check_shared(
        Shared {
            image: request.image.as_deref(),
            cpus: request.cpus,
            memory_mb: request.memory_mb,
            disk_mb: request.disk_mb,
            idle_minutes: request.idle_minutes,
            deep_sleep_minutes: request.deep_sleep_minutes,
        },
        allowed,
    )?;
    let sb = &allowed.defaults;
    let preset_name = request.preset.or_else(|| sb.preset.clone());
    let no_preset = Preset::default();
    let preset = match &preset_name {
        Some(name) => find_preset(allowed.presets, name)?,
        None => &no_preset,
    };
    // The request's own variables alone first, so that a refusal counts the caller's variables
    // rather than the merge's.
    if let Some(env) = &request.env {
        check_env(env)?;
    }
    let mut env = preset.env.clone();
    env.extend(request.env.unwrap_or_default());
    check_env(&env)?;
    let secrets = request.secrets.unwrap_or_else(|| preset.secrets.clone());
    check_secrets(&secrets)?;
    if let Some(labels) = &request.labels {
        check_labels(labels)?;
    }
    let mut labels = preset.labels.clone();
    labels.extend(request.labels.unwrap_or_default());
    check_labels(&labels)?;
    if let Some(Some(ttl)) = request.ttl_minutes {
        check_ttl_minutes(ttl)?;
    }
    let ttl_minutes = request.ttl_minutes.unwrap_or(preset.ttl_minutes);
    // A preset's runtime is checked here, against what this engine allows now, like one the
    // request names.
    let runtime = request.runtime.or_else(|| preset.runtime.clone());
    if let Some(runtime) = &runtime {
        check_runtime(runtime, allowed.runtimes)?;
    }
    // 0 is a home without a limit: such an agent has no `diskMb`.
    let disk_default = preset.disk_mb.unwrap_or(sb.disk_mb);
    Ok(NewAgent {
        id: new_agent_id(),
        name: request.name,
        image: request
            .image
            .or_else(|| preset.image.clone())
            .unwrap_or_else(|| sb.image.clone()),
        cpus: request.cpus.or(preset.cpus).unwrap_or(sb.cpus),
        memory_mb: request
            .memory_mb
            .or(preset.memory_mb)
            .unwrap_or(sb.memory_mb),
        disk_mb: request
            .disk_mb
            .or((disk_default > 0).then_some(disk_default)),
        idle_minutes: request
            .idle_minutes
            .or(preset.idle_minutes)
            .unwrap_or(sb.idle_minutes),
        deep_sleep_minutes: request
            .deep_sleep_minutes
            .or(preset.deep_sleep_minutes)
            .unwrap_or(sb.deep_sleep_minutes),
        egress: request
            .egress
            .or_else(|| preset.egress.clone())
            .unwrap_or_else(|| sb.egress.clone()),
        preset: preset_name,
        env,
        secrets,
        runtime: runtime.unwrap_or_else(|| allowed.runtimes.default.clone()),
        ttl_minutes,
        expires_at: None,
        labels,
        allow_root: request.allow_root.unwrap_or(preset.allow_root),
        approvals: request.approvals.unwrap_or(preset.approvals),
        access: request.access.or(preset.access).unwrap_or_default(),
        // The caller's: [`crate::api`] fills it in from the request's principal.
        owner_id: String::new(),
    })
}

/// Checks each setting `patch` changes by the rules a new agent's follow. What depends on the
/// agent as it is (a home only grows: [`check_disk_change`]) is checked where it is read.
pub fn check_patch(patch: &AgentPatch, allowed: &Allowed) -> Result<(), SpecError> {
    if let Some(name) = &patch.name {
        check_name(name)?;
    }
    check_shared(
        Shared {
            image: patch.image.as_deref(),
            cpus: patch.cpus,
            memory_mb: patch.memory_mb,
            disk_mb: patch.disk_mb,
            idle_minutes: patch.idle_minutes,
            deep_sleep_minutes: patch.deep_sleep_minutes,
        },
        allowed,
    )?;
    if let Some(env) = &patch.env {
        check_env(env)?;
    }
    if let Some(secrets) = &patch.secrets {
        check_secrets(secrets)?;
    }
    if let Some(runtime) = &patch.runtime {
        check_runtime(runtime, allowed.runtimes)?;
    }
    if let Some(labels) = &patch.labels {
        check_labels(labels)?;
    }
    // 0 in a change is no lifetime, as null is.
    if let Some(Some(ttl)) = patch.ttl_minutes {
        if ttl > 0 {
            check_ttl_minutes(ttl)?;
        }
    }
    Ok(())
}

/// 1 to [`MAX_TTL_MINUTES`] (a year).
pub fn check_ttl_minutes(ttl_minutes: u32) -> Result<(), SpecError> {
    if (1..=MAX_TTL_MINUTES).contains(&ttl_minutes) {
        return Ok(());
    }
    Err(SpecError::new(
        "ttlMinutes",
        format!("ttlMinutes must be between 1 and {MAX_TTL_MINUTES} (a year)"),
    ))
}

/// An agent's labels, by [`labels::check`]'s rules.
pub fn check_labels(map: &BTreeMap<String, String>) -> Result<(), SpecError> {
    labels::check(map).map_err(|why| SpecError::new("labels", format!("labels: {why}")))
}

/// An agent's name is one DNS label: lowercase letters, digits and '-' (not at either end), at
/// most [`MAX_NAME`].
pub fn check_name(name: &str) -> Result<(), SpecError> {
    let bad = |why: &str| Err(SpecError::new("name", format!("name {why}")));
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
pub fn check_image(image: &str) -> Result<(), SpecError> {
    if image.is_empty() || image.len() > MAX_IMAGE {
        return Err(SpecError::new(
            "image",
            format!("image must be 1 to {MAX_IMAGE} characters"),
        ));
    }
    if !image.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SpecError::new(
            "image",
            "image may hold only printable ASCII characters, without spaces",
        ));
    }
    Ok(())
}

/// Above 0 and at most `sandbox.max_cpus`.
pub fn check_cpus(cpus: f64, max_cpus: f64) -> Result<(), SpecError> {
    if cpus.is_finite() && cpus > 0.0 && cpus <= max_cpus {
        return Ok(());
    }
    Err(SpecError::new(
        "cpus",
        format!("cpus must be above 0 and at most {max_cpus}"),
    ))
}

/// [`MIN_MEMORY_MB`] to `sandbox.max_memory_mb`.
pub fn check_memory_mb(memory_mb: u64, max_memory_mb: u64) -> Result<(), SpecError> {
    if (MIN_MEMORY_MB..=max_memory_mb).contains(&memory_mb) {
        return Ok(());
    }
    Err(SpecError::new(
        "memoryMb",
        format!("memoryMb must be between {MIN_MEMORY_MB} and {max_memory_mb}"),
    ))
}

/// [`MIN_DISK_MB`] to `sandbox.max_disk_mb`: the size of a home with a limit. Whether this
/// server can limit one at all is [`Allowed::no_disk_limits`].
pub fn check_disk_mb(disk_mb: u64, max_disk_mb: u64) -> Result<(), SpecError> {
    if (MIN_DISK_MB..=max_disk_mb).contains(&disk_mb) {
        return Ok(());
    }
    Err(SpecError::new(
        "diskMb",
        format!("diskMb must be between {MIN_DISK_MB} and {max_disk_mb}"),
    ))
}

/// A home's limit may grow; a smaller one would lose files, and a home without one has its
/// files on the host's disk, outside any image.
pub fn check_disk_change(old: Option<u64>, new: Option<u64>) -> Result<(), SpecError> {
    match (old, new) {
        (_, None) => Ok(()),
        (None, Some(_)) => Err(SpecError::new(
            "diskMb",
            "this agent's home has no disk limit (it was made without one); its size cannot be \
             set now: make a new agent with diskMb and copy the files over",
        )),
        (Some(o), Some(n)) if n < o => Err(SpecError::new(
            "diskMb",
            format!("diskMb can only grow: the home holds {o} MiB, not less ({n} asked)"),
        )),
        _ => Ok(()),
    }
}

/// At most [`MAX_IDLE_MINUTES`]; 0 is an agent that never sleeps.
pub fn check_idle_minutes(idle_minutes: u32) -> Result<(), SpecError> {
    if idle_minutes <= MAX_IDLE_MINUTES {
        return Ok(());
    }
    Err(SpecError::new(
        "idleMinutes",
        format!("idleMinutes must be at most {MAX_IDLE_MINUTES} (0 = never sleep)"),
    ))
}

/// At most [`MAX_IDLE_MINUTES`]; 0 is an agent that is never paused (stopped straight away).
pub fn check_deep_sleep_minutes(minutes: u32) -> Result<(), SpecError> {
    if minutes <= MAX_IDLE_MINUTES {
        return Ok(());
    }
    Err(SpecError::new(
        "deepSleepMinutes",
        format!("deepSleepMinutes must be at most {MAX_IDLE_MINUTES} (0 = never pause)"),
    ))
}

/// The variables of an agent, by [`env::check`]'s rules.
fn check_env(vars: &BTreeMap<String, String>) -> Result<(), SpecError> {
    env::check(vars).map_err(|why| SpecError::new("env", env::message(&why)))
}

/// The granted secrets' names, by [`grants::check`]'s rules (that each exists is the store's
/// to check, as it keeps them).
fn check_secrets(names: &[String]) -> Result<(), SpecError> {
    grants::check(names).map_err(|why| SpecError::new("secrets", why))
}

/// A runtime this server allows (`sandbox.allowed_runtimes`).
fn check_runtime(runtime: &str, runtimes: &Runtimes) -> Result<(), SpecError> {
    if runtimes.allows(runtime) {
        return Ok(());
    }
    let shown: String = runtime.chars().take(64).collect();
    Err(SpecError::new(
        "runtime",
        format!(
            "runtime {shown:?} is not allowed on this server; allowed: {}",
            runtimes.allowed.join(", ")
        ),
    ))
}

/// The preset called `name`, or an error that names the known ones.
fn find_preset<'a>(
    presets: &'a BTreeMap<String, Preset>,
    name: &str,
) -> Result<&'a Preset, SpecError> {
    presets.get(name).ok_or_else(|| {
        let known: Vec<&str> = presets.keys().map(String::as_str).collect();
        let known = if known.is_empty() {
            "this server has none".to_string()
        } else {
            format!("the presets are: {}", known.join(", "))
        };
        let shown: String = name.chars().take(80).collect();
        SpecError::new("preset", format!("no preset {shown:?}; {known}"))
    })
}

/// The settings a new agent and a change share; `None` is one left out.
struct Shared<'a> {
    image: Option<&'a str>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    disk_mb: Option<u64>,
    idle_minutes: Option<u32>,
    deep_sleep_minutes: Option<u32>,
}

/// Checks them in one order, so that a create and an update name the same setting first.
fn check_shared(s: Shared, allowed: &Allowed) -> Result<(), SpecError> {
    let sb = &allowed.defaults;
    if let Some(image) = s.image {
        check_image(image)?;
    }
    if let Some(cpus) = s.cpus {
        check_cpus(cpus, sb.max_cpus)?;
    }
    if let Some(memory_mb) = s.memory_mb {
        check_memory_mb(memory_mb, sb.max_memory_mb)?;
    }
    if let Some(disk_mb) = s.disk_mb {
        if let Some(why) = &allowed.no_disk_limits {
            return Err(SpecError::new(
                "diskMb",
                format!("this server cannot limit an agent's disk: {why}"),
            ));
        }
        check_disk_mb(disk_mb, sb.max_disk_mb)?;
    }
    if let Some(idle_minutes) = s.idle_minutes {
        check_idle_minutes(idle_minutes)?;
    }
    if let Some(minutes) = s.deep_sleep_minutes {
        check_deep_sleep_minutes(minutes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
