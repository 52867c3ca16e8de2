//! The tunnel's wire protocol, shared by the server and sandboxd.
//!
//! Every yamux stream is one channel. The opener writes a *header*: a big-endian `u32` length
//! followed by that many bytes of JSON naming the channel and its parameters. The acceptor answers
//! with a *reply* in the same framing (`{"ok": {...}}` or `{"error": {"code", "message"}}`).
//! After that the channel's own bytes flow: raw bytes for `fs.read` / `fs.write` / `fs.list`,
//! [`Frame`]s for `pty`, `exec` and `activity`.
//!
//! Lengths are checked before anything is allocated, so a hostile peer cannot make either side
//! buffer more than [`MAX_HEADER_LEN`] or [`MAX_FRAME_LEN`] bytes. The one exception is the
//! `exec` header as sandboxd reads it ([`read_server_request`], [`MAX_EXEC_HEADER_LEN`]): it
//! carries a whole command line, and only the server sends it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use crate::paths::MAX_PATH_LEN;

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
/// over; so any request [`ExecRequest::check_size`] accepts fits, with [`MAX_HEADER_LEN`] to
/// spare for `cwd` (at most [`MAX_PATH_LEN`] bytes) and the other fields.
pub const MAX_EXEC_HEADER_LEN: usize = 6 * MAX_EXEC_ARGS_LEN + MAX_HEADER_LEN;
/// Largest frame payload accepted, in bytes.
pub const MAX_FRAME_LEN: usize = 1024 * 1024;
/// The sandboxd version, reported at hello.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Names of the channels this protocol knows.
pub const CHANNELS: &[&str] = &[
    "hello",
    "ping",
    "pty",
    "fs.list",
    "fs.read",
    "fs.write",
    "fs.mkdir",
    "fs.remove",
    "exec",
    "activity",
    "terminal.open",
    "terminal.list",
    "terminal.kill",
];

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("header of {len} bytes exceeds the limit of {limit} bytes")]
    HeaderTooLarge { len: usize, limit: usize },
    #[error("malformed header: {0}")]
    Malformed(String),
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
            ProtoError::Malformed(_) | ProtoError::UnknownFrame(_) => ErrorCode::Invalid,
            ProtoError::Eof | ProtoError::Io(_) => ErrorCode::Io,
        };
        ChannelError::new(code, self.to_string())
    }
}

/// The header that opens a channel.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "channel")]
pub enum Request {
    #[serde(rename = "hello")]
    Hello(Hello),
    #[serde(rename = "ping")]
    Ping,
    #[serde(rename = "pty")]
    Pty(PtyOpen),
    #[serde(rename = "fs.list")]
    FsList { path: String },
    #[serde(rename = "fs.read")]
    FsRead { path: String },
    #[serde(rename = "fs.write")]
    FsWrite { path: String },
    #[serde(rename = "fs.mkdir")]
    FsMkdir { path: String },
    #[serde(rename = "fs.remove")]
    FsRemove {
        path: String,
        #[serde(default)]
        recursive: bool,
    },
    #[serde(rename = "exec")]
    Exec(ExecRequest),
    #[serde(rename = "activity")]
    Activity,
    /// Creates a terminal session, or attaches to one, on this stream (see [`TerminalOpen`]).
    #[serde(rename = "terminal.open")]
    TerminalOpen(TerminalOpen),
    /// Lists the terminal sessions; the reply's `ok` is a `[TerminalInfo]`.
    #[serde(rename = "terminal.list")]
    TerminalList,
    /// Ends a terminal session (SIGHUP, then SIGKILL).
    #[serde(rename = "terminal.kill")]
    TerminalKill { session: String },
}

