//! What an agent may reach: its `egress` rules, their grammar, and the decision for one
//! destination. Deny wins over allow, and no rule allows nothing.
//!
//! A destination is decided in two steps so that a name no rule can allow is refused without a
//! DNS lookup (a denied name costs nothing and tells no resolver anything): first on the name
//! as the sandbox gave it ([`EgressRules::decide_name`]), then, only when an address rule could
//! still allow it, on each address the name resolves to ([`EgressRules::decide_addr`]).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Most rules in one list (`allow` or `deny`): a rule is matched on every connection.
pub const MAX_RULES: usize = 256;
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
    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether this rule matches the name `name` (normalized) on `port`.
    fn matches_name(&self, name: &str, port: u16) -> bool {
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
    fn matches_addr(&self, addr: IpAddr, port: u16) -> bool {
        self.port_matches(port)
            && match &self.target {
                Target::Any => true,
                Target::Net(net) => net.contains(&canonical(addr)),
                Target::Name(_) | Target::Below(_) => false,
            }
    }

    /// Whether this rule names destinations by name (`pypi.org`, `*.pythonhosted.org`), as
    /// opposed to `*` or an address.
    pub fn is_name_rule(&self) -> bool {
        matches!(self.target, Target::Name(_) | Target::Below(_))
    }

    /// `*`: any public destination.
    pub fn is_any(&self) -> bool {
        matches!(self.target, Target::Any)
    }

    /// Only an address rule (or `*`) can allow a name through its addresses.
    fn is_address_rule(&self) -> bool {
        matches!(self.target, Target::Any | Target::Net(_))
    }
}

/// An IPv4 address written as IPv6 (`::ffff:10.0.0.1`) is that IPv4 address.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// An agent's `egress`: what its sandbox may reach through the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, try_from = "RawRules")]
pub struct EgressRules {
    /// Destinations the sandbox may reach: `pypi.org`, `*.pythonhosted.org`, `203.0.113.0/24`,
    /// `*` (any public destination), each optionally ending in `:PORT`.
    #[serde(default)]
    #[schema(value_type = Vec<String>, max_items = 256, example = json!(["pypi.org", "*.pythonhosted.org:443"]))]
    pub allow: Vec<Rule>,
    /// Destinations refused even when an allow rule matches them; same forms.
    #[serde(default)]
    #[schema(value_type = Vec<String>, max_items = 256)]
    pub deny: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRules {
    #[serde(default)]
    allow: Vec<Rule>,
    #[serde(default)]
    deny: Vec<Rule>,
}

impl TryFrom<RawRules> for EgressRules {
    type Error = String;
    fn try_from(raw: RawRules) -> Result<EgressRules, String> {
        for (list, rules) in [("allow", &raw.allow), ("deny", &raw.deny)] {
            if rules.len() > MAX_RULES {
                return Err(format!(
                    "egress.{list} holds {} rules; at most {MAX_RULES} are allowed (a wildcard or a CIDR covers many)",
                    rules.len()
                ));
            }
        }
        Ok(EgressRules {
            allow: raw.allow,
            deny: raw.deny,
        })
    }
}

/// How a destination was decided, and by which rule (`None`: no rule matched, so refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed(Rule),
    Denied(Option<Rule>),
}

/// The outcome of the first step, on the name alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameVerdict {
    /// Decided without looking at addresses.
    Final(Verdict),
    /// A name rule allows it; each address still meets the deny rules.
    AllowedByName(Rule),
    /// Only an address rule could allow it: resolve and decide on each address.
    ByAddress,
}

