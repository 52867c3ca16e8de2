//! A secret as kept and shown: everything but its value, which only the vault and the egress
//! proxy ever hold in clear.

use chrono::{DateTime, Utc};

use crate::egress::Rule;

/// A secret's description (never its value).
#[derive(Debug, Clone, PartialEq)]
pub struct SecretInfo {
    /// Like an env variable's name: the variable it appears as inside granted sandboxes.
    pub name: String,
    /// The destinations the value may be sent to (egress rules' forms).
    pub hosts: Vec<Rule>,
    /// The request header the proxy puts the value in.
    pub header: String,
    /// How the header's value is made, `{value}` standing for the secret.
    pub format: String,
    /// Whether a placeholder in a form or JSON body is replaced too.
    pub in_body: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A secret as the store keeps it: the description and the sealed value.
#[derive(Debug, Clone)]
pub struct SealedSecret {
    pub info: SecretInfo,
    pub nonce: Vec<u8>,
    pub sealed: Vec<u8>,
}
