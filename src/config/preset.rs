//! `presets`: the config's named templates for new agents ([`Preset`]), checked by the rules of
//! an agent's settings, and `sandbox.default_preset`, the one a create that names none gets.

use super::validate::Fail;
use super::{Config, ConfigError, SandboxConfig};
use crate::agents::env;
use crate::agents::preset::Preset;
use crate::agents::spec::{
    self, MAX_IDLE_MINUTES, MAX_IMAGE, MAX_NAME, MAX_TTL_MINUTES, MIN_DISK_MB, MIN_MEMORY_MB,
};

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
        if spec::check_cpus(c, sb.max_cpus).is_err() {
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
        if spec::check_memory_mb(m, sb.max_memory_mb).is_err() {
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
        if d != 0 && spec::check_disk_mb(d, sb.max_disk_mb).is_err() {
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
    if let Some(d) = p.deep_sleep_minutes {
        if spec::check_deep_sleep_minutes(d).is_err() {
            return Err((
                "deepSleepMinutes",
                format!("({d}) must be at most {MAX_IDLE_MINUTES} (a week); 0 = never pause"),
            ));
        }
    }
    env::check(&p.env).map_err(|e| ("env", e))?;
    crate::agents::grants::check(&p.secrets).map_err(|e| ("secrets", e))?;
    if let Some(t) = p.ttl_minutes {
        if spec::check_ttl_minutes(t).is_err() {
            return Err((
                "ttlMinutes",
                format!("({t}) must be between 1 and {MAX_TTL_MINUTES} (a year)"),
            ));
        }
    }
    crate::agents::labels::check(&p.labels).map_err(|e| ("labels", e))?;
    if let Some(s) = &p.setup {
        if s.trim().is_empty() || s.contains('\0') || s.len() > MAX_SETUP {
            return Err((
                "setup",
                format!("must be a non-empty script of at most {MAX_SETUP} bytes, without NUL"),
            ));
        }
    }
    if p.warm > sb.warm_max {
        return Err((
            "warm",
            format!(
                "({}) must be at most sandbox.warm_max ({}), which all pools share",
                p.warm, sb.warm_max
            ),
        ));
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
