//! The acceptor's answer to a channel's header, the same for every channel: `{"ok": {...}}`
//! with what the channel's `ok` holds (see [`crate::Channel::Reply`]), or `{"error": {"code",
//! "message"}}` with a code a client can act on.

use serde::{Deserialize, Serialize};

/// The acceptor's answer to a header.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    Ok(serde_json::Value),
    Error(ChannelError),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Ok(serde_json::Value::Object(Default::default()))
    }

    pub fn ok_with<T: Serialize>(value: &T) -> Reply {
        Reply::Ok(serde_json::to_value(value).unwrap_or(serde_json::Value::Null))
    }

    /// The `ok` payload, or the peer's error.
    pub fn into_result(self) -> Result<serde_json::Value, ChannelError> {
        match self {
            Reply::Ok(v) => Ok(v),
            Reply::Error(e) => Err(e),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    NotFound,
    Invalid,
    IsDir,
    NotDir,
    Exists,
    PermissionDenied,
    TooLarge,
    UnknownChannel,
    Unauthorized,
    Io,
    /// A limit on concurrent use was reached (viewers of a terminal, terminal sessions).
    Busy,
    /// The sandbox's disk is full (its home's limit, or `/tmp`'s).
    NoSpace,
    /// Nothing accepts connections there (`port.connect` to a port nobody listens on).
    Refused,
    /// What the path names now forbids it (a directory that is not empty, a file that is not
    /// a regular one); the same request may succeed once that changes.
    Conflict,
    /// The sandbox's image lacks what the channel needs (`code.*` without `python3-ipykernel`).
    Unsupported,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ChannelError {
    pub code: ErrorCode,
    pub message: String,
}

impl ChannelError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ChannelError {
            code,
            message: message.into(),
        }
    }

    /// Maps an I/O error on `what` to the code a client can act on.
    pub fn from_io(err: &std::io::Error, what: &str) -> Self {
        use std::io::ErrorKind as K;
        let code = match err.kind() {
            K::NotFound => ErrorCode::NotFound,
            K::PermissionDenied => ErrorCode::PermissionDenied,
            K::AlreadyExists => ErrorCode::Exists,
            K::IsADirectory => ErrorCode::IsDir,
            K::NotADirectory => ErrorCode::NotDir,
            K::DirectoryNotEmpty => ErrorCode::Conflict,
            K::InvalidInput | K::InvalidFilename => ErrorCode::Invalid,
            K::FileTooLarge => ErrorCode::TooLarge,
            K::StorageFull | K::QuotaExceeded => ErrorCode::NoSpace,
            _ => ErrorCode::Io,
        };
        ChannelError::new(code, format!("{what}: {err}"))
    }
}
