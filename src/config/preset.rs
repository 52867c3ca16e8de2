//! `presets`: named templates for new agents (an image, limits, env, egress rules and a setup
//! script), and `sandbox.default_preset`, the one a create that names none gets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::validate::Fail;
use super::{Config, ConfigError, SandboxConfig};
use crate::agents::env;
use crate::agents::spec::{
    self, MAX_IDLE_MINUTES, MAX_IMAGE, MAX_NAME, MIN_DISK_MB, MIN_MEMORY_MB,
};
use crate::egress::EgressRules;

/// One preset as the config file writes it; every key is optional and falls back to the
/// `sandbox.default_*` settings.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Preset {
    /// One line for people choosing a preset.
    pub description: Option<String>,
    pub image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    /// 0 means a home without a size limit.
    pub disk_mb: Option<u64>,
    pub idle_minutes: Option<u32>,
    /// Variables every process of the agent starts with.
    pub env: BTreeMap<String, String>,
    /// The egress rules of agents made from it (`sandbox.egress.default` when absent).
    pub egress: Option<EgressRules>,
    /// A shell script run once as the agent's account when its sandbox first starts.
    pub setup: Option<String>,
    /// Runs `setup` again after each rebuild (a new container has lost what it installed
    /// outside the home).
    pub setup_on_rebuild: bool,
    /// The OCI runtime of agents made from it; checked at each create against the runtimes the
    /// server allows then (`/limits`'s `runtimes`), as a request's own would be.
    pub runtime: Option<String>,
}

/// A preset with the server's defaults filled in: what an agent made from it gets. The API
/// shows it as [`crate::api::types::PresetInfo`].
#[derive(Debug, Clone, PartialEq)]
pub struct PresetInfo {
    pub name: String,
    pub description: Option<String>,
    pub image: String,
    pub cpus: f64,
    pub memory_mb: u64,
    /// The home's size in MiB; null for a home without a limit.
    pub disk_mb: Option<u64>,
    pub idle_minutes: u32,
    pub env: BTreeMap<String, String>,
    /// Null: agents from it follow `sandbox.egress.default`.
    pub egress: Option<EgressRules>,
    pub setup: Option<String>,
    pub setup_on_rebuild: bool,
    pub runtime: Option<String>,
    /// Whether it is `sandbox.default_preset`, the one a create without `preset` gets.
    pub default: bool,
}

impl Preset {
    /// The preset as agents get it, under `sb`'s defaults.
    pub fn info(&self, name: &str, sb: &SandboxConfig) -> PresetInfo {
        let disk = self.disk_mb.unwrap_or(sb.default_disk_mb);
        PresetInfo {
            name: name.to_string(),
            description: self.description.clone(),
            image: self
                .image
                .clone()
                .unwrap_or_else(|| sb.default_image.clone()),
            cpus: self.cpus.unwrap_or(sb.default_cpus),
            memory_mb: self.memory_mb.unwrap_or(sb.default_memory_mb),
            disk_mb: (disk > 0).then_some(disk),
            idle_minutes: self.idle_minutes.unwrap_or(sb.default_idle_minutes),
            env: self.env.clone(),
            egress: self.egress.clone(),
            setup: self.setup.clone(),
            setup_on_rebuild: self.setup_on_rebuild,
            runtime: self.runtime.clone(),
            default: sb.default_preset.as_deref() == Some(name),
        }
    }
}

/// Checks one preset against the sandbox's limits by the rules of an agent's settings (a preset
/// may also ask for a home without a limit, `diskMb: 0`); `Err((key under the preset, problem))`,
/// phrased for the config file.
pub(super) fn check(p: &Preset, sb: &SandboxConfig) -> Result<(), (&'static str, String)> {
    if let Some(image) = &p.image {
        if spec::check_image(image).is_err() {
            return Err((
                "image",
                format!(
                    "({image:?}) must be 1 to {MAX_IMAGE} printable ASCII characters, no spaces"
                ),
            ));
        }
    }
    if let Some(c) = p.cpus {
        if spec::check_cpus(c, sb).is_err() {
            return Err((
                "cpus",
                format!(
                    "({c}) must be above 0 and at most sandbox.max_cpus ({})",
                    sb.max_cpus
                ),
            ));
        }
    }
    if let Some(m) = p.memory_mb {
        if spec::check_memory_mb(m, sb).is_err() {
            return Err((
                "memoryMb",
                format!(
                    "({m}) must be between {MIN_MEMORY_MB} and sandbox.max_memory_mb ({})",
                    sb.max_memory_mb
                ),
            ));
        }
    }
    if let Some(d) = p.disk_mb {
        if d != 0 && spec::check_disk_mb(d, sb).is_err() {
            return Err((
                "diskMb",
                format!(
                    "({d}) must be 0 (no limit) or between {MIN_DISK_MB} and sandbox.max_disk_mb ({})",
                    sb.max_disk_mb
                ),
            ));
        }
    }
    if let Some(i) = p.idle_minutes {
        if spec::check_idle_minutes(i).is_err() {
            return Err((
                "idleMinutes",
                format!("({i}) must be at most {MAX_IDLE_MINUTES} (a week); 0 = never sleep"),
            ));
        }
    }
    env::check(&p.env).map_err(|e| ("env", e))?;
    if let Some(s) = &p.setup {
        if s.trim().is_empty() || s.contains('\0') || s.len() > MAX_SETUP {
            return Err((
                "setup",
                format!("must be a non-empty script of at most {MAX_SETUP} bytes, without NUL"),
            ));
        }
    }
    if let Some(r) = &p.runtime {
        if r.is_empty() || !r.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(("runtime", format!("({r:?}) is not a runtime name")));
        }
    }
    Ok(())
}

/// Longest setup script: it travels as one `sh -c` argument, which Linux caps at 128 KiB.
pub const MAX_SETUP: usize = 64 * 1024;

/// Each preset's name and keys, and that `sandbox.default_preset` names one.
pub(super) fn validate(config: &Config, fail: &Fail) -> Result<(), ConfigError> {
    for (name, p) in &config.presets {
        if spec::check_name(name).is_err() {
            return Err(fail(
                &format!("presets.{name}"),
                format!(
                    "is not a valid preset name: lowercase letters, digits and '-', at most \
                     {MAX_NAME}, not starting or ending with '-'"
                ),
            ));
        }
        check(p, &config.sandbox)
            .map_err(|(key, problem)| fail(&format!("presets.{name}.{key}"), problem))?;
    }
    if let Some(d) = &config.sandbox.default_preset {
        if !config.presets.contains_key(d) {
            let known: Vec<&str> = config.presets.keys().map(String::as_str).collect();
            return Err(fail(
                "sandbox.default_preset",
                format!(
                    "({d:?}) names no preset; the presets are: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}
