//! Channel headers and replies on the wire: a big-endian `u32` length followed by that many
//! bytes of JSON. Lengths are checked before anything is allocated, so a hostile peer cannot make
//! either side buffer more than [`MAX_HEADER_LEN`] bytes. The one exception is the `exec` header
//! as sandboxd reads it ([`crate::read_server_request`], [`crate::MAX_EXEC_HEADER_LEN`]): it
//! carries a whole command line, and only the server sends it.

use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::limits::{MAX_FRAME_LEN, MAX_HEADER_LEN};
use crate::reply::{ChannelError, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("header of {len} bytes exceeds the limit of {limit} bytes")]
    HeaderTooLarge { len: usize, limit: usize },
    #[error("malformed header: {0}")]
    Malformed(String),
    /// A reply that is not what its channel answers (see [`crate::Channel::Reply`]).
    #[error("malformed reply to {0}")]
    BadReply(String),
    #[error("unknown channel {0:?}")]
    UnknownChannel(String),
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
    FrameTooLarge(usize),
    #[error("unknown frame kind {0}")]
    UnknownFrame(u8),
    #[error("the stream ended before a complete header")]
    Eof,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl ProtoError {
    /// The error to send back to the peer on the failing stream.
    pub fn to_channel_error(&self) -> ChannelError {
        let code = match self {
            ProtoError::HeaderTooLarge { .. } | ProtoError::FrameTooLarge(_) => ErrorCode::TooLarge,
            ProtoError::UnknownChannel(_) => ErrorCode::UnknownChannel,
            ProtoError::Malformed(_) | ProtoError::BadReply(_) | ProtoError::UnknownFrame(_) => {
                ErrorCode::Invalid
            }
            ProtoError::Eof | ProtoError::Io(_) => ErrorCode::Io,
        };
        ChannelError::new(code, self.to_string())
    }
}

/// Writes one length-prefixed JSON message (a header or a reply).
pub async fn write_message<W, T>(w: &mut W, msg: &T) -> Result<(), ProtoError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    write_limited(w, msg, MAX_HEADER_LEN).await
}

pub(crate) async fn write_limited<W, T>(w: &mut W, msg: &T, limit: usize) -> Result<(), ProtoError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(msg).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    if body.len() > limit {
        return Err(ProtoError::HeaderTooLarge {
            len: body.len(),
            limit,
        });
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one length-prefixed message body, refusing one longer than [`MAX_HEADER_LEN`]
/// before reading it.
pub async fn read_message_body<R: AsyncRead + Unpin>(r: &mut R) -> Result<Vec<u8>, ProtoError> {
    read_body(r, MAX_HEADER_LEN).await
}

pub(crate) async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<Vec<u8>, ProtoError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(ProtoError::Eof),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(ProtoError::HeaderTooLarge { len, limit });
    }
    let mut body = vec![0u8; len];
    match r.read_exact(&mut body).await {
        Ok(_) => Ok(body),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ProtoError::Eof),
        Err(e) => Err(e.into()),
    }
}

/// Reads and decodes one length-prefixed JSON message.
pub async fn read_message<R, T>(r: &mut R) -> Result<T, ProtoError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let body = read_message_body(r).await?;
    serde_json::from_slice(&body).map_err(|e| ProtoError::Malformed(e.to_string()))
}
