//! `sandbox.egress`: the proxy that is a sandbox's only way out; its defaults and its checks.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::de::{de_duration, de_opt_upstream, ser_duration};
use super::validate::{min_duration, Fail};
use super::{ConfigError, SandboxConfig};
use crate::egress::{DialSettings, EgressRules, SocketAddrOrName};

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

impl EgressConfig {
    /// What the proxy's dialer needs of this section.
    pub fn dial_settings(&self) -> DialSettings {
        DialSettings {
            resolve: self.resolve.clone(),
            upstream_proxy: self.upstream_proxy.clone(),
            connect_timeout: self.connect_timeout,
        }
    }
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
