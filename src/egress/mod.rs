//! A sandbox's only way out: per-agent rules and the proxy in the server that enforces them.

mod counted;
mod dial;
mod event;
mod open;
mod proxy;
mod reach;
mod rules;

pub use dial::{Destination, Dialer, Refusal};
pub use event::EgressEvent;
pub use open::{Connections, Full};
pub use proxy::{Proxy, ProxySettings, Sandboxes};
pub use reach::{is_own, is_public, reachable};
pub use rules::{
    canonical, normalize_name, EgressRules, NameVerdict, Rule, RuleError, Verdict, MAX_RULES,
};

#[cfg(test)]
mod tests;
