//! A preset as `GET /api/v1/presets` shows it, made from [`preset::PresetInfo`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::EgressRules;
use crate::agents::preset;
use crate::model::teams::AgentApprovals;

/// `GET /api/v1/presets`: a preset with the server's defaults filled in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PresetInfo {
    #[schema(example = "dev")]
    pub name: String,
    pub description: Option<String>,
    #[schema(example = "agenthold/agent:bookworm")]
    pub image: String,
    pub cpus: f64,
    pub memory_mb: u64,
    /// The home's size in MiB; null for a home without a limit.
    pub disk_mb: Option<u64>,
    pub idle_minutes: u32,
    /// How long its idle agents stay paused before they are stopped, in minutes; 0: they are
    /// stopped straight away.
    #[serde(default)]
    pub deep_sleep_minutes: u32,
    pub env: BTreeMap<String, String>,
    /// Secrets (names) granted to agents made from it.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Null: agents from it follow `sandbox.egress.default`.
    pub egress: Option<EgressRules>,
    pub setup: Option<String>,
    pub setup_on_rebuild: bool,
    pub runtime: Option<String>,
    /// The harness new sessions of its agents run; null: the server's default
    /// (`defaultHarness` in `/limits`).
    pub harness: Option<String>,
    /// The lifetime of its agents in minutes (a create's own `ttlMinutes`, even null, wins);
    /// null for none.
    #[serde(default)]
    #[schema(required = true)]
    pub ttl_minutes: Option<u32>,
    /// Labels its agents get, under a create's own.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its agents may become root (`sudo`, `"user": "root"`), unless a create says otherwise.
    #[serde(default)]
    pub allow_root: bool,
    /// The approval settings of its agents, unless a create says otherwise.
    #[serde(default)]
    pub approvals: AgentApprovals,
    /// The access policy its agents get, unless a create says otherwise.
    #[serde(default)]
    pub access: crate::model::teams::AgentAccess,
    /// Whether it is `sandbox.default_preset`, the one a create without `preset` gets.
    pub default: bool,
}

impl From<preset::PresetInfo> for PresetInfo {
    fn from(p: preset::PresetInfo) -> Self {
        PresetInfo {
            name: p.name,
            description: p.description,
            image: p.image,
            cpus: p.cpus,
            memory_mb: p.memory_mb,
            disk_mb: p.disk_mb,
            idle_minutes: p.idle_minutes,
            deep_sleep_minutes: p.deep_sleep_minutes,
            env: p.env,
            secrets: p.secrets,
            egress: p.egress.map(Into::into),
            setup: p.setup,
            setup_on_rebuild: p.setup_on_rebuild,
            runtime: p.runtime,
            harness: p.harness,
            ttl_minutes: p.ttl_minutes,
            labels: p.labels,
            allow_root: p.allow_root,
            approvals: p.approvals,
            access: p.access,
            default: p.default,
        }
    }
}

/// `GET /api/v1/pool`: one preset's warm pool, sandboxes started ahead of need that a create
/// from the preset claims (answering with `warm: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolInfo {
    #[schema(example = "dev")]
    pub preset: String,
    /// How many the pool keeps (the preset's `warm`; 0 for a pool being emptied); all pools
    /// together stay within `sandbox.warm_max`.
    #[schema(example = 2)]
    pub target: u32,
    /// Entries a create can claim now.
    #[schema(example = 1)]
    pub ready: u32,
    /// Entries being made and started.
    #[schema(example = 1)]
    pub starting: u32,
}

impl From<crate::lifecycle::pool::PoolStatus> for PoolInfo {
    fn from(p: crate::lifecycle::pool::PoolStatus) -> Self {
        PoolInfo {
            preset: p.preset,
            target: p.target,
            ready: p.ready,
            starting: p.starting,
        }
    }
}
