//! `/etc/agenthold/boot.json`: what the server tells a sandbox before each start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const BOOT_PATH: &str = "/etc/agenthold/boot.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootConfig {
    pub agent_id: String,
    /// Fresh for every start; the server keeps only its hash.
    pub token: String,
    /// `ws://ADDRESS:PORT/tunnel`, by address: sandboxd makes no name lookups.
    pub tunnel_url: String,
    /// Variables every shell, terminal and command in the sandbox starts with (the egress
    /// proxy's `HTTP_PROXY` and friends). Written at every start, so a change needs no rebuild.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Extra certificate authorities (PEM) every program in the sandbox trusts
    /// (`sandbox.egress.ca_certificates`): sandboxd adds them to the system bundle and writes
    /// [`CA_BUNDLE_PATH`], which the variables in [`CA_BUNDLE_ENV`] name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates: Option<String>,
}

/// The system's certificates plus `sandbox.egress.ca_certificates`, written by sandboxd at boot.
pub const CA_BUNDLE_PATH: &str = "/etc/agenthold/ca-certificates.crt";

/// The variables that point the usual tools (OpenSSL, Python's requests and pip, Node, curl, git)
/// at [`CA_BUNDLE_PATH`], set in every program's env when extra authorities are configured.
pub const CA_BUNDLE_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
];

#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid boot file: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
}

impl BootConfig {
    pub fn load(path: &str) -> Result<BootConfig, BootError> {
        let raw = std::fs::read(path).map_err(|source| BootError::Read {
            path: path.into(),
            source,
        })?;
        serde_json::from_slice(&raw).map_err(|source| BootError::Parse {
            path: path.into(),
            source,
        })
    }
}

/// How the driver hands sandboxd the image's own `USER` (the container itself runs sandboxd as
/// root, so that it can adopt the home volume); commands run as that user when the image has no
/// `agent` account.
pub const IMAGE_USER_ENV: &str = "AGENTHOLD_IMAGE_USER";

/// The path of the server's tunnel endpoint, which sandboxd dials.
pub const TUNNEL_PATH: &str = "/tunnel";

/// Header names the tunnel's WebSocket upgrade carries.
pub const AGENT_HEADER: &str = "x-agenthold-agent";