impl Request {
    pub fn channel(&self) -> &'static str {
        match self {
            Request::Hello(_) => "hello",
            Request::Ping => "ping",
            Request::Pty(_) => "pty",
            Request::FsList { .. } => "fs.list",
            Request::FsRead { .. } => "fs.read",
            Request::FsWrite { .. } => "fs.write",
            Request::FsMkdir { .. } => "fs.mkdir",
            Request::FsRemove { .. } => "fs.remove",
            Request::Exec(_) => "exec",
            Request::Activity => "activity",
            Request::TerminalOpen(_) => "terminal.open",
            Request::TerminalList => "terminal.list",
            Request::TerminalKill { .. } => "terminal.kill",
        }
    }

    /// The largest header this request may be sent in.
    pub fn header_limit(&self) -> usize {
        match self {
            Request::Exec(_) => MAX_EXEC_HEADER_LEN,
            _ => MAX_HEADER_LEN,
        }
    }

    /// Parses a header body, telling an unknown channel apart from a malformed header.
    pub fn parse(body: &[u8]) -> Result<Request, ProtoError> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| ProtoError::Malformed(e.to_string()))?;
        let channel = value
            .get("channel")
            .and_then(|c| c.as_str())
            .ok_or_else(|| ProtoError::Malformed("missing \"channel\"".into()))?;
        if !CHANNELS.contains(&channel) {
            return Err(ProtoError::UnknownChannel(truncate(channel, 64)));
        }
        serde_json::from_value(value).map_err(|e| ProtoError::Malformed(e.to_string()))
    }
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// What sandboxd says first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    pub agent_id: String,
    pub version: String,
    /// The account shells and commands run as.
    pub user: String,
    pub uid: u32,
    pub home: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PtyOpen {
    pub cols: u16,
    pub rows: u16,
    /// `TERM` for the shell; `xterm-256color` when absent.
    #[serde(default)]
    pub term: Option<String>,
}

/// Opens a `terminal.open` channel: without `session` a new session (a login shell, or
/// `command` run by the account's shell), with it an attach to that session.
///
/// After the `ok` reply ([`TerminalOpened`]) the stream carries [`Frame`]s. From the server:
/// `Data` (keystrokes) and `Resize`. From sandboxd: `Data` (the session's output, contiguous from
/// the reply's `offset`), `Redraw { offset, len }` (the next `len` bytes of `Data` redraw the
/// screen as of output offset `offset`; output from `offset` follows them), `Resize` (the
/// session's size changed; sent to every viewer) and last `PtyExit`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminalOpen {
    /// The terminal size; for an attach, a size that differs resizes the session.
    #[serde(default)]
    pub cols: Option<u16>,
    #[serde(default)]
    pub rows: Option<u16>,
    /// `TERM` for a new session; `xterm-256color` when absent.
    #[serde(default)]
    pub term: Option<String>,
    /// The session to attach to.
    #[serde(default)]
    pub session: Option<String>,
    /// For an attach: the output offset the viewer has seen up to. Within the session's buffer
    /// it gets exactly the bytes after it; older or absent, a redraw of the screen.
    #[serde(default)]
    pub offset: Option<u64>,
    /// For a new session: a command line for the account's shell (`sh -c` style) instead of
    /// an interactive login shell.
    #[serde(default)]
    pub command: Option<String>,
    /// For a new session: how long it lives on without viewers, in seconds; sandboxd's default
    /// when absent, and 0 ends it with its last viewer.
    #[serde(default)]
    pub detach_secs: Option<u64>,
    /// For a new session: how much output it keeps for replay, in bytes.
    #[serde(default)]
    pub buffer_bytes: Option<u64>,
}

/// The `ok` reply of `terminal.open`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TerminalOpened {
    pub session: String,
    /// The absolute output offset of the first byte that follows (after a redraw, the offset
    /// the redraw was taken at).
    pub offset: u64,
    pub cols: u16,
    pub rows: u16,
    /// True when a new session was started rather than an existing one attached.
    pub created: bool,
}

/// One terminal session, as `terminal.list` reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TerminalInfo {
    pub id: String,
    /// The shell, or the command line it runs.
    pub command: String,
    pub cols: u16,
    pub rows: u16,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    pub last_input_at_ms: u64,
    pub viewers: u32,
    /// Output produced so far, in bytes (the offset of the next byte).
    pub offset: u64,
    /// Set once the shell has exited; the session stays until a viewer has seen the end.
    pub exit_code: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExecRequest {
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Killed (the whole process group) after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Bytes of each of stdout and stderr forwarded; the rest is read and dropped.
    #[serde(default)]
    pub output_cap: Option<u64>,
}

