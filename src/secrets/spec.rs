//! The rules a secret's fields meet, in one place for the API, the CLI and the config.

use crate::egress::Rule;

/// Longest value, in characters: an API key or a token, never a file.
pub const MAX_VALUE: usize = 16 * 1024;
/// Most host rules one secret names.
pub const MAX_HOSTS: usize = 32;
/// Longest `format`, in characters.
pub const MAX_FORMAT: usize = 256;
/// Most secrets an installation keeps.
pub const MAX_SECRETS: usize = 1024;
/// What stands for the value in `format`.
pub const VALUE_MARK: &str = "{value}";
pub const DEFAULT_HEADER: &str = "Authorization";
pub const DEFAULT_FORMAT: &str = "Bearer {value}";

/// Headers the proxy itself decides, or that would change what the request is: a secret
/// cannot be sent in them.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "expect",
];

/// A refused field: its camelCase name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct SpecError {
    pub field: &'static str,
    pub why: String,
}

fn bad(field: &'static str, why: impl Into<String>) -> SpecError {
    SpecError {
        field,
        why: why.into(),
    }
}

/// A name: what the env variable inside a sandbox is called, so an env name's rules.
pub fn check_name(name: &str) -> Result<(), SpecError> {
    crate::agents::env::check_name(name)
        .map_err(|why| bad("name", format!("the secret's name {why}")))
}

pub fn check_value(value: &str) -> Result<(), SpecError> {
    if value.is_empty() {
        return Err(bad("value", "value must not be empty"));
    }
    if value.len() > MAX_VALUE {
        return Err(bad(
            "value",
            format!(
                "value is {} bytes; at most {MAX_VALUE} are allowed",
                value.len()
            ),
        ));
    }
    // It goes into a header line: a line break or NUL would end or split it.
    if value.chars().any(|c| c.is_control()) {
        return Err(bad(
            "value",
            "value must not hold control characters (line breaks, tabs, NUL)",
        ));
    }
    Ok(())
}

pub fn check_hosts(hosts: &[Rule]) -> Result<(), SpecError> {
    if hosts.is_empty() {
        return Err(bad(
            "hosts",
            "hosts must name at least one destination the secret may be sent to",
        ));
    }
    if hosts.len() > MAX_HOSTS {
        return Err(bad(
            "hosts",
            format!(
                "hosts names {} rules; at most {MAX_HOSTS} are allowed",
                hosts.len()
            ),
        ));
    }
    if let Some(r) = hosts.iter().find(|r| r.is_everything()) {
        return Err(bad(
            "hosts",
            format!("hosts must not hold {r}: a secret goes to the services it belongs to, never anywhere"),
        ));
    }
    Ok(())
}

pub fn check_header(header: &str) -> Result<(), SpecError> {
    let parsed = axum::http::HeaderName::from_bytes(header.as_bytes())
        .map_err(|_| bad("header", format!("{header:?} is not an HTTP header name")))?;
    let lower = parsed.as_str();
    if RESERVED_HEADERS.contains(&lower) || lower.starts_with("proxy-") {
        return Err(bad(
            "header",
            format!("{header} is decided by the proxy and cannot carry a secret"),
        ));
    }
    Ok(())
}

pub fn check_format(format: &str) -> Result<(), SpecError> {
    if format.chars().count() > MAX_FORMAT {
        return Err(bad(
            "format",
            format!("format must be at most {MAX_FORMAT} characters"),
        ));
    }
    if format.matches(VALUE_MARK).count() != 1 {
        return Err(bad(
            "format",
            format!("format must hold {VALUE_MARK} exactly once"),
        ));
    }
    if format.chars().any(|c| c.is_control()) {
        return Err(bad("format", "format must not hold control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter().map(|r| r.parse().unwrap()).collect()
    }

    #[test]
    fn fields_are_checked_with_the_reason() {
        assert!(check_name("ANTHROPIC_API_KEY").is_ok());
        assert!(check_name("HTTP_PROXY").is_err());
        assert!(check_name("1BAD").is_err());
        assert!(check_value("sk-ant-123").is_ok());
        assert_eq!(check_value("a\r\nX-Evil: 1").unwrap_err().field, "value");
        assert!(check_value("").is_err());
        assert!(check_value(&"a".repeat(MAX_VALUE + 1)).is_err());
        assert!(check_hosts(&rules(&["api.anthropic.com", "*.github.com:443"])).is_ok());
        assert!(check_hosts(&[]).is_err());
        assert!(check_hosts(&rules(&["*"])).is_err(), "never to everyone");
        assert!(check_header("x-api-key").is_ok());
        assert!(check_header("Host").is_err());
        assert!(check_header("Proxy-Authorization").is_err());
        assert!(check_header("bad header").is_err());
        assert!(check_format("token {value}").is_ok());
        assert!(check_format("{value}{value}").is_err());
        assert!(check_format("none").is_err());
    }
}
