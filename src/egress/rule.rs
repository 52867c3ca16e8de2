//! One egress rule: its grammar (`pypi.org`, `*.pythonhosted.org`, `203.0.113.0/24`, `*`, each
//! optionally ending in `:PORT`), how it is written back, and what one destination it matches.
//! The lists of rules and the decision over them are in [`super::rules`].

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A host name (253) plus `:65535`, and room for a wildcard's `*.`.
pub const MAX_RULE_LEN: usize = 261;

/// What a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// `*`: any public destination.
    Any,
    /// `pypi.org`: exactly that name.
    Name(String),
    /// `*.pythonhosted.org`: any name below it, not the name itself.
    Below(String),
    /// `203.0.113.0/24` or `203.0.113.7`.
    Net(IpNet),
}

/// One rule: a target and, optionally, the one port it matches. Written and read as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Rule {
    target: Target,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{rule}\" is not an egress rule: {why} (a rule is a host name like pypi.org, a wildcard like *.pythonhosted.org, an IP address or CIDR like 203.0.113.0/24, or *, each optionally ending in :PORT)")]
pub struct RuleError {
    rule: String,
    why: String,
}

fn bad(rule: &str, why: impl Into<String>) -> RuleError {
    let mut shown: String = rule.chars().take(80).collect();
    if shown.len() < rule.len() {
        shown.push('…');
    }
    RuleError {
        rule: shown,
        why: why.into(),
    }
}

/// A DNS name as rules and destinations compare it: lowercase, no trailing dot, labels of
/// letters, digits, `-` and `_` (which some real services use), 1–63 each, 253 in all.
pub fn normalize_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (!name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)).then_some(name)
}

impl std::str::FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Rule, RuleError> {
        if text.len() > MAX_RULE_LEN {
            return Err(bad(text, format!("longer than {MAX_RULE_LEN} characters")));
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(bad(text, "it is empty"));
        }
        // A bare IPv6 address holds colons of its own: it takes a port only in brackets.
        if let Ok(addr) = text.parse::<IpAddr>() {
            return Ok(Rule {
                target: Target::Net(IpNet::from(addr)),
                port: None,
            });
        }
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Rule {
                target: Target::Net(net.trunc()),
                port: None,
            });
        }
        let (body, port) = split_port(text)?;
        let target = if body == "*" {
            Target::Any
        } else if let Some(inner) = body.strip_prefix('[').and_then(|b| b.strip_suffix(']')) {
            let net = inner
                .parse::<IpNet>()
                .or_else(|_| inner.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    bad(
                        text,
                        "the part in brackets is not an IPv6 address or network",
                    )
                })?;
            Target::Net(net.trunc())
        } else if let Ok(addr) = body.parse::<IpAddr>() {
            Target::Net(IpNet::from(addr))
        } else if let Ok(net) = body.parse::<IpNet>() {
            Target::Net(net.trunc())
        } else if let Some(below) = body.strip_prefix("*.") {
            Target::Below(
                normalize_name(below)
                    .ok_or_else(|| bad(text, "what follows \"*.\" is not a host name"))?,
            )
        } else if body.contains('*') {
            return Err(bad(text, "a wildcard may only start a rule, as \"*.\""));
        } else if body.contains('/') {
            return Err(bad(text, "it is not a valid CIDR network"));
        } else {
            Target::Name(
                normalize_name(body).ok_or_else(|| bad(text, "it is not a valid host name"))?,
            )
        };
        Ok(Rule { target, port })
    }
}