/// Why an exec's command line cannot be sent or run (see [`ExecRequest::check_size`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecTooLarge {
    #[error(
        "the command and env take {0} bytes (each argument and each KEY=VALUE counted with a \
         terminating NUL); at most {MAX_EXEC_ARGS_LEN} bytes (1 MiB) are accepted"
    )]
    Total(usize),
    #[error(
        "argument {index} of the command is {len} bytes; Linux runs no command with an argument \
         over {max} bytes: pass a long script on stdin instead (for example command [\"sh\"] \
         with the script as stdin)",
        max = MAX_EXEC_ARG_LEN - 1
    )]
    Argument { index: usize, len: usize },
    #[error(
        "env variable {name:?} is {len} bytes as KEY=VALUE; Linux runs no command with a \
         variable over {max} bytes",
        max = MAX_EXEC_ARG_LEN - 1
    )]
    EnvVar { name: String, len: usize },
    #[error("cwd of {0} bytes is longer than {MAX_PATH_LEN} bytes")]
    Cwd(usize),
}

impl ExecTooLarge {
    /// The request field it is about.
    pub fn field(&self) -> &'static str {
        match self {
            ExecTooLarge::Total(_) | ExecTooLarge::Argument { .. } => "command",
            ExecTooLarge::EnvVar { .. } => "env",
            ExecTooLarge::Cwd(_) => "cwd",
        }
    }
}

impl ExecRequest {
    /// Checks the command line against the limits above, returning the bytes it counts.
    ///
    /// Both sides check: the server to answer with a reason before anything reaches the
    /// sandbox, sandboxd because its header limit is only large enough for requests that pass.
    pub fn check_size(&self) -> Result<usize, ExecTooLarge> {
        let mut total = 0usize;
        for (index, arg) in self.command.iter().enumerate() {
            let len = arg.len() + 1;
            if len > MAX_EXEC_ARG_LEN {
                return Err(ExecTooLarge::Argument {
                    index,
                    len: arg.len(),
                });
            }
            total += len;
        }
        for (k, v) in &self.env {
            let len = k.len() + 1 + v.len() + 1;
            if len > MAX_EXEC_ARG_LEN {
                return Err(ExecTooLarge::EnvVar {
                    name: truncate(k, 64),
                    len: len - 1,
                });
            }
            total += len;
        }
        if total > MAX_EXEC_ARGS_LEN {
            return Err(ExecTooLarge::Total(total));
        }
        match &self.cwd {
            Some(cwd) if cwd.len() > MAX_PATH_LEN => Err(ExecTooLarge::Cwd(cwd.len())),
            _ => Ok(total),
        }
    }
}

/// How an `exec` ended, sent as the last frame.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExecExit {
    /// The exit code; `128 + signal` when a signal ended it, -1 when it could not be started.
    pub exit_code: i32,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub truncated: bool,
}

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
            K::DirectoryNotEmpty => ErrorCode::Invalid,
            K::InvalidInput | K::InvalidFilename => ErrorCode::Invalid,
            K::FileTooLarge => ErrorCode::TooLarge,
            K::StorageFull | K::QuotaExceeded => ErrorCode::NoSpace,
            _ => ErrorCode::Io,
        };
        ChannelError::new(code, format!("{what}: {err}"))
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

/// Writes a channel header, within the limit of its channel.
pub async fn write_request<W>(w: &mut W, req: &Request) -> Result<(), ProtoError>
where
    W: AsyncWrite + Unpin,
{
    write_limited(w, req, req.header_limit()).await
}

async fn write_limited<W, T>(w: &mut W, msg: &T, limit: usize) -> Result<(), ProtoError>
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

