//! `sandbox`: the driver, the defaults and ceilings of an agent's limits, its runtimes, the
//! tunnel, idle times, terminals and background processes; their defaults and their checks.
//! The subsections `sandbox.egress` and `sandbox.docker` have files of their own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::de::{de_duration, de_opt_path, de_opt_string, de_socket_addr, ser_duration};
use super::validate::{check_connection_caps, min_duration, Fail};
use super::{ConfigError, DockerConfig, EgressConfig};
use crate::agents::defaults::Defaults;
use crate::agents::spec::{MIN_DISK_MB, MIN_MEMORY_MB};

/// Which driver runs the sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    #[default]
    Docker,
    /// In-process sandboxes on the server's own machine; development and tests only.
    Fake,
}

impl DriverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DriverKind::Docker => "docker",
            DriverKind::Fake => "fake",
        }
    }
}

impl std::fmt::Display for DriverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub driver: DriverKind,
    /// The preset of agents created without one; `None` (written `""`) means none, and the
    /// `default_*` settings below apply.
    #[serde(deserialize_with = "de_opt_string")]
    pub default_preset: Option<String>,
    /// The harness of new sessions whose agent's preset names none; `None` (written `""`):
    /// sessions must name one.
    #[serde(deserialize_with = "de_opt_string")]
    pub default_harness: Option<String>,
    pub default_image: String,
    pub default_cpus: f64,
    pub default_memory_mb: u64,
    pub default_idle_minutes: u32,
    /// How long a paused agent stays paused (in `idle_minute` units) before it is stopped, for
    /// agents and presets that say nothing; 0 never pauses: idle agents stop straight away.
    pub default_deep_sleep_minutes: u32,
    /// When the host's available memory (`MemAvailable`) is below this many MiB, the
    /// longest-paused agents are stopped until it is not; 0 never does.
    pub min_free_memory_mb: u64,
    /// How many warm pool entries (started sandboxes awaiting a create) all presets' pools
    /// hold together at most; each preset's `warm` counts toward it.
    pub warm_max: u32,
    pub max_cpus: f64,
    pub max_memory_mb: u64,
    /// The size of a new agent's home when it asks for none; 0 gives new agents no disk limit.
    pub default_disk_mb: u64,
    /// The largest home an agent may ask for (`diskMb`).
    pub max_disk_mb: u64,
    /// The size of the in-memory `/tmp` and `/var/tmp` of each sandbox (each counts toward the
    /// sandbox's memory limit); 0 leaves them on the container's own layer.
    pub tmp_mb: u64,
    /// What each sandbox may write outside its home and `/tmp` (the container's writable
    /// layer: installed packages, `/root`, `/var`), in MiB; 0 means no limit. Docker enforces
    /// it only with btrfs (where the image's own files count too) or overlay2 on XFS mounted
    /// with `pquota`; elsewhere the server says so (at startup, or at the first create an
    /// engine refuses it) and sandboxes run without it.
    pub rootfs_mb: u64,
    /// `-1` means no limit.
    pub pids_limit: i64,
    /// Open files per process in a sandbox (`RLIMIT_NOFILE`): with `pids_limit`, what one
    /// sandbox can take of the host's file handles.
    pub nofile: NofileLimit,
    /// Where sandboxd dials in; `:8090` means every address.
    #[serde(deserialize_with = "de_socket_addr")]
    pub tunnel_listen: SocketAddr,
    /// Connections the tunnel listener holds at once: one per running sandbox, plus a few while
    /// one reconnects.
    pub tunnel_max_connections: u32,
    /// Connections one address may hold on the tunnel listener. A sandbox needs one (two while
    /// it reconnects); every fake-driver sandbox comes from loopback, so that driver may need
    /// more.
    pub tunnel_max_connections_per_ip: u32,
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub idle_check_interval: Duration,
    /// How long one `idleMinutes` unit lasts; a minute, except in tests that need idle times in
    /// seconds.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub idle_minute: Duration,
    /// `None` (written `""`) means the `sandboxd` next to the agenthold binary.
    #[serde(deserialize_with = "de_opt_path")]
    pub sandboxd_path: Option<PathBuf>,
    /// How often the server pings each sandbox; three missed pings mark the session dead.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub ping_interval: Duration,
    /// How long a terminal session lives on after its last viewer left, in minutes; 0 ends it
    /// with its last viewer.
    pub terminal_detach_minutes: u64,
    /// Output each terminal session keeps for exact replay on reattach, in KiB.
    pub terminal_buffer_kb: u64,
    /// Output each background process keeps for readers, in KiB (on the sandbox's own disk,
    /// not in memory); older output reads as a gap.
    pub process_output_kb: u64,
    /// How long a finished background process stays listed (with its output) before it is
    /// forgotten.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub process_retention: Duration,
    /// Background processes one agent may run at once; more get `409`. Finished ones count
    /// towards no limit but this many are kept at most.
    pub max_processes: u32,
    /// Streams (terminal viewers, exec calls, file transfers, terminal list and kill) the
    /// server may have open to one agent's sandbox at once; more get `429`. Kept below the
    /// tunnel's own limit, which ends the whole tunnel when reached.
    pub max_streams_per_agent: usize,
    /// The runtime of an agent that asks for none (`runc`, `runsc`, a Kubernetes
    /// RuntimeClass: whatever the driver's engine calls one); empty means the engine's default.
    pub runtime: String,
    /// The runtimes an agent may ask for; `None` (absent) means `runc`, plus `runsc` when the
    /// engine has it, plus `runtime`.
    pub allowed_runtimes: Option<Vec<String>>,
    pub egress: EgressConfig,
    pub docker: DockerConfig,
}

