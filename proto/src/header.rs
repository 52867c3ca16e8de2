//! Channel headers and replies on the wire: a big-endian `u32` length followed by that many
//! bytes of JSON. Lengths are checked before anything is allocated, so a hostile peer cannot make
//! either side buffer more than [`MAX_HEADER_LEN`] bytes. The one exception is the `exec` header
//! as sandboxd reads it ([`crate::read_server_request`], [`MAX_EXEC_HEADER_LEN`]): it carries a whole
//! command line, and only the server sends it.

use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::MAX_FRAME_LEN;
use crate::reply::{ChannelError, ErrorCode};

/// Largest header or reply accepted, in bytes (for `exec` headers see [`MAX_EXEC_HEADER_LEN`]).
pub const MAX_HEADER_LEN: usize = 64 * 1024;
/// Most bytes an exec's command and environment may take together, counted the way `execve`
/// counts them: every argument and every `KEY=VALUE`, each with its terminating NUL.
pub const MAX_EXEC_ARGS_LEN: usize = 1024 * 1024;
/// Longest single argument or `KEY=VALUE`, with its NUL: Linux's `MAX_ARG_STRLEN` (32 pages of
/// 4 KiB). `execve` refuses a longer one with `E2BIG` whatever the total, so it is refused up
/// front with a reason instead of failing as exit code 126.
pub const MAX_EXEC_ARG_LEN: usize = 128 * 1024;
/// Largest `exec` header, in bytes. JSON may spend 6 bytes on one (`\u0001`) and 3 to 8 on the
/// quotes and commas around each string, which the NUL each one is counted with covers 6 times
/// over; so any request [`crate::ExecRequest::check_size`] accepts fits, with [`MAX_HEADER_LEN`] to
/// spare for `cwd` (at most [`crate::MAX_PATH_LEN`] bytes) and the other fields.
pub const MAX_EXEC_HEADER_LEN: usize = 6 * MAX_EXEC_ARGS_LEN + MAX_HEADER_LEN;

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