impl EgressRules {
    /// The first step for a destination named `name` (normalized) on `port`.
    pub fn decide_name(&self, name: &str, port: u16) -> NameVerdict {
        if let Some(rule) = self.deny.iter().find(|r| r.matches_name(name, port)) {
            return NameVerdict::Final(Verdict::Denied(Some(rule.clone())));
        }
        if let Some(rule) = self.allow.iter().find(|r| r.matches_name(name, port)) {
            return NameVerdict::AllowedByName(rule.clone());
        }
        if self
            .allow
            .iter()
            .any(|r| r.is_address_rule() && r.port_matches(port))
        {
            NameVerdict::ByAddress
        } else {
            NameVerdict::Final(Verdict::Denied(None))
        }
    }

    /// The second step for one address of the destination (or the first, when the sandbox
    /// gave an address): `by_name` is the rule that allowed its name, if one did.
    pub fn decide_addr(&self, addr: IpAddr, port: u16, by_name: Option<&Rule>) -> Verdict {
        // `*` in deny refuses everything; it was already matched on the name, if there was one.
        if let Some(rule) = self.deny.iter().find(|r| r.matches_addr(addr, port)) {
            return Verdict::Denied(Some(rule.clone()));
        }
        if let Some(rule) = by_name {
            return Verdict::Allowed(rule.clone());
        }
        match self.allow.iter().find(|r| r.matches_addr(addr, port)) {
            Some(rule) => Verdict::Allowed(rule.clone()),
            None => Verdict::Denied(None),
        }
    }

    /// Whether the resolver answers `name` (normalized): a deny rule for the name on every port
    /// refuses it; an allow rule for the name on some port, or any address rule (the proxy
    /// decides on its addresses at connect time), lets it resolve.
    pub fn may_resolve(&self, name: &str) -> bool {
        if self
            .deny
            .iter()
            .any(|r| r.port.is_none() && r.matches_name(name, 0))
        {
            return false;
        }
        self.allow.iter().any(|r| {
            r.is_address_rule()
                || Rule {
                    target: r.target.clone(),
                    port: None,
                }
                .matches_name(name, 0)
        })
    }

    /// Whether some deny rule is about addresses (a CIDR, an address, `*`), which only an
    /// address the server itself resolved can be checked against.
    pub fn denies_addresses(&self) -> bool {
        self.deny.iter().any(Rule::is_address_rule)
    }

