//! The server's settings: one YAML file (`agenthold serve --config FILE`), every key optional.
//!
//! Loading refuses unknown keys, wrong types and impossible values with one message that names
//! the file and the dotted key, so a typo never silently falls back to a default.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net};
use serde::Deserialize;

mod de;
mod origin;
mod preset;
mod validate;
use crate::egress::EgressRules;
use de::{
    de_duration, de_ip_nets, de_ipv4_net, de_opt_origin, de_opt_path, de_opt_string,
    de_opt_upstream, de_socket_addr,
};
pub use origin::{is_trusted, WebOrigin};
pub use preset::{Preset, PresetInfo, MAX_SETUP};

/// The environment variable that overrides `server.admin_token`, so the secret need not sit in a
/// file.
pub const ADMIN_TOKEN_ENV: &str = "AGENTHOLD_ADMIN_TOKEN";

/// The ready agent image (`images/agent/Dockerfile`, built by `scripts/build-agent-image.sh`).
pub const AGENT_IMAGE: &str = "agenthold/agent:bookworm";

/// Everything the server reads from its config file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub sandbox: SandboxConfig,
    /// Named templates for new agents, by name (DNS-safe, like agent names).
    pub presets: BTreeMap<String, Preset>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Where the REST API, web UI and CLI clients connect.
    #[serde(deserialize_with = "de_socket_addr")]
    pub listen: SocketAddr,
    /// Holds the SQLite database.
    pub data_dir: PathBuf,
    /// The token for the API; [`ADMIN_TOKEN_ENV`] wins over the file. An empty string means none.
    #[serde(deserialize_with = "de_opt_string")]
    pub admin_token: Option<String>,
    /// The largest body `fs/write` accepts, in MiB.
    pub max_file_mb: u64,
    /// How much of each of stdout and stderr a non-streaming exec keeps, in KiB.
    pub exec_output_cap_kb: u64,
    /// The exec timeout when the request names none.
    #[serde(deserialize_with = "de_duration")]
    pub exec_default_timeout: Duration,
    /// The longest timeout an exec request may ask for.
    #[serde(deserialize_with = "de_duration")]
    pub exec_max_timeout: Duration,
    /// How long a web UI sign-in lasts; it survives restarts, not a change of admin token.
    #[serde(deserialize_with = "de_duration")]
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
    #[serde(deserialize_with = "de_duration")]
    pub header_timeout: Duration,
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
            session_ttl: Duration::from_secs(30 * 24 * 60 * 60),
            metrics_token: None,
            public_url: None,
            trusted_proxies: Vec::new(),
            max_connections: 4096,
            max_connections_per_ip: 256,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Which driver runs the sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub driver: DriverKind,
    /// The preset of agents created without one; `None` (written `""`) means none, and the
    /// `default_*` settings below apply.
    #[serde(deserialize_with = "de_opt_string")]
    pub default_preset: Option<String>,
    pub default_image: String,
    pub default_cpus: f64,
    pub default_memory_mb: u64,
    pub default_idle_minutes: u32,
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
    #[serde(deserialize_with = "de_duration")]
    pub idle_check_interval: Duration,
    /// How long one `idleMinutes` unit lasts; a minute, except in tests that need idle times in
    /// seconds.
    #[serde(deserialize_with = "de_duration")]
    pub idle_minute: Duration,
    /// `None` (written `""`) means the `sandboxd` next to the agenthold binary.
    #[serde(deserialize_with = "de_opt_path")]
    pub sandboxd_path: Option<PathBuf>,
    /// How often the server pings each sandbox; three missed pings mark the session dead.
    #[serde(deserialize_with = "de_duration")]
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
    #[serde(deserialize_with = "de_duration")]
    pub process_retention: Duration,
    /// Background processes one agent may run at once; more get `409`. Finished ones count
    /// towards no limit but this many are kept at most.
    pub max_processes: u32,
    /// Streams (terminal viewers, exec calls, file transfers, terminal list and kill) the
    /// server may have open to one agent's sandbox at once; more get `429`. Kept below the
    /// tunnel's own limit, which ends the whole tunnel when reached.
    pub max_streams_per_agent: usize,
    pub egress: EgressConfig,
    pub docker: DockerConfig,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            driver: DriverKind::Docker,
            default_preset: None,
            default_image: "debian:bookworm-slim".to_string(),
            default_cpus: 2.0,
            default_memory_mb: 4096,
            default_idle_minutes: 15,
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
            egress: EgressConfig::default(),
            docker: DockerConfig::default(),
        }
    }
}