/// The most warm pool entries a server may be told to keep (`sandbox.warm_max`).
pub const MAX_WARM: u32 = 1000;

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            driver: DriverKind::Docker,
            default_preset: None,
            default_harness: None,
            default_image: "debian:bookworm-slim".to_string(),
            default_cpus: 2.0,
            default_memory_mb: 4096,
            default_idle_minutes: 15,
            default_deep_sleep_minutes: 60,
            min_free_memory_mb: 1024,
            warm_max: 16,
            max_cpus: 8.0,
            max_memory_mb: 16384,
            default_disk_mb: 10240,
            max_disk_mb: 102400,
            tmp_mb: 1024,
            rootfs_mb: 10240,
            pids_limit: 4096,
            nofile: NofileLimit::default(),
            tunnel_listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8090),
            tunnel_max_connections: 2048,
            tunnel_max_connections_per_ip: 8,
            idle_check_interval: Duration::from_secs(30),
            idle_minute: Duration::from_secs(60),
            sandboxd_path: None,
            ping_interval: Duration::from_secs(15),
            terminal_detach_minutes: 30,
            terminal_buffer_kb: 1024,
            process_output_kb: 4096,
            process_retention: Duration::from_secs(60 * 60),
            max_processes: 128,
            max_streams_per_agent: 128,
            runtime: String::new(),
            allowed_runtimes: None,
            egress: EgressConfig::default(),
            docker: DockerConfig::default(),
        }
    }
}

/// `sandbox.nofile`: the soft limit is what a process starts with, the hard one how far it may
/// raise it itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NofileLimit {
    pub soft: u32,
    pub hard: u32,
}

impl Default for NofileLimit {
    fn default() -> Self {
        NofileLimit {
            soft: 4096,
            hard: 8192,
        }
    }
}

impl SandboxConfig {
    /// What agents get when they ask for nothing, and the most they may ask for.
    pub fn agent_defaults(&self) -> Defaults {
        Defaults {
            preset: self.default_preset.clone(),
            image: self.default_image.clone(),
            cpus: self.default_cpus,
            memory_mb: self.default_memory_mb,
            disk_mb: self.default_disk_mb,
            idle_minutes: self.default_idle_minutes,
            deep_sleep_minutes: self.default_deep_sleep_minutes,
            egress: self.egress.default.clone(),
            max_cpus: self.max_cpus,
            max_memory_mb: self.max_memory_mb,
            max_disk_mb: self.max_disk_mb,
        }
    }

    /// The runtime to ask the engine for when an agent names none, if not the engine's default.
    pub fn runtime(&self) -> Option<&str> {
        Some(self.runtime.as_str()).filter(|r| !r.is_empty())
    }
}

pub(super) fn validate(sb: &SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
    agent_limits(sb, fail)?;
    runtimes(sb, fail)?;
    sessions(sb, fail)
}