    /// The whole decision for a destination whose name (if any) and address are both known:
    /// what an open connection is checked against again when the rules change.
    pub fn decide(&self, name: Option<&str>, addr: IpAddr, port: u16) -> Verdict {
        match name.map(|n| self.decide_name(n, port)) {
            Some(NameVerdict::Final(v)) => v,
            Some(NameVerdict::AllowedByName(rule)) => self.decide_addr(addr, port, Some(&rule)),
            Some(NameVerdict::ByAddress) | None => self.decide_addr(addr, port, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> EgressRules {
        let parse = |l: &[&str]| l.iter().map(|r| r.parse::<Rule>().unwrap()).collect();
        EgressRules {
            allow: parse(allow),
            deny: parse(deny),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn allowed(r: &EgressRules, name: &str, addr: &str, port: u16) -> bool {
        matches!(r.decide(Some(name), ip(addr), port), Verdict::Allowed(_))
    }

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

    #[test]
    fn no_rule_allows_nothing() {
        let r = EgressRules::default();
        assert_eq!(
            r.decide_name("pypi.org", 443),
            NameVerdict::Final(Verdict::Denied(None))
        );
        assert_eq!(
            r.decide_addr(ip("203.0.113.1"), 80, None),
            Verdict::Denied(None)
        );
    }

    #[test]
    fn a_wildcard_matches_below_its_name_but_not_the_name() {
        let r = rules(&["*.pythonhosted.org"], &[]);
        assert!(allowed(&r, "files.pythonhosted.org", "203.0.113.1", 443));
        assert!(allowed(&r, "a.b.pythonhosted.org", "203.0.113.1", 443));
        assert!(!allowed(&r, "pythonhosted.org", "203.0.113.1", 443));
        assert!(!allowed(&r, "evilpythonhosted.org", "203.0.113.1", 443));
    }

    #[test]
    fn deny_wins_over_allow() {
        let r = rules(&["*"], &["evil.example", "203.0.113.0/24"]);
        assert!(!allowed(&r, "evil.example", "198.51.100.1", 443));
        assert!(!allowed(&r, "fine.example", "203.0.113.9", 443));
        assert!(allowed(&r, "fine.example", "198.51.100.1", 443));
        let r = rules(&["pypi.org"], &["pypi.org:80"]);
        assert!(!allowed(&r, "pypi.org", "198.51.100.1", 80));
        assert!(allowed(&r, "pypi.org", "198.51.100.1", 443));
    }

    #[test]
    fn a_port_rule_matches_that_port_only() {
        let r = rules(&["pypi.org:443", "203.0.113.0/24:8080"], &[]);
        assert!(allowed(&r, "pypi.org", "198.51.100.1", 443));
        assert!(!allowed(&r, "pypi.org", "198.51.100.1", 80));
        assert!(matches!(
            r.decide(None, ip("203.0.113.5"), 8080),
            Verdict::Allowed(_)
        ));
        assert!(matches!(
            r.decide(None, ip("203.0.113.5"), 8081),
            Verdict::Denied(None)
        ));
    }

    #[test]
    fn a_name_no_rule_can_allow_is_refused_before_any_lookup() {
        let r = rules(&["pypi.org"], &[]);
        assert_eq!(
            r.decide_name("example.org", 443),
            NameVerdict::Final(Verdict::Denied(None))
        );
        // With an address rule, only the addresses can tell.
        let r = rules(&["pypi.org", "203.0.113.0/24"], &[]);
        assert_eq!(r.decide_name("example.org", 443), NameVerdict::ByAddress);
        assert!(allowed(&r, "example.org", "203.0.113.4", 443));
        assert!(!allowed(&r, "example.org", "198.51.100.4", 443));
    }

    #[test]
    fn names_resolve_when_some_port_of_them_may_be_reached() {
        let r = rules(
            &["pypi.org:443", "*.hosted.test"],
            &["evil.hosted.test", "pypi.org:80"],
        );
        assert!(
            r.may_resolve("pypi.org"),
            "allowed on 443, denied on 80 only"
        );
        assert!(r.may_resolve("files.hosted.test"));
        assert!(!r.may_resolve("evil.hosted.test"), "denied on every port");
        assert!(!r.may_resolve("hosted.test"), "the wildcard's apex");
        assert!(!r.may_resolve("example.org"));
        assert!(rules(&["203.0.113.0/24"], &[]).may_resolve("example.org"));
        assert!(!rules(&["*"], &["*"]).may_resolve("example.org"));
        assert!(!EgressRules::default().may_resolve("pypi.org"));
    }

    #[test]
    fn a_mapped_ipv6_address_is_its_ipv4_address() {
        let r = rules(&["203.0.113.0/24"], &[]);
        assert!(matches!(
            r.decide(None, ip("::ffff:203.0.113.5"), 443),
            Verdict::Allowed(_)
        ));
    }

    #[test]
    fn lists_are_bounded_and_fields_known() {
        let many: Vec<String> = (0..MAX_RULES + 1)
            .map(|i| format!("h{i}.example"))
            .collect();
        let err = serde_json::from_value::<EgressRules>(serde_json::json!({ "allow": many }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 256"), "{err}");
        let err = serde_json::from_value::<EgressRules>(serde_json::json!({ "alow": [] }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("alow"), "{err}");
        let err = serde_json::from_value::<EgressRules>(serde_json::json!({ "allow": ["a b"] }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an egress rule"), "{err}");
        let ok: EgressRules =
            serde_json::from_value(serde_json::json!({ "allow": ["pypi.org"] })).unwrap();
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            serde_json::json!({ "allow": ["pypi.org"], "deny": [] })
        );
    }
}
