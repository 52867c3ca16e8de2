//! The server's settings: one YAML file (`agenthold serve --config FILE`), every key optional.
//!
//! Loading refuses unknown keys, wrong types and impossible values with one message that names
//! the file and the dotted key, so a typo never silently falls back to a default.
//!
//! Each section (its keys, defaults and checks) has its own file: [`server`], [`sandbox`],
//! [`egress`] (`sandbox.egress`), [`docker`] (`sandbox.docker`) and [`preset`] (`presets`).
//! This file holds the whole: loading, the environment, and the startup warnings. A running
//! server reads its file again on request ([`reload`]): [`restart`] says which keys only a
//! restart changes, [`diff`] which keys two configs differ in.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agents::preset::{Preset, PresetInfo};

mod approvals;
mod de;
mod diff;
mod docker;
mod egress;
mod origin;
mod preset;
mod previews;
pub mod reload;
mod restart;
mod sandbox;
mod server;
mod sessions;
mod validate;
pub use approvals::ApprovalsConfig;
pub use docker::{DockerConfig, HostMount};
pub use egress::EgressConfig;
pub use origin::{is_trusted, WebOrigin};
pub use preset::MAX_SETUP;
pub use previews::{PreviewsConfig, UrlScheme};
pub use sandbox::{DriverKind, NofileLimit, SandboxConfig};
pub use server::ServerConfig;
pub use sessions::{harness_names, HarnessConfig, SessionsConfig};

/// The environment variable that overrides `server.admin_token`, so the secret need not sit in a
/// file.
pub const ADMIN_TOKEN_ENV: &str = "AGENTHOLD_ADMIN_TOKEN";

/// The environment variable that overrides `server.log_level`.
pub const LOG_ENV: &str = "AGENTHOLD_LOG";

/// The ready agent image (`images/agent/Dockerfile`, built by `scripts/build-agent-image.sh`).
pub const AGENT_IMAGE: &str = "agenthold/agent:bookworm";

/// Everything the server reads from its config file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub sandbox: SandboxConfig,
    /// Named templates for new agents, by name (DNS-safe, like agent names).
    pub presets: BTreeMap<String, Preset>,
    /// The coding agents sessions can run (ACP over stdio), by name.
    pub harnesses: BTreeMap<String, HarnessConfig>,
    /// Limits of agent sessions and approvals.
    pub sessions: SessionsConfig,
    /// Which commands wait for a person's approval.
    pub approvals: ApprovalsConfig,
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

impl ConfigError {
    /// The dotted key at fault, when the file's values are well-formed but one cannot work (a
    /// parse error names its key in the message).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::Read { .. } | ConfigError::Parse { .. } => None,
        }
    }
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
                config.validate("defaults")?;
                config.apply_env("defaults", env)?;
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
                    "Debian with git, curl, Python (a venv on PATH, pip), build tools, vim, jq; \
                     runs as the agent account, with sudo"
                        .to_string(),
                ),
                image: Some(AGENT_IMAGE.to_string()),
                allow_root: true,
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
        docker::take_moved_keys(&mut config.sandbox, &validate::failing(source))?;
        // The file is checked as written, then the environment (whose values are checked as
        // they are taken) overrides it.
        config.validate(source)?;
        config.apply_env(source, env)?;
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
        out.extend(docker::moved_key_warnings(&self.sandbox.docker));
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
            server::check_token(&token).map_err(|problem| ConfigError::Invalid {
                file: source.to_string(),
                key: ADMIN_TOKEN_ENV.to_string(),
                problem,
            })?;
            self.server.admin_token = Some(token);
        }
        if let Some(filter) = env(LOG_ENV).filter(|f| !f.is_empty()) {
            server::check_log_filter(&filter).map_err(|problem| ConfigError::Invalid {
                file: source.to_string(),
                key: LOG_ENV.to_string(),
                problem,
            })?;
            self.server.log_level = filter;
        }
        Ok(())
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        validate::validate(self, file)
    }

    /// Every preset with the defaults filled in, sorted by name.
    pub fn preset_infos(&self) -> Vec<PresetInfo> {
        let defaults = self.sandbox.agent_defaults();
        self.presets
            .iter()
            .map(|(name, p)| p.info(name, &defaults))
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
