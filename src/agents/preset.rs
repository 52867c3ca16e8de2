//! Presets: named templates for new agents (an image, limits, env, egress rules and a setup
//! script), as the config file writes them, and as agents made from one get them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::defaults::Defaults;
use crate::egress::EgressRules;
use crate::model::teams::AgentApprovals;

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
    /// How long its idle agents stay paused before they are stopped (0: never paused).
    pub deep_sleep_minutes: Option<u32>,
    /// Variables every process of the agent starts with.
    pub env: BTreeMap<String, String>,
    /// The secrets granted to agents made from it (names); a create's own `secrets` replaces
    /// the list.
    pub secrets: Vec<String>,
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
    /// The harness (a key of `harnesses`) new sessions of its agents run by default.
    pub harness: Option<String>,
    /// The lifetime of agents made from it, in `sandbox.idle_minute` units (none when absent);
    /// a create's own `ttlMinutes` (even null) wins.
    pub ttl_minutes: Option<u32>,
    /// Labels of agents made from it; a create's own labels are merged over them.
    pub labels: BTreeMap<String, String>,
    /// Agents made from it may become root (`sudo`, `"user": "root"`); a create's own
    /// `allowRoot` wins.
    pub allow_root: bool,
    /// The approval settings of agents made from it; a create's own `approvals` wins.
    pub approvals: AgentApprovals,
    /// The access policy of agents made from it (`private` when absent); a create's own
    /// `access` wins.
    pub access: Option<crate::model::teams::AgentAccess>,
    /// How many started, unclaimed sandboxes of this preset the pool keeps ready (0: none);
    /// all pools together stay within `sandbox.warm_max`.
    pub warm: u32,
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
    pub deep_sleep_minutes: u32,
    pub env: BTreeMap<String, String>,
    pub secrets: Vec<String>,
    /// Null: agents from it follow `sandbox.egress.default`.
    pub egress: Option<EgressRules>,
    pub setup: Option<String>,
    pub setup_on_rebuild: bool,
    pub runtime: Option<String>,
    /// The harness new sessions of its agents run (null: `sandbox.default_harness`).
    pub harness: Option<String>,
    /// The lifetime of its agents; null for none.
    pub ttl_minutes: Option<u32>,
    pub labels: BTreeMap<String, String>,
    pub allow_root: bool,
    pub approvals: AgentApprovals,
    /// The access policy its agents get unless a create says otherwise.
    pub access: crate::model::teams::AgentAccess,
    /// Whether it is `sandbox.default_preset`, the one a create without `preset` gets.
    pub default: bool,
}

impl Preset {
    /// The preset as agents get it, under the server's `defaults`.
    pub fn info(&self, name: &str, defaults: &Defaults) -> PresetInfo {
        let disk = self.disk_mb.unwrap_or(defaults.disk_mb);
        PresetInfo {
            name: name.to_string(),
            description: self.description.clone(),
            image: self.image.clone().unwrap_or_else(|| defaults.image.clone()),
            cpus: self.cpus.unwrap_or(defaults.cpus),
            memory_mb: self.memory_mb.unwrap_or(defaults.memory_mb),
            disk_mb: (disk > 0).then_some(disk),
            idle_minutes: self.idle_minutes.unwrap_or(defaults.idle_minutes),
            deep_sleep_minutes: self
                .deep_sleep_minutes
                .unwrap_or(defaults.deep_sleep_minutes),
            env: self.env.clone(),
            secrets: self.secrets.clone(),
            egress: self.egress.clone(),
            setup: self.setup.clone(),
            setup_on_rebuild: self.setup_on_rebuild,
            runtime: self.runtime.clone(),
            harness: self.harness.clone(),
            ttl_minutes: self.ttl_minutes,
            labels: self.labels.clone(),
            allow_root: self.allow_root,
            approvals: self.approvals,
            access: self.access.unwrap_or_default(),
            default: defaults.preset.as_deref() == Some(name),
        }
    }
}
