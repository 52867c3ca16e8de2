//! What an agent may reach: its `egress` rules, their grammar, and the decision for one
//! destination. Deny wins over allow, and no rule allows nothing.
//!
//! One rule's grammar and matching are in [`super::rule`].
//!
//! A destination is decided in two steps so that a name no rule can allow is refused without a
//! DNS lookup (a denied name costs nothing and tells no resolver anything): first on the name
//! as the sandbox gave it ([`EgressRules::decide_name`]), then, only when an address rule could
//! still allow it, on each address the name resolves to ([`EgressRules::decide_addr`]).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::rule::Rule;

/// Most rules in one list (`allow` or `deny`): a rule is matched on every connection.
pub const MAX_RULES: usize = 256;

/// An agent's `egress`: what its sandbox may reach through the server. Its `serde` form is the
/// store's (the `egress` column) and the config file's (presets, `sandbox.egress.default`); the
/// API has its own type, [`crate::api::types::EgressRules`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawRules")]
pub struct EgressRules {
    /// Destinations the sandbox may reach: `pypi.org`, `*.pythonhosted.org`, `203.0.113.0/24`,
    /// `*` (any public destination), each optionally ending in `:PORT`.
    #[serde(default)]
    pub allow: Vec<Rule>,
    /// Destinations refused even when an allow rule matches them; same forms.
    #[serde(default)]
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

/// A change to an agent's rules: each list it names replaces the agent's, and a list it leaves
/// out (`None`) stays as it is, so that changing `allow` never drops `deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressChange {
    pub allow: Option<Vec<Rule>>,
    pub deny: Option<Vec<Rule>>,
}

impl EgressChange {
    /// A change that replaces both lists with `rules`'.
    pub fn both(rules: EgressRules) -> EgressChange {
        EgressChange {
            allow: Some(rules.allow),
            deny: Some(rules.deny),
        }
    }

    /// The rules after this change to `old`.
    pub fn apply(self, old: EgressRules) -> EgressRules {
        EgressRules {
            allow: self.allow.unwrap_or(old.allow),
            deny: self.deny.unwrap_or(old.deny),
        }
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
            .any(|r| r.on_every_port() && r.matches_name(name, 0))
        {
            return false;
        }
        self.allow
            .iter()
            .any(|r| r.is_address_rule() || r.matches_name_on_some_port(name))
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