async fn read_body<R: AsyncRead + Unpin>(r: &mut R, limit: usize) -> Result<Vec<u8>, ProtoError> {
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

/// Reads a channel header of at most [`MAX_HEADER_LEN`] bytes, whatever the channel: how the
/// server reads the headers of the channels sandboxd opens.
pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<Request, ProtoError> {
    let body = read_message_body(r).await?;
    Request::parse(&body)
}

/// Reads a channel header the server sent, as sandboxd does: an `exec` header may take up to
/// [`MAX_EXEC_HEADER_LEN`] bytes, every other one [`MAX_HEADER_LEN`].
///
/// Only this direction gets the larger limit. The limits matter most to the server: a sandbox
/// may be in hostile hands (root in its container can stand in for sandboxd), so what the server
/// reads from it (replies, and the headers of `hello` and `activity`) stays within
/// [`MAX_HEADER_LEN`]. sandboxd runs whatever the server asks of it anyway; the limit here only
/// stops a broken server, and a few megabytes for one header is not worth refusing real
/// commands for. The size of a non-`exec` header is checked once it is parsed, so the
/// terminal and file channels keep their limit.
pub async fn read_server_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<Request, ProtoError> {
    let body = read_body(r, MAX_EXEC_HEADER_LEN).await?;
    let req = Request::parse(&body)?;
    let limit = req.header_limit();
    if body.len() > limit {
        return Err(ProtoError::HeaderTooLarge {
            len: body.len(),
            limit,
        });
    }
    Ok(req)
}

/// Sends `req` on a fresh stream and waits for the reply; the stream is then ready for the
/// channel's own bytes.
pub async fn open_channel<S>(stream: &mut S, req: &Request) -> Result<serde_json::Value, OpenError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    write_request(stream, req).await?;
    let reply: Reply = read_message(stream).await?;
    reply.into_result().map_err(OpenError::Refused)
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the sandbox refused the channel: {0}")]
    Refused(ChannelError),
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

/// A message inside the `pty`, `exec` and `activity` channels.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Terminal bytes (both ways) or stdin bytes (server to sandboxd).
    Data(Bytes),
    Stdout(Bytes),
    Stderr(Bytes),
    /// No more stdin.
    StdinEof,
    Resize {
        cols: u16,
        rows: u16,
    },
    /// The shell of a `pty` channel ended with this code.
    PtyExit(i32),
    /// The last frame of an `exec` channel.
    ExecExit(ExecExit),
    /// CPU time used by the sandbox's processes since sandboxd started, in milliseconds.
    Activity {
        cpu_ms: u64,
    },
    /// `terminal.open`: the next `len` bytes of `Data` frames redraw the screen as it was at
    /// output offset `offset`; the live output from `offset` follows them.
    Redraw {
        offset: u64,
        len: u32,
    },
}

const K_DATA: u8 = 1;
const K_STDOUT: u8 = 2;
const K_STDERR: u8 = 3;
const K_STDIN_EOF: u8 = 4;
const K_RESIZE: u8 = 5;
const K_PTY_EXIT: u8 = 6;
const K_EXEC_EXIT: u8 = 7;
const K_ACTIVITY: u8 = 8;
const K_REDRAW: u8 = 9;

/// Encodes [`Frame`]s as `u32` length + kind byte + payload, with [`MAX_FRAME_LEN`] enforced
/// on both sides.
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec {
            inner: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME_LEN + 1)
                .new_codec(),
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = ProtoError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
        let raw = match self.inner.decode(src) {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(ProtoError::FrameTooLarge(peek_len(src)))
            }
            Err(e) => return Err(e.into()),
        };
        decode_payload(raw.freeze()).map(Some)
    }
}

fn peek_len(src: &BytesMut) -> usize {
    if src.len() >= 4 {
        u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize
    } else {
        0
    }
}

