//! `server.previews`: the listener that serves what agents serve inside their sandboxes, each
//! preview on an origin of its own (`{port}-{agent}.{domain}`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::de::de_socket_addr;
use super::validate::Fail;
use super::ConfigError;

/// The scheme preview URLs are given with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UrlScheme {
    Http,
    /// A TLS proxy with a wildcard certificate serves the previews' hosts on 443.
    Https,
}

impl UrlScheme {
    pub fn as_str(self) -> &'static str {
        match self {
            UrlScheme::Http => "http",
            UrlScheme::Https => "https",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreviewsConfig {
    /// Where the preview listener accepts browsers (every preview's host arrives here).
    #[serde(deserialize_with = "de_socket_addr")]
    pub listen: SocketAddr,
    /// The domain preview hosts are made under. `localhost` needs no DNS: browsers resolve
    /// `*.localhost` to loopback.
    pub domain: String,
    /// `https` when a TLS proxy serves the previews: URLs then name no port.
    pub public_url_scheme: UrlScheme,
    /// Previews one agent may have at once.
    pub max_per_agent: u32,
}

impl Default for PreviewsConfig {
    fn default() -> Self {
        PreviewsConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8081),
            domain: "localhost".to_string(),
            public_url_scheme: UrlScheme::Http,
            max_per_agent: 64,
        }
    }
}

/// Longest domain: with `{port}-{name}.` in front, a host must stay within DNS's 253.
const MAX_DOMAIN: usize = 180;

pub(super) fn validate(p: &PreviewsConfig, fail: &Fail) -> Result<(), ConfigError> {
    check_domain(&p.domain).map_err(|e| fail("server.previews.domain", e))?;
    if p.max_per_agent == 0 {
        return Err(fail(
            "server.previews.max_per_agent",
            "must be at least 1".into(),
        ));
    }
    Ok(())
}

/// A DNS name of labels of `[a-z0-9-]`, neither starting nor ending with `-`.
fn check_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() || domain.len() > MAX_DOMAIN {
        return Err(format!(
            "({domain:?}) must be a DNS name of 1 to {MAX_DOMAIN} characters, like localhost \
             or preview.example.com"
        ));
    }
    let good_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !domain.split('.').all(good_label) {
        return Err(format!(
            "({domain:?}) is not a lowercase DNS name like localhost or preview.example.com"
        ));
    }
    if domain.parse::<IpAddr>().is_ok()
        || domain
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!(
            "({domain:?}) is an address: previews need a name whose subdomains reach this server"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_lowercase_dns_names() {
        for good in ["localhost", "preview.example.com", "a-b.c"] {
            assert!(check_domain(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Localhost",
            "-a.com",
            "a..b",
            "a.b-",
            "127.0.0.1",
            "a_b.com",
            "x.com.",
        ] {
            assert!(check_domain(bad).is_err(), "{bad}");
        }
        assert!(check_domain(&"a".repeat(MAX_DOMAIN + 1)).is_err());
    }
}
