//! The `egress` event: one per decision, and one more when an allowed connection closes.

/// What the proxy publishes; the API shows it as [`crate::api::types::EgressEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEvent {
    /// The agent.
    pub id: String,
    /// The destination as the sandbox named it (a host name or an address).
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// The rule that decided, or null when no rule matched (so it was refused).
    pub rule: Option<String>,
    /// Why it was refused (or could not be reached), for a person to read.
    pub reason: Option<String>,
    /// True on the event sent when an allowed connection closes; the byte counts are then final.
    pub closed: bool,
    /// Bytes sent from the sandbox to the destination.
    pub bytes_up: u64,
    /// Bytes sent from the destination to the sandbox.
    pub bytes_down: u64,
    /// The secret this event is about (never its value): swapped into a request to the
    /// destination when `allowed`, or the reason the request was refused when not.
    pub secret: Option<String>,
}