fn decode_payload(mut raw: Bytes) -> Result<Frame, ProtoError> {
    if raw.is_empty() {
        return Err(ProtoError::Malformed("empty frame".into()));
    }
    let kind = raw.get_u8();
    let short = || ProtoError::Malformed(format!("frame kind {kind} too short"));
    Ok(match kind {
        K_DATA => Frame::Data(raw),
        K_STDOUT => Frame::Stdout(raw),
        K_STDERR => Frame::Stderr(raw),
        K_STDIN_EOF => Frame::StdinEof,
        K_RESIZE => {
            if raw.len() < 4 {
                return Err(short());
            }
            Frame::Resize {
                cols: raw.get_u16(),
                rows: raw.get_u16(),
            }
        }
        K_PTY_EXIT => {
            if raw.len() < 4 {
                return Err(short());
            }
            Frame::PtyExit(raw.get_i32())
        }
        K_EXEC_EXIT => Frame::ExecExit(
            serde_json::from_slice(&raw).map_err(|e| ProtoError::Malformed(e.to_string()))?,
        ),
        K_ACTIVITY => {
            if raw.len() < 8 {
                return Err(short());
            }
            Frame::Activity {
                cpu_ms: raw.get_u64(),
            }
        }
        K_REDRAW => {
            if raw.len() < 12 {
                return Err(short());
            }
            Frame::Redraw {
                offset: raw.get_u64(),
                len: raw.get_u32(),
            }
        }
        other => return Err(ProtoError::UnknownFrame(other)),
    })
}

impl Encoder<Frame> for FrameCodec {
    type Error = ProtoError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), ProtoError> {
        let mut payload = BytesMut::new();
        match frame {
            Frame::Data(b) => put_bytes(&mut payload, K_DATA, &b),
            Frame::Stdout(b) => put_bytes(&mut payload, K_STDOUT, &b),
            Frame::Stderr(b) => put_bytes(&mut payload, K_STDERR, &b),
            Frame::StdinEof => payload.put_u8(K_STDIN_EOF),
            Frame::Resize { cols, rows } => {
                payload.put_u8(K_RESIZE);
                payload.put_u16(cols);
                payload.put_u16(rows);
            }
            Frame::PtyExit(code) => {
                payload.put_u8(K_PTY_EXIT);
                payload.put_i32(code);
            }
            Frame::ExecExit(exit) => {
                payload.put_u8(K_EXEC_EXIT);
                let json =
                    serde_json::to_vec(&exit).map_err(|e| ProtoError::Malformed(e.to_string()))?;
                payload.put_slice(&json);
            }
            Frame::Activity { cpu_ms } => {
                payload.put_u8(K_ACTIVITY);
                payload.put_u64(cpu_ms);
            }
            Frame::Redraw { offset, len } => {
                payload.put_u8(K_REDRAW);
                payload.put_u64(offset);
                payload.put_u32(len);
            }
        }
        if payload.len() > MAX_FRAME_LEN + 1 {
            return Err(ProtoError::FrameTooLarge(payload.len()));
        }
        self.inner
            .encode(payload.freeze(), dst)
            .map_err(ProtoError::Io)
    }
}

fn put_bytes(payload: &mut BytesMut, kind: u8, b: &[u8]) {
    payload.reserve(1 + b.len());
    payload.put_u8(kind);
    payload.put_slice(b);
}

