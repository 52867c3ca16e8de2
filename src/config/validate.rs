//! Checks of a parsed config: each section checks itself in its own file (`server`, `sandbox`,
//! `egress`, `docker`, `preset`), naming the key at fault; here is the order they run in and
//! the checks they share.

use std::time::Duration;

use super::{docker, egress, preset, sandbox, server, sessions, Config, ConfigError};

/// Fails with the offending key and what is wrong with it.
pub(super) type Fail<'a> = dyn Fn(&str, String) -> ConfigError + 'a;

pub(super) fn validate(config: &Config, file: &str) -> Result<(), ConfigError> {
    let fail = failing(file);
    server::validate(&config.server, &fail)?;
    sandbox::validate(&config.sandbox, &fail)?;
    egress::validate(&config.sandbox.egress, &config.sandbox, &fail)?;
    docker::validate(&config.sandbox.docker, &fail)?;
    preset::validate(config, &fail)?;
    sessions::validate(config, &fail)
}

/// What fails with a key of `file`.
pub(super) fn failing(file: &str) -> impl Fn(&str, String) -> ConfigError + '_ {
    move |key: &str, problem: String| ConfigError::Invalid {
        file: file.to_string(),
        key: key.to_string(),
        problem,
    }
}

/// A listener's total and per-address caps: at least 1, per address at most the total, and the
/// total at most Linux's default `nr_open`, past which no process can hold that many sockets.
pub(super) fn check_connection_caps(
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

pub(super) fn min_duration(
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