/// `runtime` and `allowed_runtimes`: names an engine could register, the default among them.
fn runtimes(sb: &SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
    if !sb.runtime.is_empty() {
        check_runtime_name(&sb.runtime).map_err(|p| fail("sandbox.runtime", p))?;
    }
    let Some(allowed) = &sb.allowed_runtimes else {
        return Ok(());
    };
    if allowed.is_empty() {
        return Err(fail(
            "sandbox.allowed_runtimes",
            "is empty: list at least one runtime (runc is Docker's own)".to_string(),
        ));
    }
    for (i, r) in allowed.iter().enumerate() {
        check_runtime_name(r).map_err(|p| fail(&format!("sandbox.allowed_runtimes[{i}]"), p))?;
        if allowed[..i].contains(r) {
            return Err(fail(
                &format!("sandbox.allowed_runtimes[{i}]"),
                format!("({r:?}) is listed twice"),
            ));
        }
    }
    if let Some(default) = sb.runtime() {
        if !allowed.iter().any(|r| r == default) {
            return Err(fail(
                "sandbox.allowed_runtimes",
                format!(
                    "({}) does not hold sandbox.runtime ({default}), the runtime of an agent \
                     that asks for none",
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// A runtime name as an engine registers it: `runc`, `runsc`, `sysbox-runc`.
fn check_runtime_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "({name:?}) is not a runtime name like runc or runsc (1 to 64 letters, digits, '-', \
             '_' or '.', starting with a letter or digit)"
        ))
    }
}

/// The image and the defaults and ceilings of what an agent may take.
fn agent_limits(sb: &SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
    if sb.default_image.trim().is_empty() {
        return Err(fail(
            "sandbox.default_image",
            "is empty; name an image".into(),
        ));
    }
    for (key, v) in [
        ("sandbox.default_cpus", sb.default_cpus),
        ("sandbox.max_cpus", sb.max_cpus),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(fail(key, format!("({v}) must be a number above 0")));
        }
    }
    default_within_max(
        ("sandbox.default_cpus", sb.default_cpus),
        ("sandbox.max_cpus", sb.max_cpus),
        fail,
    )?;
    for (key, v) in [
        ("sandbox.default_memory_mb", sb.default_memory_mb),
        ("sandbox.max_memory_mb", sb.max_memory_mb),
    ] {
        if v < MIN_MEMORY_MB {
            return Err(fail(key, format!("({v}) must be at least {MIN_MEMORY_MB}")));
        }
    }
    default_within_max(
        ("sandbox.default_memory_mb", sb.default_memory_mb),
        ("sandbox.max_memory_mb", sb.max_memory_mb),
        fail,
    )?;
    if sb.max_disk_mb < MIN_DISK_MB {
        return Err(fail(
            "sandbox.max_disk_mb",
            format!("({}) must be at least {MIN_DISK_MB}", sb.max_disk_mb),
        ));
    }
    if sb.default_disk_mb != 0 && !(MIN_DISK_MB..=sb.max_disk_mb).contains(&sb.default_disk_mb) {
        return Err(fail(
            "sandbox.default_disk_mb",
            format!(
                "({}) must be 0 (no limit) or between {MIN_DISK_MB} and sandbox.max_disk_mb ({})",
                sb.default_disk_mb, sb.max_disk_mb
            ),
        ));
    }
    if sb.rootfs_mb != 0 && sb.rootfs_mb < MIN_DISK_MB {
        return Err(fail(
            "sandbox.rootfs_mb",
            format!(
                "({}) must be 0 (no limit) or at least {MIN_DISK_MB}",
                sb.rootfs_mb
            ),
        ));
    }
    if sb.default_idle_minutes == 0 {
        return Err(fail(
            "sandbox.default_idle_minutes",
            "must be at least 1".into(),
        ));
    }
    if sb.default_deep_sleep_minutes > crate::agents::spec::MAX_IDLE_MINUTES {
        return Err(fail(
            "sandbox.default_deep_sleep_minutes",
            format!(
                "({}) must be at most {} (a week); 0 = never pause",
                sb.default_deep_sleep_minutes,
                crate::agents::spec::MAX_IDLE_MINUTES
            ),
        ));
    }
    if sb.warm_max > MAX_WARM {
        return Err(fail(
            "sandbox.warm_max",
            format!(
                "({}) must be at most {MAX_WARM}: each entry is a started sandbox holding its \
                 memory and disk",
                sb.warm_max
            ),
        ));
    }
    if sb.pids_limit != -1 && sb.pids_limit < 16 {
        return Err(fail(
            "sandbox.pids_limit",
            format!(
                "({}) must be at least 16, or -1 for no limit",
                sb.pids_limit
            ),
        ));
    }
    let nofile = sb.nofile;
    // Below 64 even a shell and its pipes fail; above 2^20 is past Linux's default nr_open.
    if nofile.soft < 64 || nofile.soft > nofile.hard || nofile.hard > 1 << 20 {
        return Err(fail(
            "sandbox.nofile",
            format!(
                "(soft {}, hard {}) needs 64 <= soft <= hard <= 1048576",
                nofile.soft, nofile.hard
            ),
        ));
    }
    Ok(())
}

/// A default at most its ceiling (each already checked on its own).
fn default_within_max<T: PartialOrd + std::fmt::Display>(
    (default_key, default): (&str, T),
    (max_key, max): (&str, T),
    fail: &Fail,
) -> Result<(), ConfigError> {
    if default > max {
        return Err(fail(
            default_key,
            format!("({default}) is above {max_key} ({max})"),
        ));
    }
    Ok(())
}

/// The tunnel, the idle clock, terminals, background processes and streams.
fn sessions(sb: &SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
    min_duration(
        sb.idle_check_interval,
        1,
        "sandbox.idle_check_interval",
        &fail,
    )?;
    min_duration(sb.idle_minute, 1, "sandbox.idle_minute", &fail)?;
    min_duration(sb.ping_interval, 1, "sandbox.ping_interval", &fail)?;
    check_connection_caps(
        ("sandbox.tunnel_max_connections", sb.tunnel_max_connections),
        (
            "sandbox.tunnel_max_connections_per_ip",
            sb.tunnel_max_connections_per_ip,
        ),
        &fail,
    )?;
    // A week is far beyond any use, and keeps the seconds sent to sandboxd small.
    if sb.terminal_detach_minutes > 7 * 24 * 60 {
        return Err(fail(
            "sandbox.terminal_detach_minutes",
            format!(
                "({}) must be at most 10080 (a week)",
                sb.terminal_detach_minutes
            ),
        ));
    }
    if !(1..=256 * 1024).contains(&sb.terminal_buffer_kb) {
        return Err(fail(
            "sandbox.terminal_buffer_kb",
            format!(
                "({}) must be between 1 and 262144 (256 MiB)",
                sb.terminal_buffer_kb
            ),
        ));
    }
    let (min_out, max_out) = (
        agenthold_proto::process::MIN_OUTPUT / 1024,
        agenthold_proto::process::MAX_OUTPUT / 1024,
    );
    if !(min_out..=max_out).contains(&sb.process_output_kb) {
        return Err(fail(
            "sandbox.process_output_kb",
            format!(
                "({}) must be between {min_out} and {max_out} (1 GiB)",
                sb.process_output_kb
            ),
        ));
    }
    if sb.process_retention < std::time::Duration::from_secs(1) {
        return Err(fail(
            "sandbox.process_retention",
            format!(
                "({:?}) must be at least 1s: a finished process must stay long enough to be read",
                sb.process_retention
            ),
        ));
    }
    if !(1..=1024).contains(&sb.max_processes) {
        return Err(fail(
            "sandbox.max_processes",
            format!("({}) must be between 1 and 1024", sb.max_processes),
        ));
    }
    let max_streams = agenthold_proto::mux::MAX_STREAMS_PER_AGENT;
    if !(1..=max_streams).contains(&sb.max_streams_per_agent) {
        return Err(fail(
            "sandbox.max_streams_per_agent",
            format!(
                "({}) must be between 1 and {max_streams} (the tunnel's limit of {} \
                 streams, less {} kept for pings and streams being closed)",
                sb.max_streams_per_agent,
                agenthold_proto::mux::MAX_STREAMS,
                agenthold_proto::mux::STREAM_HEADROOM,
            ),
        ));
    }
    if let Some(p) = &sb.sandboxd_path {
        if p.as_os_str().is_empty() {
            // Unreachable through YAML ("" becomes None) but possible in a hand-built config.
            return Err(fail("sandbox.sandboxd_path", "is empty".into()));
        }
    }

    Ok(())
}