/// Largest data chunk a sender should put in one frame.
pub const DATA_CHUNK: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{SinkExt, StreamExt};
    use tokio_util::codec::{FramedRead, FramedWrite};

    #[tokio::test]
    async fn header_round_trip() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let req = Request::FsRemove {
            path: "x".into(),
            recursive: true,
        };
        write_message(&mut a, &req).await.unwrap();
        assert_eq!(read_request(&mut b).await.unwrap(), req);
    }

    #[tokio::test]
    async fn oversized_header_is_refused_before_reading() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&(100u32 * 1024 * 1024).to_be_bytes())
            .await
            .unwrap();
        assert!(matches!(
            read_request(&mut b).await,
            Err(ProtoError::HeaderTooLarge { len, .. }) if len == 100 * 1024 * 1024
        ));
    }

    /// The worst case for JSON: every byte a control character, escaped as `\u00XX`.
    fn worst_exec(total: usize) -> ExecRequest {
        let arg_len = 100 * 1024 - 1;
        let mut command = vec!["sh".to_string()];
        let mut left = total - 3;
        while left > 0 {
            let n = left.min(arg_len + 1);
            command.push("\u{1}".repeat(n - 1));
            left -= n;
        }
        ExecRequest {
            command,
            cwd: Some("d".repeat(MAX_PATH_LEN)),
            timeout_ms: Some(u64::MAX),
            output_cap: Some(u64::MAX),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_exec_header_within_the_limits_reaches_sandboxd_only() {
        let req = Request::Exec(worst_exec(MAX_EXEC_ARGS_LEN));
        let Request::Exec(exec) = &req else {
            unreachable!()
        };
        assert_eq!(exec.check_size(), Ok(MAX_EXEC_ARGS_LEN));
        let sent = serde_json::to_vec(&req).unwrap().len();
        assert!(sent > 6 * 1000 * 1000, "not the worst case: {sent} bytes");

        // sandboxd reads what the server sends with the exec limit...
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let (w, r) = tokio::join!(write_request(&mut a, &req), read_server_request(&mut b));
        w.unwrap();
        assert_eq!(r.unwrap(), req);

        // ...the server reads what sandboxd sends with the small one, whatever the channel.
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&(sent as u32).to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_request(&mut b).await,
            Err(ProtoError::HeaderTooLarge { len, limit: MAX_HEADER_LEN }) if len == sent
        ));
        assert!(matches!(
            write_message(&mut a, &req).await,
            Err(ProtoError::HeaderTooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn other_channels_keep_the_small_header_limit() {
        let big = Request::TerminalOpen(TerminalOpen {
            command: Some("x".repeat(MAX_HEADER_LEN)),
            ..Default::default()
        });
        let (mut a, _b) = tokio::io::duplex(1024);
        assert!(matches!(
            write_request(&mut a, &big).await,
            Err(ProtoError::HeaderTooLarge {
                limit: MAX_HEADER_LEN,
                ..
            })
        ));
        // Sent anyway (a broken server): refused once its channel is known.
        for req in [
            big,
            Request::FsWrite {
                path: "p".repeat(MAX_HEADER_LEN),
            },
        ] {
            let body = serde_json::to_vec(&req).unwrap();
            let (mut a, mut b) = tokio::io::duplex(1 << 16);
            let write = async {
                a.write_all(&(body.len() as u32).to_be_bytes()).await?;
                a.write_all(&body).await
            };
            let (w, r) = tokio::join!(write, read_server_request(&mut b));
            w.unwrap();
            assert!(matches!(
                r,
                Err(ProtoError::HeaderTooLarge {
                    limit: MAX_HEADER_LEN,
                    ..
                })
            ));
        }
        // Longer than any exec header: refused before reading.
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&((MAX_EXEC_HEADER_LEN + 1) as u32).to_be_bytes())
            .await
            .unwrap();
        assert!(matches!(
            read_server_request(&mut b).await,
            Err(ProtoError::HeaderTooLarge {
                limit: MAX_EXEC_HEADER_LEN,
                ..
            })
        ));
    }

    #[test]
    fn exec_size_limits() {
        assert!(matches!(
            worst_exec(MAX_EXEC_ARGS_LEN + 1).check_size(),
            Err(ExecTooLarge::Total(n)) if n == MAX_EXEC_ARGS_LEN + 1
        ));
        let one = |arg: String| ExecRequest {
            command: vec!["sh".into(), "-c".into(), arg],
            ..Default::default()
        };
        assert_eq!(
            one("a".repeat(MAX_EXEC_ARG_LEN - 1)).check_size(),
            Ok(3 + 3 + MAX_EXEC_ARG_LEN)
        );
        let err = one("a".repeat(200_000)).check_size().unwrap_err();
        assert_eq!(
            err,
            ExecTooLarge::Argument {
                index: 2,
                len: 200_000
            }
        );
        assert!(err.to_string().contains("131071"), "{err}");
        let env = |len: usize| ExecRequest {
            command: vec!["env".into()],
            env: vec![("K".into(), "v".repeat(len))],
            ..Default::default()
        };
        // "K=" and the value make 131071 bytes, the most Linux takes.
        assert!(env(MAX_EXEC_ARG_LEN - 3).check_size().is_ok());
        assert!(matches!(
            env(MAX_EXEC_ARG_LEN - 2).check_size(),
            Err(ExecTooLarge::EnvVar { len, .. }) if len == MAX_EXEC_ARG_LEN
        ));
        // 10,000 variables are fine while their bytes are.
        let many = ExecRequest {
            command: vec!["env".into()],
            env: (0..10_000)
                .map(|i| (format!("V{i}"), "x".repeat(50)))
                .collect(),
            ..Default::default()
        };
        assert!(many.check_size().is_ok());
    }

    #[tokio::test]
    async fn unknown_and_malformed_headers_are_told_apart() {
        assert!(matches!(
            Request::parse(br#"{"channel":"fs.format"}"#),
            Err(ProtoError::UnknownChannel(c)) if c == "fs.format"
        ));
        assert!(matches!(
            Request::parse(b"\xff\x00garbage"),
            Err(ProtoError::Malformed(_))
        ));
        assert!(matches!(
            Request::parse(br#"{"channel":"fs.read"}"#),
            Err(ProtoError::Malformed(_))
        ));
        assert!(matches!(
            Request::parse(br#"{"path":"x"}"#),
            Err(ProtoError::Malformed(_))
        ));
        assert!(matches!(
            Request::parse(br#"{"channel":"terminal.open","offset":-1}"#),
            Err(ProtoError::Malformed(_))
        ));
    }

    #[test]
    fn terminal_headers_round_trip_and_default() {
        let open =
            Request::parse(br#"{"channel":"terminal.open","session":"abc","offset":7}"#).unwrap();
        assert_eq!(
            open,
            Request::TerminalOpen(TerminalOpen {
                session: Some("abc".into()),
                offset: Some(7),
                ..Default::default()
            })
        );
        for req in [
            Request::TerminalList,
            Request::TerminalKill {
                session: "x".into(),
            },
        ] {
            let json = serde_json::to_vec(&req).unwrap();
            assert_eq!(Request::parse(&json).unwrap(), req);
        }
    }

    #[tokio::test]
    async fn truncated_header_is_eof() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&10u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{\"ch").await.unwrap();
        drop(a);
        assert!(matches!(read_request(&mut b).await, Err(ProtoError::Eof)));
    }

    #[tokio::test]
    async fn frames_round_trip() {
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut w = FramedWrite::new(a, FrameCodec::default());
        let mut r = FramedRead::new(b, FrameCodec::default());
        let frames = vec![
            Frame::Data(Bytes::from_static(b"hi")),
            Frame::Stdout(Bytes::from(vec![7u8; DATA_CHUNK])),
            Frame::Stderr(Bytes::new()),
            Frame::StdinEof,
            Frame::Resize {
                cols: 120,
                rows: 40,
            },
            Frame::PtyExit(-3),
            Frame::ExecExit(ExecExit {
                exit_code: 2,
                timed_out: true,
                duration_ms: 5,
                truncated: false,
            }),
            Frame::Activity { cpu_ms: 1 << 40 },
            Frame::Redraw {
                offset: u64::MAX - 1,
                len: 70_000,
            },
        ];
        for f in frames.clone() {
            w.send(f).await.unwrap();
        }
        for f in frames {
            assert_eq!(r.next().await.unwrap().unwrap(), f);
        }
    }

    #[tokio::test]
    async fn hostile_frames_are_errors() {
        for raw in [
            (100u32 * 1024 * 1024).to_be_bytes().to_vec(),
            vec![0, 0, 0, 1, 99],
            vec![0, 0, 0, 2, K_RESIZE, 1],
            vec![0, 0, 0, 5, K_REDRAW, 0, 0, 0, 1],
            vec![0, 0, 0, 0],
        ] {
            let mut r = FramedRead::new(&raw[..], FrameCodec::default());
            assert!(r.next().await.unwrap().is_err(), "{raw:?} was accepted");
        }
    }
}
