//! What the server keeps of previews: one row per agent and port. A deleted or expired preview
//! stays as a tombstone until a new one takes its port, so its URL answers `410` rather than
//! `404`.

/// Who may open a preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A person signed in to the web UI (through the sign-in hand-off), or the admin token.
    Private,
    /// Whoever has the preview's token (`?token=` once, or `Authorization: Bearer`).
    Token,
    /// Anyone who reaches the preview listener.
    Public,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Private => "private",
            Access::Token => "token",
            Access::Public => "public",
        }
    }

    pub fn parse(s: &str) -> Option<Access> {
        match s {
            "private" => Some(Access::Private),
            "token" => Some(Access::Token),
            "public" => Some(Access::Public),
            _ => None,
        }
    }
}

/// A preview as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviewRecord {
    pub id: String,
    pub agent_id: String,
    pub port: u16,
    pub access: Access,
    /// The SHA-256 of a `token` preview's token; the token itself is shown once, at creation.
    pub token_hash: Option<String>,
    /// RFC 3339, as the store writes times.
    pub created_at: String,
    pub expires_at: Option<String>,
    pub deleted_at: Option<String>,
}

impl PreviewRecord {
    /// Still opens: not deleted, not expired at `now` (RFC 3339 in the store's format).
    pub fn is_live(&self, now: &str) -> bool {
        self.deleted_at.is_none() && self.expires_at.as_deref().is_none_or(|e| e > now)
    }
}
