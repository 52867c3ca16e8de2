//! The channels: what opens each one, and what its `ok` reply holds.
//!
//! Every yamux stream is one channel. The opener writes a header ([`Request`], framed as
//! [`crate::header`] says) naming the channel and its parameters; the acceptor answers with a
//! [`Reply`]: `{"ok": {...}}` or `{"error": {"code", "message"}}`. After that the channel's own
//! bytes flow: raw bytes for `fs.read` / `fs.write` / `fs.list`, [`crate::Frame`]s for `exec`,
//! `activity`, `terminal.open` and the `process.*` channels that stream.
//!
//! Each channel is declared once, in the table below: its name, the type of its header and the
//! type of its `ok` reply. [`open`] sends a header and returns the reply as that type;
//! [`read_request`] and [`read_server_request`] read one on the acceptor's side.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::code::{
    CodeContext, CodeContextCreate, CodeContextList, CodeContextRemove, CodeContextRestart, CodeRun,
};
use crate::exec::ExecRequest;
use crate::header::{read_body, read_message, read_message_body, write_limited, ProtoError};
use crate::limits::{MAX_EXEC_HEADER_LEN, MAX_HEADER_LEN};
use crate::process::{
    ProcessAttach, ProcessGet, ProcessInfo, ProcessList, ProcessOutput, ProcessRemove,
    ProcessSignal, ProcessStart, ProcessStdin, ProcessWait, ProcessWatch,
};
use crate::reply::{ChannelError, Reply};

/// A channel's header type: it names the channel and the shape of its `ok` reply.
pub trait Channel: Into<Request> {
    /// The channel's name on the wire.
    const NAME: &'static str;
    /// What the `ok` reply holds.
    type Reply: Serialize + DeserializeOwned;
}

