//! Checks of a parsed config, one function per section, each naming the key at fault.

use std::time::Duration;

use super::{
    Config, ConfigError, DockerConfig, EgressConfig, HostMount, SandboxConfig, ServerConfig,
};

/// Fails with the offending key and what is wrong with it.
type Fail<'a> = dyn Fn(&str, String) -> ConfigError + 'a;

pub(super) fn validate(config: &Config, file: &str) -> Result<(), ConfigError> {
    let fail = |key: &str, problem: String| ConfigError::Invalid {
        file: file.to_string(),
        key: key.to_string(),
        problem,
    };
    server(&config.server, &fail)?;
    sandbox(&config.sandbox, &fail)?;
    egress(&config.sandbox.egress, &config.sandbox, &fail)?;
    docker(&config.sandbox.docker, &fail)?;
    presets(config, &fail)
}

fn presets(config: &Config, fail: &Fail) -> Result<(), ConfigError> {
    for (name, p) in &config.presets {
        if crate::api::agents::validate_name(name).is_err() {
            return Err(fail(
                &format!("presets.{name}"),
                "is not a valid preset name: lowercase letters, digits and '-', at most 63, \
                 not starting or ending with '-'"
                    .into(),
            ));
        }
        super::preset::check(p, &config.sandbox)
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

fn server(s: &ServerConfig, fail: &Fail) -> Result<(), ConfigError> {
    if s.data_dir.as_os_str().is_empty() {
        return Err(fail("server.data_dir", "is empty; name a directory".into()));
    }
    if let Some(token) = &s.admin_token {
        check_token(token).map_err(|p| fail("server.admin_token", p))?;
    }
    if s.max_file_mb == 0 {
        return Err(fail("server.max_file_mb", "must be at least 1".into()));
    }
    if s.exec_output_cap_kb == 0 {
        return Err(fail(
            "server.exec_output_cap_kb",
            "must be at least 1".into(),
        ));
    }
    min_duration(
        s.exec_default_timeout,
        1,
        "server.exec_default_timeout",
        &fail,
    )?;
    min_duration(s.exec_max_timeout, 1, "server.exec_max_timeout", &fail)?;
    if s.exec_default_timeout > s.exec_max_timeout {
        return Err(fail(
            "server.exec_default_timeout",
            format!(
                "({}) is above server.exec_max_timeout ({})",
                humantime::format_duration(s.exec_default_timeout),
                humantime::format_duration(s.exec_max_timeout)
            ),
        ));
    }
    min_duration(s.session_ttl, 1, "server.session_ttl", &fail)?;
    check_connection_caps(
        ("server.max_connections", s.max_connections),
        ("server.max_connections_per_ip", s.max_connections_per_ip),
        &fail,
    )?;
    min_duration(s.header_timeout, 1, "server.header_timeout", &fail)?;
    // Longer only keeps a slow or idle client's file handle for nothing.
    if s.header_timeout > Duration::from_secs(10 * 60) {
        return Err(fail(
            "server.header_timeout",
            format!(
                "({}) must be at most 10m",
                humantime::format_duration(s.header_timeout)
            ),
        ));
    }
    // Browsers keep a cookie for at most 400 days, whatever it asks for.
    if s.session_ttl > Duration::from_secs(400 * 24 * 60 * 60) {
        return Err(fail(
            "server.session_ttl",
            "is longer than 400 days, the longest a browser keeps a cookie".into(),
        ));
    }

    Ok(())
}

fn egress(e: &EgressConfig, sb: &SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
    for name in e.resolve.keys() {
        if crate::egress::normalize_name(name).as_deref() != Some(name.as_str()) {
            return Err(fail(
                "sandbox.egress.resolve",
                format!("names \"{name}\", which is not a host name in lowercase"),
            ));
        }
    }
    if e.port != 0 && e.port == sb.tunnel_listen.port() {
        return Err(fail(
            "sandbox.egress.port",
            format!("({}) is the tunnel's port too; pick another", e.port),
        ));
    }
    if e.max_total_connections < e.max_connections {
        return Err(fail(
            "sandbox.egress.max_total_connections",
            format!(
                "({}) is below sandbox.egress.max_connections ({})",
                e.max_total_connections, e.max_connections
            ),
        ));
    }
    if e.max_connections == 0 {
        return Err(fail(
            "sandbox.egress.max_connections",
            "must be at least 1".into(),
        ));
    }
    min_duration(e.header_timeout, 1, "sandbox.egress.header_timeout", &fail)?;
    min_duration(
        e.connect_timeout,
        1,
        "sandbox.egress.connect_timeout",
        &fail,
    )
}

fn sandbox(sb: &SandboxConfig, fail: &Fail) -> Result<(), ConfigError> {
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
    if sb.default_cpus > sb.max_cpus {
        return Err(fail(
            "sandbox.default_cpus",
            format!(
                "({}) is above sandbox.max_cpus ({})",
                sb.default_cpus, sb.max_cpus
            ),
        ));
    }
    for (key, v) in [
        ("sandbox.default_memory_mb", sb.default_memory_mb),
        ("sandbox.max_memory_mb", sb.max_memory_mb),
    ] {
        // Docker refuses limits under 6 MB, and nothing useful runs in less than 16.
        if v < 16 {
            return Err(fail(key, format!("({v}) must be at least 16")));
        }
    }
    if sb.default_memory_mb > sb.max_memory_mb {
        return Err(fail(
            "sandbox.default_memory_mb",
            format!(
                "({}) is above sandbox.max_memory_mb ({})",
                sb.default_memory_mb, sb.max_memory_mb
            ),
        ));
    }
    const MIN_DISK: u64 = crate::model::MIN_DISK_MB;
    if sb.max_disk_mb < MIN_DISK {
        return Err(fail(
            "sandbox.max_disk_mb",
            format!("({}) must be at least {MIN_DISK}", sb.max_disk_mb),
        ));
    }
    if sb.default_disk_mb != 0 && !(MIN_DISK..=sb.max_disk_mb).contains(&sb.default_disk_mb) {
        return Err(fail(
            "sandbox.default_disk_mb",
            format!(
                "({}) must be 0 (no limit) or between {MIN_DISK} and sandbox.max_disk_mb ({})",
                sb.default_disk_mb, sb.max_disk_mb
            ),
        ));
    }
    if sb.rootfs_mb != 0 && sb.rootfs_mb < MIN_DISK {
        return Err(fail(
            "sandbox.rootfs_mb",
            format!(
                "({}) must be 0 (no limit) or at least {MIN_DISK}",
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
    let max_streams = crate::tunnel::registry::MAX_STREAMS_PER_AGENT;
    if !(1..=max_streams).contains(&sb.max_streams_per_agent) {
        return Err(fail(
            "sandbox.max_streams_per_agent",
            format!(
                "({}) must be between 1 and {max_streams} (the tunnel's limit of {} \
                 streams, less {} kept for pings and streams being closed)",
                sb.max_streams_per_agent,
                agenthold_proto::mux::MAX_STREAMS,
                crate::tunnel::registry::STREAM_HEADROOM,
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

fn docker(d: &DockerConfig, fail: &Fail) -> Result<(), ConfigError> {
    check_dns_label(&d.name_prefix).map_err(|p| fail("sandbox.docker.name_prefix", p))?;
    if d.network_pool.trunc() != d.network_pool {
        return Err(fail(
            "sandbox.docker.network_pool",
            format!(
                "({}) has host bits set; did you mean {}?",
                d.network_pool,
                d.network_pool.trunc()
            ),
        ));
    }
    if d.subnet_bits <= d.network_pool.prefix_len() || d.subnet_bits > 29 {
        return Err(fail(
            "sandbox.docker.subnet_bits",
            format!(
                "({}) must be above the pool's prefix length ({}) and at most 29, \
                 so the pool holds several subnets of at least 8 addresses",
                d.subnet_bits,
                d.network_pool.prefix_len()
            ),
        ));
    }
    for (key, v) in [
        ("sandbox.docker.runtime", &d.runtime),
        ("sandbox.docker.server_container", &d.server_container),
        ("sandbox.docker.sandboxd_volume", &d.sandboxd_volume),
        ("sandbox.docker.socket", &d.socket),
    ] {
        if v.trim() != v.as_str() || v.contains(char::is_control) {
            return Err(fail(
                key,
                format!("({v:?}) has spaces or control characters at its ends"),
            ));
        }
    }
    if !d.runtime.is_empty() {
        check_runtime_name(&d.runtime).map_err(|p| fail("sandbox.docker.runtime", p))?;
    }
    if let Some(allowed) = &d.allowed_runtimes {
        if allowed.is_empty() {
            return Err(fail(
                "sandbox.docker.allowed_runtimes",
                "is empty: list at least one runtime (runc is Docker's own)".to_string(),
            ));
        }
        for (i, r) in allowed.iter().enumerate() {
            check_runtime_name(r)
                .map_err(|p| fail(&format!("sandbox.docker.allowed_runtimes[{i}]"), p))?;
            if allowed[..i].contains(r) {
                return Err(fail(
                    &format!("sandbox.docker.allowed_runtimes[{i}]"),
                    format!("({r:?}) is listed twice"),
                ));
            }
        }
        if let Some(default) = d.runtime() {
            if !allowed.iter().any(|r| r == default) {
                return Err(fail(
                    "sandbox.docker.allowed_runtimes",
                    format!(
                        "({}) does not hold sandbox.docker.runtime ({default}), the runtime of \
                         an agent that asks for none",
                        allowed.join(", ")
                    ),
                ));
            }
        }
    }
    for (i, cap) in d.cap_drop.iter().enumerate() {
        if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(fail(
                &format!("sandbox.docker.cap_drop[{i}]"),
                format!("({cap:?}) is not a capability name like NET_RAW"),
            ));
        }
    }
    for (i, m) in d.host_mounts.iter().enumerate() {
        HostMount::parse(m).map_err(|p| fail(&format!("sandbox.docker.host_mounts[{i}]"), p))?;
    }
    Ok(())
}

/// A listener's total and per-address caps: at least 1, per address at most the total, and the
/// total at most Linux's default `nr_open`, past which no process can hold that many sockets.
fn check_connection_caps(
    (total_key, total): (&str, u32),
    (per_ip_key, per_ip): (&str, u32),
    fail: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if total == 0 || total > 1 << 20 {
        return Err(fail(
            total_key,
            format!("({total}) must be between 1 and 1048576"),
        ));
    }
    if per_ip == 0 || per_ip > total {
        return Err(fail(
            per_ip_key,
            format!("({per_ip}) must be between 1 and {total_key} ({total})"),
        ));
    }
    Ok(())
}

fn min_duration(
    v: Duration,
    min_secs: u64,
    key: &str,
    fail: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if v < Duration::from_secs(min_secs) {
        return Err(fail(
            key,
            format!(
                "({}) must be at least {min_secs}s",
                humantime::format_duration(v)
            ),
        ));
    }
    Ok(())
}

pub(super) fn check_token(token: &str) -> Result<(), String> {
    // The token travels in an `Authorization: Bearer` header, which cannot carry these.
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) || !token.is_ascii() {
        return Err("contains spaces, control or non-ASCII characters; \
                    it must fit in an Authorization header"
            .to_string());
    }
    Ok(())
}

fn check_dns_label(s: &str) -> Result<(), String> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let ok_ends = !s.starts_with('-') && !s.ends_with('-');
    if s.is_empty() || s.len() > 32 || !ok_chars || !ok_ends {
        return Err(format!(
            "({s:?}) must be 1 to 32 lowercase letters, digits or '-', \
             not starting or ending with '-'"
        ));
    }
    Ok(())
}

/// A Docker runtime name as `daemon.json` registers it: `runc`, `runsc`, `sysbox-runc`.
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