/// `HOST:PORT` into its parts; a rule with no colon has no port.
fn split_port(text: &str) -> Result<(&str, Option<u16>), RuleError> {
    let Some((body, port)) = text.rsplit_once(':') else {
        return Ok((text, None));
    };
    if body.contains(':') && !body.ends_with(']') {
        return Err(bad(
            text,
            "an IPv6 address with a port goes in brackets: [2001:db8::1]:443",
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok((body, Some(p))),
        _ => Err(bad(
            text,
            format!("\"{port}\" is not a port from 1 to 65535"),
        )),
    }
}

impl TryFrom<String> for Rule {
    type Error = RuleError;
    fn try_from(s: String) -> Result<Rule, RuleError> {
        s.parse()
    }
}

impl From<Rule> for String {
    fn from(r: Rule) -> String {
        r.to_string()
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = self.port.is_some() && matches!(&self.target, Target::Net(IpNet::V6(_)));
        match &self.target {
            Target::Any => f.write_str("*")?,
            Target::Name(n) => f.write_str(n)?,
            Target::Below(n) => write!(f, "*.{n}")?,
            Target::Net(net) if bracket => write!(f, "[{}]", show_net(net))?,
            Target::Net(net) => f.write_str(&show_net(net))?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// A single address is shown without its `/32` or `/128`.
fn show_net(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

impl Rule {
    /// Whether this rule names its one port (`host:port`), not every port.
    pub(super) fn names_port(&self) -> bool {
        self.port.is_some()
    }

    pub(super) fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether this rule matches the name `name` (normalized) on `port`.
    pub(super) fn matches_name(&self, name: &str, port: u16) -> bool {
        self.port_matches(port)
            && match &self.target {
                Target::Any => true,
                Target::Name(n) => n == name,
                Target::Below(n) => name
                    .strip_suffix(n.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                Target::Net(_) => false,
            }
    }

    /// Whether this rule matches the address `addr` on `port`.
    pub(super) fn matches_addr(&self, addr: IpAddr, port: u16) -> bool {
        self.port_matches(port)
            && match &self.target {
                Target::Any => true,
                Target::Net(net) => net.contains(&addr.to_canonical()),
                Target::Name(_) | Target::Below(_) => false,
            }
    }

    /// Whether this rule is `*` (on any port or one): every destination.
    pub fn is_everything(&self) -> bool {
        matches!(self.target, Target::Any)
    }

    /// Whether this rule names destinations by name (`pypi.org`, `*.pythonhosted.org`), as
    /// opposed to `*` or an address.
    pub fn is_name_rule(&self) -> bool {
        matches!(self.target, Target::Name(_) | Target::Below(_))
    }

    /// Whether this rule names `addr` on purpose, so that a name the operator maps to it
    /// (`sandbox.egress.resolve`) may reach it although it is private: a name or wildcard rule
    /// does, an address rule only when it lies inside the private range that holds `addr`
    /// ([`super::reach::names_on_purpose`]), and `*` never.
    pub fn names_on_purpose(&self, addr: IpAddr) -> bool {
        match &self.target {
            Target::Any => false,
            Target::Name(_) | Target::Below(_) => true,
            Target::Net(net) => super::reach::names_on_purpose(net, addr),
        }
    }

    /// Only an address rule (or `*`) can allow a name through its addresses.
    pub(super) fn is_address_rule(&self) -> bool {
        matches!(self.target, Target::Any | Target::Net(_))
    }

    /// Whether this rule matches every port (it names none).
    pub(super) fn on_every_port(&self) -> bool {
        self.port.is_none()
    }

    /// Whether this rule matches the name `name` (normalized) on some port.
    pub(super) fn matches_name_on_some_port(&self, name: &str) -> bool {
        Rule {
            target: self.target.clone(),
            port: None,
        }
        .matches_name(name, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_prints_back() {
        for text in [
            "pypi.org",
            "*.pythonhosted.org",
            "203.0.113.0/24",
            "203.0.113.7",
            "*",
            "pypi.org:443",
            "*.github.com:22",
            "203.0.113.0/24:8080",
            "*:443",
            "2001:db8::/32",
            "[2001:db8::1]:443",
            "[2001:db8::/32]:443",
        ] {
            let rule: Rule = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(rule.to_string(), text);
        }
        assert_eq!("PyPI.org.".parse::<Rule>().unwrap().to_string(), "pypi.org");
        assert_eq!(
            "10.1.2.3/8".parse::<Rule>().unwrap().to_string(),
            "10.0.0.0/8"
        );
    }

    #[test]
    fn malformed_rules_say_what_is_wrong() {
        for (text, why) in [
            ("", "empty"),
            ("pypi.org:0", "port"),
            ("pypi.org:70000", "port"),
            ("pypi.org:http", "port"),
            ("py pi.org", "host name"),
            ("pypi..org", "host name"),
            ("-pypi.org", "host name"),
            ("foo.*.org", "wildcard"),
            ("**.org", "wildcard"),
            ("10.0.0.0/33", "CIDR"),
            ("2001:db8::1:443x", "brackets"),
            ("[zz]:443", "brackets"),
        ] {
            let err = text.parse::<Rule>().expect_err(text).to_string();
            assert!(err.contains(why), "{text}: {err}");
            assert!(err.contains("is not an egress rule"), "{err}");
        }
        let long = format!("{}.org", "a".repeat(300));
        let err = long.parse::<Rule>().unwrap_err().to_string();
        assert!(err.contains("longer than") && err.len() < 600, "{err}");
    }
}
