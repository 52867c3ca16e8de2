//! What can go wrong on a call to a sandbox, told apart as the API answers it.

use agenthold_proto::{ChannelError, OpenError, ProtoError};

use crate::tunnel::registry::TunnelError;

#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// No stream could be opened: the session has its cap open, or it died.
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
    /// sandboxd refused the channel, or what was sent on it.
    #[error("the sandbox refused the channel: {0}")]
    Refused(ChannelError),
    /// sandboxd's reply to a header was not one.
    #[error(transparent)]
    Proto(ProtoError),
    /// The stream broke, or went quiet past its time, once the channel was open.
    #[error("the sandbox connection was lost while the command ran")]
    Lost,
    /// A process report no sandboxd makes (sandboxd runs in the sandbox: what it sends is input
    /// like any other).
    #[error("the sandbox sent a malformed process report")]
    MalformedReport,
    #[error("reading the listing failed: {0}")]
    ListingCut(std::io::Error),
    #[error("the sandbox sent a bad listing: {0}")]
    BadListing(serde_json::Error),
    /// On an attach: sandboxd said the process's stdin is not open.
    #[error(
        "the process's stdin is not open (it was started without stdin, was closed, or the \
         process stopped reading it)"
    )]
    StdinClosed,
    /// The bytes for a process's stdin stopped coming with an error.
    #[error("the body broke off: {0}")]
    StdinCut(std::io::Error),
    /// The bytes of a file being written stopped coming with an error.
    #[error("the upload broke off: {0}")]
    UploadCut(std::io::Error),
    #[error("the file is larger than the server's limit of {max_mb} MiB (server.max_file_mb)")]
    FileTooLarge { max_mb: u64 },
    /// Sending a file's bytes failed.
    #[error("the sandbox connection failed: {0}")]
    UploadFailed(std::io::Error),
    #[error("the sandbox did not confirm the write: {0}")]
    Unconfirmed(ProtoError),
    #[error("the sandbox confirmed the write before the upload ended")]
    ConfirmedEarly,
    /// A code run's output past what sandboxd ever sends (its 8 MiB cap).
    #[error("the sandbox sent more output for a code run than a run may have")]
    CodeOutputOverflow,
}

impl From<OpenError> for ConnError {
    fn from(e: OpenError) -> ConnError {
        match e {
            OpenError::Refused(c) => ConnError::Refused(c),
            OpenError::Proto(p) => ConnError::Proto(p),
        }
    }
}
