//! `harnesses` (the coding agents a session can run, by name) and `sessions` (the limits of
//! agent sessions and the approval queue), with `sandbox.default_harness` and each preset's
//! `harness` checked against them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::de::{de_duration, ser_duration};
use super::validate::Fail;
use super::{Config, ConfigError};
use crate::agents::spec;

/// Most arguments a harness's command may have.
const MAX_ARGS: usize = 256;

/// One harness: a program speaking the Agent Client Protocol on its stdio, run in the
/// sandbox as the agent account, in the session's directory.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HarnessConfig {
    /// The program and its arguments (no shell unless named).
    pub command: Vec<String>,
    /// Variables it starts with, over the agent's own.
    pub env: BTreeMap<String, String>,
    /// One line for people choosing a harness.
    pub description: Option<String>,
}

/// `sessions`: limits of agent sessions.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// How long a permission request waits for an answer before it is refused.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub approval_timeout: Duration,
    /// Sessions one agent may have.
    pub max_per_agent: u32,
    /// The largest single message a harness may send, in KiB.
    pub update_max_kb: u64,
    /// Each session's transcript at most, in MiB: older events are dropped beyond it (with a
    /// `gap` notice).
    pub transcript_max_mb: u64,
    /// How long a harness that was just started has to answer `initialize`, and then to open
    /// (or reopen) the session; one that does not is stopped and the turn ends `error`.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub start_timeout: Duration,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            approval_timeout: Duration::from_secs(600),
            max_per_agent: 32,
            update_max_kb: 1024,
            transcript_max_mb: 64,
            start_timeout: Duration::from_secs(60),
        }
    }
}

impl SessionsConfig {
    pub fn update_max_bytes(&self) -> usize {
        (self.update_max_kb as usize).saturating_mul(1024)
    }

    pub fn transcript_max_bytes(&self) -> u64 {
        self.transcript_max_mb.saturating_mul(1024 * 1024)
    }
}

/// The configured harnesses' names, for messages.
pub fn harness_names(config: &Config) -> String {
    if config.harnesses.is_empty() {
        "none is configured (see `harnesses` in config.example.yaml)".to_string()
    } else {
        let names: Vec<&str> = config.harnesses.keys().map(String::as_str).collect();
        format!("the configured ones are: {}", names.join(", "))
    }
}

pub(super) fn validate(config: &Config, fail: &Fail) -> Result<(), ConfigError> {
    for (name, h) in &config.harnesses {
        let key = format!("harnesses.{name}");
        if spec::check_name(name).is_err() {
            return Err(fail(
                &key,
                "is not a valid harness name: lowercase letters, digits and '-', not starting \
                 or ending with '-'"
                    .to_string(),
            ));
        }
        if h.command.first().is_none_or(|p| p.is_empty()) {
            return Err(fail(
                &format!("{key}.command"),
                "must name a program".to_string(),
            ));
        }
        if h.command.len() > MAX_ARGS || h.command.iter().any(|a| a.contains('\0')) {
            return Err(fail(
                &format!("{key}.command"),
                format!("must have at most {MAX_ARGS} arguments, none with a NUL byte"),
            ));
        }
        // Checked as an agent's env is: the egress proxy's variables and agenthold's own are
        // not a harness's to change.
        if let Err(why) = crate::agents::env::check(&h.env) {
            return Err(fail(&format!("{key}.env"), why));
        }
    }
    let known = |name: &str| config.harnesses.contains_key(name);
    if let Some(h) = &config.sandbox.default_harness {
        if !known(h) {
            return Err(fail(
                "sandbox.default_harness",
                format!("({h:?}) names no harness; {}", harness_names(config)),
            ));
        }
    }
    for (name, p) in &config.presets {
        if let Some(h) = &p.harness {
            if !known(h) {
                return Err(fail(
                    &format!("presets.{name}.harness"),
                    format!("({h:?}) names no harness; {}", harness_names(config)),
                ));
            }
        }
    }
    let s = &config.sessions;
    if s.approval_timeout < Duration::from_secs(1)
        || s.approval_timeout > Duration::from_secs(30 * 24 * 3600)
    {
        return Err(fail(
            "sessions.approval_timeout",
            "must be between 1s and 30 days (720h)".to_string(),
        ));
    }
    if s.start_timeout < Duration::from_secs(1) || s.start_timeout > Duration::from_secs(24 * 3600)
    {
        return Err(fail(
            "sessions.start_timeout",
            "must be between 1s and 1 day (24h)".to_string(),
        ));
    }
    if s.max_per_agent == 0 || s.max_per_agent > 10_000 {
        return Err(fail(
            "sessions.max_per_agent",
            format!("({}) must be between 1 and 10000", s.max_per_agent),
        ));
    }
    if !(16..=1024 * 1024).contains(&s.update_max_kb) {
        return Err(fail(
            "sessions.update_max_kb",
            format!("({}) must be between 16 and 1048576", s.update_max_kb),
        ));
    }
    if s.transcript_max_mb == 0 || s.transcript_max_mb > 1024 * 1024 {
        return Err(fail(
            "sessions.transcript_max_mb",
            format!("({}) must be between 1 and 1048576", s.transcript_max_mb),
        ));
    }
    Ok(())
}
