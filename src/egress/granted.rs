//! The secrets one agent's sandbox may use during its current boot, as the proxy needs them:
//! each placeholder the sandbox sees, the value it stands for, and where that value may go.
//! The secrets module makes these (issue #34); the proxy only reads them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::rule::Rule;

/// What a placeholder starts with; 64 hexadecimal digits follow.
pub const PLACEHOLDER_PREFIX: &str = "agenthold-secret:";
/// A placeholder's length: every one has it, so a command's size can be checked before the
/// sandbox's boot (which the digits depend on) is known.
pub const PLACEHOLDER_LEN: usize = PLACEHOLDER_PREFIX.len() + 64;

/// `sandbox.egress.secret_guard`: which TLS connections of an agent with granted secrets the
/// proxy terminates to look for placeholders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretGuard {
    /// Only those to a host a granted secret names; the rest stay spliced, so a placeholder sent
    /// there leaves unseen (worthless, but unrefused).
    #[default]
    Hosts,
    /// Every TLS connection of an agent with at least one grant, so a placeholder anywhere is
    /// refused; the price is that every destination of such an agent must verify against the
    /// proxy's roots and speak HTTP inside its TLS.
    All,
}

/// How the proxy treats a connection (from [`Granted::inside`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inside {
    /// Bytes passed on untouched.
    Spliced,
    /// TLS terminated: a granted secret's value may go there.
    Intercepted,
    /// Terminated if it turns out to be TLS (`secret_guard: all`), to refuse a placeholder sent
    /// where no secret may go; anything else is spliced.
    GuardedIfTls,
}

/// One granted secret for one agent and boot.
#[derive(Clone)]
pub struct Grant {
    /// The secret's name (the env variable it appears as).
    pub name: String,
    /// What the sandbox sees in the variable: `agenthold-secret:<random per agent and boot>`.
    pub placeholder: String,
    /// Destinations the value may be sent to.
    pub hosts: Vec<Rule>,
    /// The request header the value goes in, and how (`{value}` stands for it).
    pub header: String,
    pub format: String,
    /// Whether a placeholder in a form or JSON body is replaced too.
    pub in_body: bool,
    value: String,
}

impl Grant {
    pub fn new(
        name: String,
        placeholder: String,
        hosts: Vec<Rule>,
        header: String,
        format: String,
        in_body: bool,
        value: String,
    ) -> Grant {
        Grant {
            name,
            placeholder,
            hosts,
            header,
            format,
            in_body,
            value,
        }
    }

    /// The value in clear: only for the request it is substituted into.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Whether the value may be sent to `host` (a normalized name) on `port`.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|r| r.matches_name(host, port))
    }
}

/// Never the value: a grant may end up in a log line by accident.
impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .field("in_body", &self.in_body)
            .finish_non_exhaustive()
    }
}

/// All of one agent's grants in its current boot (often none).
#[derive(Debug, Clone, Default)]
pub struct Granted {
    grants: Vec<Grant>,
}

impl Granted {
    pub fn new(grants: Vec<Grant>) -> Granted {
        Granted { grants }
    }

    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter()
    }

    /// Whether the proxy must see inside connections to `host` on `port`: some grant's value
    /// may go there, so its placeholder must be swapped on the way.
    pub fn intercepts(&self, host: &str, port: u16) -> bool {
        self.grants.iter().any(|g| g.allows(host, port))
    }

    /// How a connection to `host` on `port` is treated under `guard`: an agent without grants
    /// is never intercepted.
    pub fn inside(&self, host: &str, port: u16, guard: SecretGuard) -> Inside {
        if self.intercepts(host, port) {
            Inside::Intercepted
        } else if guard == SecretGuard::All && !self.is_empty() {
            Inside::GuardedIfTls
        } else {
            Inside::Spliced
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_allows_only_its_hosts_and_never_shows_its_value() {
        let g = Grant::new(
            "GITHUB_TOKEN".into(),
            "agenthold-secret:abc".into(),
            vec![
                "api.github.com".parse().unwrap(),
                "*.github.test:443".parse().unwrap(),
            ],
            "Authorization".into(),
            "Bearer {value}".into(),
            false,
            "ghp_value".into(),
        );
        assert!(g.allows("api.github.com", 443));
        assert!(g.allows("x.github.test", 443));
        assert!(!g.allows("x.github.test", 80));
        assert!(!g.allows("github.com", 443));
        assert!(!format!("{g:?}").contains("ghp_value"));
        let all = Granted::new(vec![g]);
        assert!(all.intercepts("api.github.com", 443));
        assert!(!all.intercepts("other.test", 443));
        assert!(!Granted::default().intercepts("api.github.com", 443));
        assert_eq!(
            all.inside("other.test", 443, SecretGuard::Hosts),
            Inside::Spliced
        );
        assert_eq!(
            all.inside("other.test", 443, SecretGuard::All),
            Inside::GuardedIfTls
        );
        assert_eq!(
            all.inside("api.github.com", 443, SecretGuard::All),
            Inside::Intercepted
        );
        assert_eq!(
            Granted::default().inside("other.test", 443, SecretGuard::All),
            Inside::Spliced,
            "an agent without grants is never intercepted"
        );
    }
}