/// `sandbox.egress`: the proxy that is a sandbox's only way out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// The `egress` of agents created without one.
    pub default: EgressRules,
    /// The proxy's port on each agent network (on the same addresses as the tunnel); 0 picks a
    /// free one at startup.
    pub port: u16,
    /// An `http://host:port` proxy the server itself must go through to reach the internet;
    /// `None` (written `""`) dials destinations directly.
    #[serde(deserialize_with = "de_opt_upstream")]
    pub upstream_proxy: Option<SocketAddrOrName>,
    /// Host names answered from here instead of DNS (split-horizon setups, and tests). These
    /// addresses are the operator's own and are dialled even when they are not public.
    pub resolve: BTreeMap<String, IpAddr>,
    /// Connections through the proxy one agent may hold at once; more are refused with `429`.
    pub max_connections: usize,
    /// Connections the proxy holds at once for all agents together (each takes two file
    /// handles); more are refused with `503`.
    pub max_total_connections: usize,
    /// How long a sandbox may take to send a proxy request's headers.
    #[serde(deserialize_with = "de_duration")]
    pub header_timeout: Duration,
    /// Transparent mode: the firewall sends a sandbox's DNS to the server's resolver (which
    /// answers allowed names only) and its TCP to ports 80 and 443 to the proxy (which decides
    /// on the Host header or the TLS server name), for programs that ignore the proxy
    /// variables. Needs the server on the host.
    pub transparent: bool,
    /// The resolver's UDP port (on the tunnel's addresses) in transparent mode; 0 picks a free
    /// one at startup.
    pub dns_port: u16,
    /// How long the proxy waits for a destination to accept a connection.
    #[serde(deserialize_with = "de_duration")]
    pub connect_timeout: Duration,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            default: EgressRules::default(),
            port: 8091,
            upstream_proxy: None,
            resolve: BTreeMap::new(),
            max_connections: 256,
            max_total_connections: 4096,
            transparent: true,
            dns_port: 8053,
            header_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// `host:port` of an upstream proxy, as the operator wrote it (a name is resolved per dial).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketAddrOrName {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for SocketAddrOrName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// `sandbox.nofile`: the soft limit is what a process starts with, the hard one how far it may
/// raise it itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    /// Starts every container, volume and network name; lets several installations share a host.
    pub name_prefix: String,
    /// Each agent's internal network takes one subnet of this pool.
    #[serde(deserialize_with = "de_ipv4_net")]
    pub network_pool: Ipv4Net,
    /// The prefix length of each agent's subnet.
    pub subnet_bits: u8,
    /// The OCI runtime of an agent that asks for none; empty means Docker's default.
    pub runtime: String,
    /// The runtimes an agent may ask for; `None` (absent) means `runc`, plus `runsc` when the
    /// engine has it, plus `runtime`.
    pub allowed_runtimes: Option<Vec<String>>,
    /// The server's own container; empty means detect it.
    pub server_container: String,
    /// The volume sandboxd is served from; empty means `<name_prefix>-sandboxd`.
    pub sandboxd_volume: String,
    /// The Docker endpoint; empty means `DOCKER_HOST` or `/var/run/docker.sock`.
    pub socket: String,
    pub no_new_privileges: bool,
    pub cap_drop: Vec<String>,
    /// `HOST:CONTAINER[:ro|:rw]` bind mounts added to every sandbox.
    pub host_mounts: Vec<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            name_prefix: "agenthold".to_string(),
            network_pool: Ipv4Net::new(Ipv4Addr::new(10, 213, 0, 0), 16)
                .expect("16 is a valid IPv4 prefix length"),
            subnet_bits: 28,
            runtime: String::new(),
            allowed_runtimes: None,
            server_container: String::new(),
            sandboxd_volume: String::new(),
            socket: String::new(),
            no_new_privileges: true,
            cap_drop: [
                "NET_RAW",
                "MKNOD",
                "AUDIT_WRITE",
                "SYS_CHROOT",
                "SETFCAP",
                "NET_BIND_SERVICE",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            host_mounts: Vec::new(),
        }
    }
}

