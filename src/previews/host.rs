//! Preview hosts: `{port}-{agent name}.{domain}`, read from a request's `Host` and written
//! into a preview's URL. One origin per agent and port, never a path under the API's origin,
//! so a previewed app can use absolute paths and cannot read the API's cookies.

use crate::agents::spec::check_name;
use crate::config::{PreviewsConfig, UrlScheme};

/// What a `Host` header names: an agent's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewHost {
    pub port: u16,
    pub name: String,
}

/// Reads `host` (a `Host` header's value, with or without a port) as a preview host under
/// `domain`; `None` for anything else: another domain, an IP literal, a port outside
/// 1–65535 or written with a leading zero, a name no agent could have.
pub fn parse(host: &str, domain: &str) -> Option<PreviewHost> {
    let host = host.trim().to_ascii_lowercase();
    let name_part = match host.rsplit_once(':') {
        // An IPv6 literal (`[::1]:8081`) has colons but never ends in our domain.
        Some((h, port)) if !h.contains(':') => {
            port.parse::<u16>().ok()?;
            h
        }
        Some(_) => return None,
        None => host.as_str(),
    };
    let name_part = name_part.strip_suffix('.').unwrap_or(name_part);
    let label = name_part.strip_suffix(domain)?.strip_suffix('.')?;
    if label.contains('.') {
        return None;
    }
    let (port, name) = label.split_once('-')?;
    if port.is_empty() || port.starts_with('0') || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port: u16 = port.parse().ok()?;
    check_name(name).ok()?;
    Some(PreviewHost {
        port,
        name: name.to_string(),
    })
}

/// The host (with the listener's port, `listening`, where the URL needs one) of agent
/// `name`'s `port`.
pub fn host(config: &PreviewsConfig, listening: u16, name: &str, port: u16) -> String {
    let base = format!("{port}-{name}.{}", config.domain);
    match (config.public_url_scheme, listening) {
        // Behind a TLS proxy the browser comes in on 443, whatever port we listen on.
        (UrlScheme::Https, _) | (UrlScheme::Http, 80) => base,
        (UrlScheme::Http, listen) => format!("{base}:{listen}"),
    }
}

/// The origin (`http://5173-builder.localhost:8081`) of agent `name`'s `port`.
pub fn origin(config: &PreviewsConfig, listening: u16, name: &str, port: u16) -> String {
    format!(
        "{}://{}",
        config.public_url_scheme.as_str(),
        host(config, listening, name, port)
    )
}

/// A preview's URL: its origin and `/`.
pub fn url(config: &PreviewsConfig, listening: u16, name: &str, port: u16) -> String {
    format!("{}/", origin(config, listening, name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16, name: &str) -> Option<PreviewHost> {
        Some(PreviewHost {
            port,
            name: name.to_string(),
        })
    }

    #[test]
    fn hosts_name_a_port_and_an_agent_under_the_domain() {
        assert_eq!(
            parse("5173-builder.localhost:8081", "localhost"),
            at(5173, "builder")
        );
        assert_eq!(
            parse("5173-builder.localhost", "localhost"),
            at(5173, "builder")
        );
        assert_eq!(
            parse("80-a-b.Preview.Example.com", "preview.example.com"),
            at(80, "a-b")
        );
        assert_eq!(parse("65535-x.localhost.", "localhost"), at(65535, "x"));
    }

    #[test]
    fn anything_else_is_no_preview() {
        for h in [
            "localhost:8081",
            "127.0.0.1:8081",
            "[::1]:8081",
            "0-x.localhost",
            "65536-x.localhost",
            "99999999999-x.localhost",
            "080-x.localhost",
            "-x.localhost",
            "5173-.localhost",
            "5173-x-.localhost",
            "5173-X_Y.localhost",
            "a.5173-x.localhost",
            "5173-x.otherlocalhost",
            "5173-x.localhost.evil.com",
            "5173-x.localhost:notaport",
            "5173-x.localhost:99999",
            "+5173-x.localhost",
            "",
        ] {
            assert_eq!(parse(h, "localhost"), None, "{h:?}");
        }
        let long = format!("1-{}.localhost", "a".repeat(64));
        assert_eq!(parse(&long, "localhost"), None);
    }

    #[test]
    fn urls_name_the_listener_port_unless_a_tls_proxy_serves_them() {
        let mut c = PreviewsConfig::default();
        assert_eq!(
            url(&c, 8081, "builder", 5173),
            "http://5173-builder.localhost:8081/"
        );
        c.public_url_scheme = UrlScheme::Https;
        c.domain = "preview.example.com".into();
        assert_eq!(
            url(&c, 8081, "builder", 5173),
            "https://5173-builder.preview.example.com/"
        );
        c.public_url_scheme = UrlScheme::Http;
        assert_eq!(host(&c, 80, "b", 1), "1-b.preview.example.com");
    }
}
