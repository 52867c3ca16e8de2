//! `sandbox.egress`: the proxy that is a sandbox's only way out; its defaults and its checks.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::de::{de_duration, de_opt_upstream, ser_duration};
use super::validate::{min_duration, Fail};
use super::{ConfigError, SandboxConfig};
use crate::egress::{DialSettings, EgressRules, SecretGuard, SocketAddrOrName};

/// `sandbox.egress`: the proxy that is a sandbox's only way out.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
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
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub connect_timeout: Duration,
    /// A PEM file of certificate authorities every sandbox trusts besides its image's own (for
    /// networks whose outbound TLS is re-signed by a proxy); empty = none.
    pub ca_certificates: PathBuf,
    /// Which TLS connections of an agent with granted secrets the proxy terminates: `hosts`
    /// (those to a host a secret names) or `all` (every one, so a placeholder sent anywhere
    /// else is refused).
    pub secret_guard: SecretGuard,
    /// MiB of request bodies the proxy holds whole at once, for all agents together, to swap
    /// an `inBody` secret in them (each at most 1 MiB); a body past it is refused `503`, and
    /// so is one past the agent's share (a quarter of it, at least 1 MiB).
    pub secret_body_budget_mb: usize,
    /// How long such a body may take to arrive after its request's headers: a slower one is
    /// refused `408`, and its place in the budget freed.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub secret_body_timeout: Duration,
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
            ca_certificates: PathBuf::new(),
            secret_guard: SecretGuard::Hosts,
            secret_body_budget_mb: 64,
            secret_body_timeout: Duration::from_secs(30),
        }
    }
}

impl EgressConfig {
    /// The authorities of `ca_certificates`, as the file has them; `None` when none is set.
    pub fn read_ca_certificates(&self) -> Result<Option<String>, CaFileError> {
        if self.ca_certificates.as_os_str().is_empty() {
            return Ok(None);
        }
        read_ca_file(&self.ca_certificates).map(Some)
    }

    /// What the proxy's dialer needs of this section.
    pub fn dial_settings(&self) -> DialSettings {
        DialSettings {
            resolve: self.resolve.clone(),
            upstream_proxy: self.upstream_proxy.clone(),
            connect_timeout: self.connect_timeout,
        }
    }
}

/// The largest `secret_body_budget_mb`: 4 GiB of bodies is more than a server should hold.
pub const MAX_BODY_BUDGET_MB: usize = 4096;

/// Why `sandbox.egress.ca_certificates` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is {len} bytes; a file of certificate authorities is at most {MAX_CA_FILE} bytes"
    )]
    TooLarge { path: String, len: u64 },
    #[error("{path} is not PEM text: {why}")]
    NotPem { path: String, why: String },
    #[error("{path} holds no certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: String },
    #[error(
        "{path} holds a {kind} besides certificates; it is copied into every sandbox, so it may \
         hold certificates only"
    )]
    NotACertificate { path: String, kind: String },
}

/// A whole Mozilla bundle is a quarter of this.
pub const MAX_CA_FILE: u64 = 1024 * 1024;

/// Reads a PEM file that must hold certificates and nothing else: a private key put there by
/// mistake would otherwise be handed to every sandbox.
fn read_ca_file(path: &Path) -> Result<String, CaFileError> {
    use rustls_pki_types::pem::{PemObject, SectionKind};
    let shown = path.display().to_string();
    let read = |source| CaFileError::Read {
        path: shown.clone(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read)?.len();
    if len > MAX_CA_FILE {
        return Err(CaFileError::TooLarge { path: shown, len });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    let mut certificates = 0;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(text.as_bytes()) {
        match section {
            Ok((SectionKind::Certificate, _)) => certificates += 1,
            Ok((kind, _)) => {
                return Err(CaFileError::NotACertificate {
                    path: shown,
                    kind: format!("{kind:?}"),
                })
            }
            Err(e) => {
                return Err(CaFileError::NotPem {
                    path: shown,
                    why: e.to_string(),
                })
            }
        }
    }
    if certificates == 0 {
        return Err(CaFileError::NoCertificate { path: shown });
    }
    Ok(text)
}

pub(super) fn validate(
    e: &EgressConfig,
    sb: &SandboxConfig,
    fail: &Fail,
) -> Result<(), ConfigError> {
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
    if !(1..=MAX_BODY_BUDGET_MB).contains(&e.secret_body_budget_mb) {
        return Err(fail(
            "sandbox.egress.secret_body_budget_mb",
            format!(
                "({}) must be 1 to {MAX_BODY_BUDGET_MB}",
                e.secret_body_budget_mb
            ),
        ));
    }
    if e.max_connections == 0 {
        return Err(fail(
            "sandbox.egress.max_connections",
            "must be at least 1".into(),
        ));
    }
    e.read_ca_certificates()
        .map_err(|why| fail("sandbox.egress.ca_certificates", why.to_string()))?;
    min_duration(e.header_timeout, 1, "sandbox.egress.header_timeout", &fail)?;
    min_duration(
        e.secret_body_timeout,
        1,
        "sandbox.egress.secret_body_timeout",
        &fail,
    )?;
    min_duration(
        e.connect_timeout,
        1,
        "sandbox.egress.connect_timeout",
        &fail,
    )
}