impl DockerConfig {
    /// The OCI runtime to ask for, if not Docker's default.
    pub fn runtime(&self) -> Option<&str> {
        non_empty(&self.runtime)
    }

    /// The server's container id or name, if set rather than to be detected.
    pub fn server_container(&self) -> Option<&str> {
        non_empty(&self.server_container)
    }

    /// The Docker endpoint, if set rather than taken from `DOCKER_HOST` or the default socket.
    pub fn socket(&self) -> Option<&str> {
        non_empty(&self.socket)
    }

    /// The volume name sandboxd is served from, with the default filled in.
    pub fn sandboxd_volume_name(&self) -> String {
        match non_empty(&self.sandboxd_volume) {
            Some(v) => v.to_string(),
            None => format!("{}-sandboxd", self.name_prefix),
        }
    }

    /// `host_mounts`, parsed. Load has validated them, so this fails only on a hand-built config.
    pub fn parsed_host_mounts(&self) -> Result<Vec<HostMount>, String> {
        self.host_mounts
            .iter()
            .map(|m| HostMount::parse(m))
            .collect()
    }
}

fn non_empty(s: &str) -> Option<&str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

/// One `HOST:CONTAINER[:ro|:rw]` entry of `sandbox.docker.host_mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMount {
    pub host: PathBuf,
    pub container: PathBuf,
    pub read_only: bool,
}

impl HostMount {
    pub fn parse(s: &str) -> Result<HostMount, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (host, container, read_only) = match parts.as_slice() {
            [h, c] => (*h, *c, false),
            [h, c, "ro"] => (*h, *c, true),
            [h, c, "rw"] => (*h, *c, false),
            [_, _, mode] => {
                return Err(format!(
                    "(\"{s}\") has mode \"{mode}\"; write ro or rw, or leave it out"
                ))
            }
            _ => {
                return Err(format!(
                    "(\"{s}\") is not HOST:CONTAINER or HOST:CONTAINER:ro \
                     (paths cannot contain ':')"
                ))
            }
        };
        for (what, p) in [("host", host), ("container", container)] {
            if !p.starts_with('/') {
                return Err(format!(
                    "(\"{s}\") needs an absolute {what} path, starting with '/'"
                ));
            }
        }
        if container == "/" || container.trim_end_matches('/') == "/home/agent" {
            // Covering / or the home volume would hide the sandbox's own filesystem or home.
            return Err(format!(
                "(\"{s}\") would cover {container}; mount somewhere below it instead"
            ));
        }
        Ok(HostMount {
            host: PathBuf::from(host),
            container: PathBuf::from(container),
            read_only,
        })
    }
}

/// Why the config could not be loaded; the message says which file and key to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read the config file: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not YAML, an unknown key or a value of the wrong type; `message` carries the key and line.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// A well-formed value that cannot work.
    #[error("{file}: {key} {problem}")]
    Invalid {
        file: String,
        key: String,
        problem: String,
    },
}

