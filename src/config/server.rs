//! `server`: the API listener, the data directory, the admin token, exec's and sessions'
//! limits; their defaults and their checks.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::de::{
    de_duration, de_ip_nets, de_opt_origin, de_opt_path, de_opt_string, de_socket_addr,
    ser_duration,
};
use super::previews::PreviewsConfig;
use super::validate::{check_connection_caps, min_duration, Fail};
use super::{ConfigError, WebOrigin};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Where the REST API, web UI and CLI clients connect.
    #[serde(deserialize_with = "de_socket_addr")]
    pub listen: SocketAddr,
    /// Holds the SQLite database.
    pub data_dir: PathBuf,
    /// The token for the API; [`super::ADMIN_TOKEN_ENV`] wins over the file. An empty string means none.
    #[serde(deserialize_with = "de_opt_string")]
    pub admin_token: Option<String>,
    /// The largest body `fs/write` accepts, in MiB.
    pub max_file_mb: u64,
    /// How much of each of stdout and stderr a non-streaming exec keeps, in KiB.
    pub exec_output_cap_kb: u64,
    /// The exec timeout when the request names none.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub exec_default_timeout: Duration,
    /// The longest timeout an exec request may ask for.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub exec_max_timeout: Duration,
    /// How long a request that needs the sandbox (exec, files, processes, terminals, prompts)
    /// waits for a sleeping or stopping agent to wake before answering `503`.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub wake_timeout: Duration,
    /// How long a web UI sign-in lasts; it survives restarts, not a change of admin token.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub session_ttl: Duration,
    /// A token that opens `GET /metrics` alone, for a Prometheus scraper; empty means the
    /// admin token (or a web session) is needed there too.
    #[serde(deserialize_with = "de_opt_string")]
    pub metrics_token: Option<String>,
    /// The origin people open the web UI at (`https://agents.example.com`). Cookie requests
    /// that change things must come from it; `None` means the origin the request's `Host`
    /// names. An `https` one also marks the session cookie `Secure`.
    #[serde(deserialize_with = "de_opt_origin")]
    pub public_url: Option<WebOrigin>,
    /// Peers whose `X-Forwarded-Proto` is believed (a TLS-terminating proxy in front of us).
    /// Anyone else could claim HTTPS with that header, so nobody is believed by default.
    #[serde(deserialize_with = "de_ip_nets")]
    pub trusted_proxies: Vec<IpNet>,
    /// Connections the API listener holds at once; more are closed as they come. Kept apart
    /// from the tunnel's, so neither side can use up the other's share of file handles.
    pub max_connections: u32,
    /// Connections one client address may hold on the API listener (an IPv6 client: its /64);
    /// `trusted_proxies` count only against `max_connections`, as every client comes through
    /// them.
    pub max_connections_per_ip: u32,
    /// How long a client may take to send a request's headers, on both listeners; also how long
    /// a kept-alive connection may sit idle between requests.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub header_timeout: Duration,
    /// What the server logs: a level (`info`, `debug`) or per-module directives
    /// (`info,agenthold::egress=debug`); [`super::LOG_ENV`] wins over it.
    pub log_level: String,
    /// The preview listener: what agents serve, each on an origin of its own.
    pub previews: PreviewsConfig,
    /// The key secrets are sealed with at rest; `None`: `secrets.key` in [`Self::data_dir`]
    /// (made at the first start, mode 0600).
    #[serde(deserialize_with = "de_opt_path")]
    pub secrets_key_file: Option<PathBuf>,
    /// How long audit entries are kept; zero keeps them forever.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub audit_retention: Duration,
    /// A file every audit entry is also appended to, as a JSON line; `None` for none.
    #[serde(deserialize_with = "de_opt_path")]
    pub audit_log: Option<PathBuf>,
}

impl ServerConfig {
    /// Where the secrets' key is (see [`Self::secrets_key_file`]).
    pub fn secrets_key_path(&self) -> PathBuf {
        self.secrets_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("secrets.key"))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080),
            data_dir: PathBuf::from("./data"),
            admin_token: None,
            max_file_mb: 4096,
            exec_output_cap_kb: 1024,
            exec_default_timeout: Duration::from_secs(10 * 60),
            exec_max_timeout: Duration::from_secs(24 * 60 * 60),
            wake_timeout: Duration::from_secs(60),
            session_ttl: Duration::from_secs(30 * 24 * 60 * 60),
            metrics_token: None,
            public_url: None,
            trusted_proxies: Vec::new(),
            max_connections: 4096,
            max_connections_per_ip: 256,
            header_timeout: Duration::from_secs(10),
            log_level: "info".to_string(),
            previews: PreviewsConfig::default(),
            secrets_key_file: None,
            audit_retention: Duration::from_secs(90 * 24 * 60 * 60),
            audit_log: None,
        }
    }
}

pub(super) fn validate(s: &ServerConfig, fail: &Fail) -> Result<(), ConfigError> {
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
    min_duration(s.wake_timeout, 1, "server.wake_timeout", &fail)?;
    // A caller waits this long on an open request: hours would only hold connections.
    if s.wake_timeout > Duration::from_secs(60 * 60) {
        return Err(fail(
            "server.wake_timeout",
            format!(
                "({}) must be at most 1h",
                humantime::format_duration(s.wake_timeout)
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
    check_log_filter(&s.log_level).map_err(|p| fail("server.log_level", p))?;
    // Pruned hourly: a shorter retention would not be kept to anyway.
    if !s.audit_retention.is_zero() && s.audit_retention < Duration::from_secs(60 * 60) {
        return Err(fail(
            "server.audit_retention",
            format!(
                "({}) must be 0s (keep forever) or at least 1h",
                humantime::format_duration(s.audit_retention)
            ),
        ));
    }
    if let Some(dir) = s.audit_log.as_deref().and_then(|p| p.parent()) {
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            return Err(fail(
                "server.audit_log",
                format!("is in {}, which is not a directory", dir.display()),
            ));
        }
    }
    super::previews::validate(&s.previews, fail)?;
    if s.previews.listen == s.listen && s.listen.port() != 0 {
        return Err(fail(
            "server.previews.listen",
            format!(
                "({}) is server.listen's address too; give previews a port of their own",
                s.listen
            ),
        ));
    }
    Ok(())
}

/// A level or `tracing` directives, as `tracing_subscriber`'s `EnvFilter` reads them.
pub(super) fn check_log_filter(filter: &str) -> Result<(), String> {
    if filter.trim().is_empty() {
        return Err("is empty; write a level such as info".to_string());
    }
    tracing_subscriber::EnvFilter::try_new(filter)
        .map(drop)
        .map_err(|e| {
            format!("({filter:?}) is not a log level or filter like info or agenthold=debug: {e}")
        })
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
