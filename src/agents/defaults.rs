//! The server's defaults and ceilings for agents, as the config gives them.

use crate::egress::EgressRules;

/// The server's defaults and ceilings for agents (`sandbox.default_*`, `sandbox.max_*` and
/// `sandbox.egress.default` in the config).
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// The preset of a create that names none.
    pub preset: Option<String>,
    pub image: String,
    pub cpus: f64,
    pub memory_mb: u64,
    /// 0: a home without a limit.
    pub disk_mb: u64,
    pub idle_minutes: u32,
    /// How long an idle agent stays paused before it is stopped; 0 never pauses.
    pub deep_sleep_minutes: u32,
    pub egress: EgressRules,
    pub max_cpus: f64,
    pub max_memory_mb: u64,
    pub max_disk_mb: u64,
}