/// Declares the channels: the [`Request`] enum, [`CHANNELS`], and each header's [`Channel`].
macro_rules! channels {
    ($($(#[$doc:meta])* $name:literal => $variant:ident($header:ty) -> $reply:ty;)*) => {
        /// The header that opens a channel.
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        #[serde(tag = "channel")]
        pub enum Request {
            $($(#[$doc])* #[serde(rename = $name)] $variant($header),)*
        }

        /// Names of the channels this protocol knows.
        pub const CHANNELS: &[&str] = &[$($name),*];

        impl Request {
            pub fn channel(&self) -> &'static str {
                match self {
                    $(Request::$variant(_) => $name,)*
                }
            }
        }

        $(
            impl From<$header> for Request {
                fn from(header: $header) -> Request {
                    Request::$variant(header)
                }
            }

            impl Channel for $header {
                const NAME: &'static str = $name;
                type Reply = $reply;
            }
        )*
    };
}

channels! {
    /// sandboxd's first stream: who it is.
    "hello" => Hello(Hello) -> Empty;
    /// A round trip, either way: the liveness check.
    "ping" => Ping(Ping) -> Empty;
    /// A directory's entries follow the reply, as JSON lines.
    "fs.list" => FsList(FsList) -> Empty;
    /// The file's bytes follow the reply.
    "fs.read" => FsRead(FsRead) -> Size;
    /// The server sends the file's bytes after the reply; sandboxd answers a second [`Reply`]
    /// with the [`Size`] written once they are on disk.
    "fs.write" => FsWrite(FsWrite) -> Empty;
    "fs.mkdir" => FsMkdir(FsMkdir) -> Empty;
    "fs.remove" => FsRemove(FsRemove) -> Empty;
    /// Moves or renames a file or directory.
    "fs.rename" => FsRename(FsRename) -> Empty;
    /// What a path is (the path itself: a symbolic link is not followed).
    "fs.stat" => FsStat(FsStat) -> FileStat;
    /// Whether the account can see that a path exists.
    "fs.exists" => FsExists(FsExists) -> Exists;
    /// Changes under a directory: [`WatchEvent`]s follow the reply, each framed as a header
    /// (see [`crate::header`]), until either side closes the stream.
    "fs.watch" => FsWatch(FsWatch) -> Empty;
    /// Runs a command; frames follow (see [`crate::Frame`]), the last one its exit.
    "exec" => Exec(ExecRequest) -> Empty;
    /// sandboxd's stream of CPU use, one [`crate::Frame::Activity`] a tick.
    "activity" => Activity(Activity) -> Empty;
    /// Creates a terminal session, or attaches to one, on this stream (see [`TerminalOpen`]).
    "terminal.open" => TerminalOpen(TerminalOpen) -> TerminalOpened;
    /// Lists the terminal sessions.
    "terminal.list" => TerminalList(TerminalList) -> Vec<TerminalInfo>;
    /// Ends a terminal session (SIGHUP, then SIGKILL).
    "terminal.kill" => TerminalKill(TerminalKill) -> Empty;
    /// Starts a background process (see [`crate::process`]).
    "process.start" => ProcessStart(ProcessStart) -> ProcessInfo;
    /// Lists the processes, running and finished: the reply says how many frames follow.
    "process.list" => ProcessList(ProcessList) -> Size;
    "process.get" => ProcessGet(ProcessGet) -> ProcessInfo;
    /// A process's output from an offset; frames follow.
    "process.output" => ProcessOutput(ProcessOutput) -> ProcessInfo;
    /// Bytes for a process's stdin follow the reply.
    "process.stdin" => ProcessStdin(ProcessStdin) -> Empty;
    /// A process's output from an offset and its stdin, on one stream (see [`ProcessAttach`]).
    "process.attach" => ProcessAttach(ProcessAttach) -> ProcessInfo;
    "process.signal" => ProcessSignal(ProcessSignal) -> Empty;
    /// Answers once the process has ended or the wait is up.
    "process.wait" => ProcessWait(ProcessWait) -> ProcessInfo;
    /// Kills the process's tree if it runs, then forgets it.
    "process.remove" => ProcessRemove(ProcessRemove) -> Empty;
    /// sandboxd's stream of process starts and ends, towards the server.
    "process.watch" => ProcessWatch(ProcessWatch) -> Empty;
    /// The TCP ports listening inside the sandbox (what a preview can reach).
    "ports.list" => PortsList(PortsList) -> Ports;
    /// A TCP connection to the sandbox's own loopback at one port (`127.0.0.1`, else `::1`),
    /// and nowhere else: after the `ok` reply the stream carries its bytes both ways.
    "port.connect" => PortConnect(PortConnect) -> Empty;
    /// Runs code in a kernel's context; [`crate::code::CodeEvent`]s follow, the last one
    /// `done` (see [`crate::code`]).
    "code.run" => CodeRun(CodeRun) -> Empty;
    /// Starts a new context (a kernel of its own).
    "code.context.create" => CodeContextCreate(CodeContextCreate) -> CodeContext;
    "code.context.list" => CodeContextList(CodeContextList) -> Vec<CodeContext>;
    /// Starts the context's kernel anew: its variables are gone.
    "code.context.restart" => CodeContextRestart(CodeContextRestart) -> CodeContext;
    /// Kills the context's kernel and what it started, and forgets the context.
    "code.context.remove" => CodeContextRemove(CodeContextRemove) -> Empty;
}

impl Request {
    /// The largest header this request may be sent in.
    pub fn header_limit(&self) -> usize {
        match self {
            // A new terminal carries the agent's env, which may be as large as an exec's.
            // Code may take as many bytes as an exec's command line.
            Request::Exec(_)
            | Request::ProcessStart(_)
            | Request::TerminalOpen(_)
            | Request::CodeRun(_)
            | Request::CodeContextCreate(_)
            | Request::CodeContextRestart(_) => MAX_EXEC_HEADER_LEN,
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

/// An `ok` reply with nothing in it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Empty {}

/// The header of a channel that has no parameters.
macro_rules! bare {
    ($($name:ident),*) => {$(
        #[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
        pub struct $name {}
    )*};
}
bare!(Ping, Activity, TerminalList, PortsList);

/// The header of a channel about one path (as the API names it: absolute, or under the home).
macro_rules! about_a_path {
    ($($name:ident),*) => {$(
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        pub struct $name {
            pub path: String,
        }
    )*};
}
about_a_path!(FsList, FsRead, FsMkdir, FsStat, FsExists);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FsWrite {
    pub path: String,
    /// Makes the missing directories above the file first (as the account).
    #[serde(default)]
    pub parents: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FsRename {
    pub from: String,
    pub to: String,
    /// Replaces what `to` names (a file, or an empty directory for a directory); without,
    /// an existing `to` is refused with [`crate::ErrorCode::Exists`].
    #[serde(default)]
    pub overwrite: bool,
}

/// The `ok` of `fs.stat`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileStat {
    /// The path as the API names it (absolute).
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// The permission bits in octal, four digits (`0644`).
    pub mode: String,
    /// RFC 3339.
    pub mtime: String,
    /// The owner's user name in the sandbox, or its uid when it has none.
    pub owner: String,
}

/// The `ok` of `fs.exists`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Exists {
    pub exists: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FsWatch {
    pub path: String,
    /// Subdirectories too, those made later included.
    #[serde(default)]
    pub recursive: bool,
}

/// What happened to a path under a watched directory.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WatchKind {
    Create,
    Write,
    Remove,
    /// Renamed away from `path` (where it went, if it stayed in view, comes as a `create`).
    Rename,
    /// Events were lost (a flood, or a directory beyond the watch limit): what is there now
    /// must be read again. `path` is the directory concerned.
    Gap,
}

/// One event of `fs.watch`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WatchEvent {
    #[serde(rename = "type")]
    pub kind: WatchKind,
    /// Absolute, as the API names paths.
    pub path: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FsRemove {
    pub path: String,
    /// A directory and everything in it; without, only an empty one.
    #[serde(default)]
    pub recursive: bool,
}

/// Opens `port.connect`. Only a port: the address is always the sandbox's own loopback, and a
/// header naming anything else (an unknown field such as `host`) is refused as malformed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortConnect {
    /// 1 to 65535.
    pub port: u16,
}

/// The `ok` of `ports.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Ports {
    /// Each listening (port, address) once, by port.
    pub ports: Vec<ListeningPort>,
}

/// A TCP port something listens on inside the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListeningPort {
    pub port: u16,
    /// The address it listens on (`0.0.0.0`, `127.0.0.1`, `::`, `::1`…).
    pub address: String,
    /// The listening process's command name, when sandboxd can see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
}

/// A file's size in bytes: the `ok` of `fs.read`, and the last reply of `fs.write`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Size {
    pub size: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TerminalKill {
    pub session: String,
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

/// Opens a `terminal.open` channel: without `session` a new session (a login shell, or
/// `command` run by the account's shell), with it an attach to that session.
///
/// After the `ok` reply ([`TerminalOpened`]) the stream carries [`crate::Frame`]s. From the server:
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
    /// For a new session: variables its shell starts with, over sandboxd's own (the agent's
    /// `env`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
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

/// Writes a channel header, within the limit of its channel.
pub async fn write_request<W>(w: &mut W, req: &Request) -> Result<(), ProtoError>
where
    W: AsyncWrite + Unpin,
{
    write_limited(w, req, req.header_limit()).await
}

/// Reads a channel header of at most [`MAX_HEADER_LEN`] bytes, whatever the channel: how the
/// server reads the headers of the channels sandboxd opens.
pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<Request, ProtoError> {
    let body = read_message_body(r).await?;
    Request::parse(&body)
}

/// Reads a channel header the server sent, as sandboxd does: an `exec`, process start or
/// terminal open header (each may carry the agent's env) may take up to
/// [`MAX_EXEC_HEADER_LEN`] bytes, every other one [`MAX_HEADER_LEN`].
///
/// Only this direction gets the larger limit. The limits matter most to the server: a sandbox
/// may be in hostile hands (root in its container can stand in for sandboxd), so what the server
/// reads from it (replies, and the headers of `hello` and `activity`) stays within
/// [`MAX_HEADER_LEN`]. sandboxd runs whatever the server asks of it anyway; the limit here only
/// stops a broken server, and a few megabytes for one header is not worth refusing real
/// commands for. The size of every header is checked against its channel's limit once it
/// is parsed, so the file channels keep the small one.
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

/// Sends `header` on a fresh stream and waits for the reply, returned as the channel's own
/// type; the stream is then ready for the channel's own bytes.
pub async fn open<S, C>(stream: &mut S, header: C) -> Result<C::Reply, OpenError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: Channel,
{
    write_request(stream, &header.into()).await?;
    let reply: Reply = read_message(stream).await?;
    let ok = reply.into_result().map_err(OpenError::Refused)?;
    serde_json::from_value(ok)
        .map_err(|e| OpenError::Proto(ProtoError::BadReply(format!("{}: {e}", C::NAME))))
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the sandbox refused the channel: {0}")]
    Refused(ChannelError),
    #[error(transparent)]
    Proto(#[from] ProtoError),
}