impl Config {
    /// Reads the config file at `path`, or takes the defaults when there is none, then applies
    /// the environment (looked up through `env`, so tests need not touch the process's).
    pub fn load(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        match path {
            Some(path) => {
                let yaml = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                Config::from_yaml_str(&yaml, &path.display().to_string(), env)
            }
            None => {
                let mut config = Config::without_file();
                config.apply_env("defaults", env)?;
                config.validate("defaults")?;
                Ok(config)
            }
        }
    }

    /// What a server started without a config file runs on: the defaults, with the presets
    /// `dev` (the ready agent image, `images/agent`, which `scripts/build-agent-image.sh`
    /// builds) as the default and `minimal` (plain `sandbox.default_image`).
    pub fn without_file() -> Config {
        let mut config = Config::default();
        config.presets.insert(
            "dev".to_string(),
            Preset {
                description: Some(
                    "Debian with git, curl, Python (venv, pip), build tools, vim, jq; runs as \
                     the agent account"
                        .to_string(),
                ),
                image: Some(AGENT_IMAGE.to_string()),
                ..Preset::default()
            },
        );
        config.presets.insert(
            "minimal".to_string(),
            Preset {
                description: Some("Plain Debian (bookworm-slim); runs as root".to_string()),
                image: Some(config.sandbox.default_image.clone()),
                ..Preset::default()
            },
        );
        config.sandbox.default_preset = Some("dev".to_string());
        config
    }

    /// Parses `yaml` (an empty document means all defaults); `source` names it in messages.
    pub fn from_yaml_str(
        yaml: &str,
        source: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config: Config = serde_yaml_ng::from_str(yaml).map_err(|e| ConfigError::Parse {
            file: source.to_string(),
            message: e.to_string(),
        })?;
        config.apply_env(source, env)?;
        config.validate(source)?;
        Ok(config)
    }

    /// The SQLite file inside `server.data_dir`.
    pub fn database_path(&self) -> PathBuf {
        self.server.data_dir.join("agenthold.db")
    }

    /// Settings that work but deserve a line in the log at startup: each is a risk the operator
    /// chose. The caller logs them once tracing is set up.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.sandbox.driver == DriverKind::Fake {
            out.push(
                "sandbox.driver is fake: terminals and exec run on this machine as this \
                 server's user, with no isolation; use it for development and tests only"
                    .to_string(),
            );
        }
        if self.sandbox.driver == DriverKind::Docker {
            for m in &self.sandbox.docker.host_mounts {
                out.push(format!(
                    "sandbox.docker.host_mounts: \"{m}\" gives every sandbox access to this \
                     host path"
                ));
            }
            if !self.sandbox.docker.no_new_privileges {
                out.push(
                    "sandbox.docker.no_new_privileges is false: setuid programs in a sandbox \
                     can gain privileges"
                        .to_string(),
                );
            }
        }
        if let Some(token) = &self.server.admin_token {
            if token.len() < 16 {
                out.push(format!(
                    "server.admin_token is only {} characters long; use at least 32 random \
                     characters",
                    token.len()
                ));
            }
        }
        out
    }

    fn apply_env(
        &mut self,
        source: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(token) = env(ADMIN_TOKEN_ENV).filter(|t| !t.is_empty()) {
            validate::check_token(&token).map_err(|problem| ConfigError::Invalid {
                file: source.to_string(),
                key: ADMIN_TOKEN_ENV.to_string(),
                problem,
            })?;
            self.server.admin_token = Some(token);
        }
        Ok(())
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        validate::validate(self, file)
    }

    /// Every preset with the defaults filled in, sorted by name.
    pub fn preset_infos(&self) -> Vec<PresetInfo> {
        self.presets
            .iter()
            .map(|(name, p)| p.info(name, &self.sandbox))
            .collect()
    }
}

/// Parses `host:port`, or `:port` for every address (the Go-style form the docs use).
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("\"{s}\" has no valid port after ':'"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    s.parse().map_err(|_| {
        format!("\"{s}\" is not an address like 127.0.0.1:8080, [::1]:8080 or :8080 (a host name will not do)")
    })
}

#[cfg(test)]
mod tests;
