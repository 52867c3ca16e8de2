//! What the server says about itself: `GET /api/v1/health` and `GET /api/v1/limits`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /api/v1/health`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
// A client reads what is there: a field a newer or older server lacks is empty.
#[serde(default)]
pub struct Health {
    pub status: String,
    pub version: String,
    pub driver: String,
}

/// `GET /api/v1/limits`: what the server allows and assumes, so a client can check input
/// before sending it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub default_image: String,
    pub default_cpus: f64,
    pub default_memory_mb: u64,
    pub default_idle_minutes: u32,
    pub max_cpus: f64,
    pub max_memory_mb: u64,
    /// The home size of an agent that asks for none; null when such agents get no limit.
    pub default_disk_mb: Option<u64>,
    /// The largest home one may ask for; null when this server cannot limit homes.
    pub max_disk_mb: Option<u64>,
    /// The size of each sandbox's in-memory `/tmp` and `/var/tmp`; null when they are on the
    /// container's own layer.
    pub tmp_mb: Option<u64>,
    /// What each sandbox may write outside its home and `/tmp` (its container's writable
    /// layer); null when nothing limits it on this server.
    pub rootfs_mb: Option<u64>,
    pub max_idle_minutes: u32,
    /// The largest file `fs/write` accepts.
    pub max_file_mb: u64,
    pub exec_output_cap_kb: u64,
    pub exec_default_timeout_ms: u64,
    pub exec_max_timeout_ms: u64,
    /// The container runtimes an agent may ask for (`runtime`), the default first.
    #[schema(example = json!(["runc", "runsc"]))]
    pub runtimes: Vec<String>,
    /// The harnesses sessions can run (the config's `harnesses`), sorted by name.
    pub harnesses: Vec<HarnessInfo>,
    /// The harness of a session whose agent's preset names none (`sandbox.default_harness`).
    pub default_harness: Option<String>,
}

/// A harness sessions can run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HarnessInfo {
    pub name: String,
    pub description: Option<String>,
}
