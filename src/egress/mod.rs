//! A sandbox's only way out: per-agent rules and the proxy in the server that enforces them.

mod ca;
mod counted;
mod dial;
pub mod dns;
mod event;
mod granted;
mod log;
mod open;
mod proxy;
mod reach;
mod rule;
mod rules;
mod sni;
mod substitute;
mod tls;
mod zerocopy;

pub use ca::{CaError, InstallationCa};
pub use dial::{Destination, DialSettings, Dialer, Refusal, SocketAddrOrName};
pub use event::EgressEvent;
pub use granted::{Grant, Granted, Inside, SecretGuard, PLACEHOLDER_LEN, PLACEHOLDER_PREFIX};
pub use log::{Denied, DeniedWatch, EgressLog, LogEntry, LOG_LEN, MAX_DENIED};
pub use open::Connections;
pub use proxy::{Proxy, ProxySettings, Sandboxes};
pub use reach::{is_own, is_public, reachable};
pub use rule::{normalize_name, Rule, RuleError};
pub use rules::{EgressChange, EgressRules, NameVerdict, Verdict, MAX_RULES};
pub use sni::client_hello;
pub use tls::{provider as tls_provider, Interception, TlsSetupError};

#[cfg(test)]
mod tests;
