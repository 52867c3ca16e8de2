//! `GET /api/v1/agents/{id}/terminal`: a WebSocket onto a terminal session (the
//! `terminal.open` channel). Without `session` it starts a new one (waking a sleeping agent);
//! with `session` (and `offset`) it attaches to one that lives on in sandboxd. The protocol is
//! in [`PROTOCOL`], which is also the route's OpenAPI description.

use agenthold_proto::{
    self as proto, ErrorCode, Frame, FrameCodec, OpenError, TerminalOpen, TerminalOpened,
};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio_util::codec::Framed;
use utoipa::IntoParams;

use super::access::CredentialEnds;
use super::audit::AuditNote;
use super::command_gate::approved;
use super::error::{ApiError, ApiQuery, ErrorBody};
use super::types::{close, TerminalMessage};
use super::AppState;
use crate::activity::Use;
use crate::model::{Agent, AgentState};
use crate::teams::Principal;
use crate::tunnel::registry::{Link, LinkStream, TunnelError};

const MAX_DIM: u16 = 1000;

/// What a new session without a `command` runs, as its approval names it.
const LOGIN_SHELL: &str = "(login shell)";

/// Longest command line accepted (it travels in a channel header).
const MAX_COMMAND: usize = 16 * 1024;
/// How long an attach waits for a running agent's sandboxd to reconnect.
const ATTACH_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest redraw relayed (sandboxd caps its own well below this).
const MAX_REDRAW: u32 = 64 * 1024 * 1024;
pub const SESSION_ENDED: &str = "the terminal session ended (the agent slept or was restarted)";

/// The WebSocket protocol, as the OpenAPI description shows it.
pub const PROTOCOL: &str = "\
Upgrades to a WebSocket onto a terminal session that lives in the sandbox and survives the \
socket.\n\n\
**Opening.** Without `session`, a new session starts (a login shell, or `command` run by the \
account's shell) at `cols`×`rows` (default 80×24); a sleeping agent is woken and the server \
writes `Starting the sandbox…` while it waits. With `session=ID` the socket attaches to that \
session; `offset=N` is the output offset the client has seen up to. `cols`/`rows` on an attach \
resize the session when they differ. An attach never wakes an agent: a sleeping agent has no \
sessions (404 / close 4404).\n\n\
**Server to client.** Binary messages are pure terminal output. Binary messages that arrive \
before the `session` message are status text from the server, not session output. Text \
messages are JSON:\n\
- `{\"type\":\"session\",\"id\":ID,\"offset\":N,\"cols\":C,\"rows\":R}` first: N is the \
absolute offset of the next output byte the client receives. Count every binary byte after \
it (except redraw bytes) to know your offset.\n\
- `{\"type\":\"redraw\",\"offset\":N,\"bytes\":K}`: the next binary message (K bytes) redraws \
the whole screen as it was at offset N (reset your screen first, e.g. xterm.js `reset()`); \
it does not count towards offsets; set your offset to N. Sent after `session` when the \
client's offset has left the session's buffer (`sandbox.terminal_buffer_kb`) or was not \
given, and later if the client fell too far behind.\n\
- `{\"type\":\"resize\",\"cols\":C,\"rows\":R}`: the session's size changed (any viewer \
resized).\n\
- `{\"type\":\"exit\",\"code\":C}`: the shell exited; a close with code 1000 follows.\n\n\
**Client to server.** Binary messages are keystrokes; text `{\"type\":\"resize\",\"cols\":C,\
\"rows\":R}` resizes the session.\n\n\
**Closing.** 1000: the shell exited. 1011: the connection to the sandbox was lost or the \
sandbox could not be started; reattach with `session` and your offset. 4400: bad offset \
(beyond the output). 4404: the session no longer exists (the agent slept or was restarted, \
or it was ended, or the agent was destroyed). 4409: the session has too many viewers (32). \
4429: the agent has too many channels open (`sandbox.max_streams_per_agent`); try again \
later. An attach refused before the upgrade gets the matching HTTP status (400, 404, 409, \
429). Closing the socket detaches: the session lives on for \
`sandbox.terminal_detach_minutes` without viewers.";

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TerminalQuery {
    /// Columns (1–1000); 80 for a new session.
    #[param(minimum = 1, maximum = 1000)]
    pub cols: Option<u16>,
    /// Rows (1–1000); 24 for a new session.
    #[param(minimum = 1, maximum = 1000)]
    pub rows: Option<u16>,
    /// Attach to this session instead of starting one.
    pub session: Option<String>,
    /// With `session`: the output offset seen so far (a whole number of bytes).
    #[param(value_type = Option<u64>)]
    pub offset: Option<String>,
    /// For a new session: a command line for the account's shell instead of a login shell (at
    /// most 16 KiB, no NUL).
    #[param(min_length = 1, max_length = 16384)]
    pub command: Option<String>,
}

fn check_dims(cols: u16, rows: u16) -> Result<(), ApiError> {
    if cols == 0 || rows == 0 || cols > MAX_DIM || rows > MAX_DIM {
        return Err(ApiError::invalid(format!(
            "cols and rows must be between 1 and {MAX_DIM}"
        )));
    }
    Ok(())
}

/// Checks the query and turns it into the channel header.
fn to_open(st: &AppState, q: TerminalQuery) -> Result<TerminalOpen, ApiError> {
    for v in [q.cols, q.rows].into_iter().flatten() {
        check_dims(v, v)?;
    }
    let offset = match &q.offset {
        Some(o) => Some(o.trim().parse::<u64>().map_err(|_| {
            ApiError::invalid_field(
                "offset",
                format!(
                    "offset {:?} is not a whole number of bytes (0 or more)",
                    o.chars().take(40).collect::<String>()
                ),
            )
        })?),
        None => None,
    };
    if offset.is_some() && q.session.is_none() {
        return Err(ApiError::invalid_field(
            "offset",
            "offset needs a session to attach to",
        ));
    }
    if let Some(session) = &q.session {
        if q.command.is_some() {
            return Err(ApiError::invalid_field(
                "command",
                "command starts a new session; it cannot go with session",
            ));
        }
        // Not the right shape: it cannot be a session of this agent, nor of any.
        if !agenthold_proto::is_session_id(session) {
            return Err(ApiError::not_found("no such terminal session"));
        }
    }
    if let Some(c) = &q.command {
        if c.trim().is_empty() || c.contains('\0') || c.len() > MAX_COMMAND {
            return Err(ApiError::invalid_field(
                "command",
                format!(
                    "command must be a non-empty line of at most {MAX_COMMAND} bytes without NUL"
                ),
            ));
        }
    }
    let config = st.config();
    let sb = &config.sandbox;
    let new = q.session.is_none();
    Ok(TerminalOpen {
        cols: if new {
            Some(q.cols.unwrap_or(80))
        } else {
            q.cols
        },
        rows: if new {
            Some(q.rows.unwrap_or(24))
        } else {
            q.rows
        },
        term: Some("xterm-256color".into()),
        session: q.session,
        offset,
        command: q.command,
        detach_secs: Some(sb.terminal_detach_minutes.saturating_mul(60)),
        buffer_bytes: Some(sb.terminal_buffer_kb.saturating_mul(1024)),
        env: Vec::new(),
    })
}

/// A terminal session over a WebSocket (see the description for the protocol).
#[utoipa::path(get, path = "/api/v1/agents/{id}/terminal", tag = "terminal", operation_id = "terminal",
    description = PROTOCOL,
    params(("id" = String, Path, description = "The agent's id"), TerminalQuery),
    responses((status = 101, description = "WebSocket onto the session; see the description"),
        (status = 400, body = ErrorBody, description = "Bad `cols`, `rows`, `offset` or `command`, or not a WebSocket upgrade"), (status = 403, body = ErrorBody, description = "A new session waited for approval (the agent's `approvals.commands`; the upgrade is answered once it is decided) and was rejected (`approval_rejected`) or expired (`approval_expired`): nothing was run"),
        (status = 404, body = ErrorBody, description = "No such agent, or no such session"),
        (status = 409, body = ErrorBody, description = "The session has too many viewers"),
        (status = 429, body = ErrorBody, description = "The agent has `sandbox.max_streams_per_agent` channels open; try again after `Retry-After` seconds")))]
pub async fn terminal(
    State(st): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<TerminalQuery>,
    ends: CredentialEnds,
    note: AuditNote,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    match (&q.session, &q.command) {
        (Some(s), _) => note.detail(format!("attach {s}")),
        (None, Some(c)) => note.detail(c.as_str()),
        (None, None) => note.detail("login shell"),
    }
    let open = to_open(&st, q)?;
    // Fail before the upgrade for an unknown agent, so the client sees a 404.
    let agent = st.lc.get(&id).await?;
    if open.session.is_none() {
        // A new session runs a command (or a shell): it may wait for approval, before the
        // upgrade, so that a refusal is its `403`. Attaching to one runs nothing new.
        let line = open
            .command
            .clone()
            .unwrap_or_else(|| LOGIN_SHELL.to_string());
        approved(&st, &principal, &agent, line, &ends, Some(&note)).await?;
    } else if let Some(sid) = &open.session {
        // Typing into a session someone else opened is running commands in it: under
        // `always` it waits as a new one would (`dangerous` cannot read what will be typed).
        let line = format!("(attach to terminal session {sid})");
        approved(&st, &principal, &agent, line, &ends, Some(&note)).await?;
    }
    if open.session.is_some() {
        // Held from the start of the attach: a pause that looks for idleness meanwhile sees the
        // use (and one already freezing undoes itself), so the channel never opens on a frozen
        // sandbox.
        let hold = st.lc.activity().hold(&id, Use::Terminal);
        // A paused agent keeps its sessions, frozen: attaching is use, which thaws it.
        st.lc.thaw_for_use(&id).await?;
        if let Some(link) = st.lc.link(&id) {
            // Attach before the upgrade, so a missing session, a bad offset or a full tunnel is
            // an HTTP status.
            let (stream, opened) = open_channel(&link, &open).await?;
            return Ok(ws.on_upgrade(move |mut socket| {
                ends.guard(async move {
                    let _hold = hold;
                    relay(&st, &id, &mut socket, stream, opened).await
                })
            }));
        }
        if !matches!(
            agent.state,
            AgentState::Running | AgentState::Paused | AgentState::Starting
        ) {
            return Err(ApiError::not_found(SESSION_ENDED));
        }
    }
    Ok(ws.on_upgrade(move |socket| ends.guard(run(st, agent, open, socket))))
}

/// Why a terminal channel did not open: on our side of the tunnel, or sandboxd's answer.
#[derive(Debug, thiserror::Error)]
enum AttachError {
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
    #[error(transparent)]
    Open(#[from] OpenError),
}

impl From<AttachError> for ApiError {
    fn from(e: AttachError) -> ApiError {
        match e {
            AttachError::Tunnel(e) => e.into(),
            AttachError::Open(e) => e.into(),
        }
    }
}

async fn open_channel(
    link: &Link,
    open: &TerminalOpen,
) -> Result<(LinkStream, TerminalOpened), AttachError> {
    let mut stream = link.open().await?;
    let opened = proto::open(&mut stream, open.clone()).await?;
    Ok((stream, opened))
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    // A close reason is at most 123 bytes; cut on a character boundary.
    let mut reason: String = reason.chars().take(120).collect();
    while reason.len() > 123 {
        reason.pop();
    }
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

async fn run(st: AppState, agent: Agent, mut open: TerminalOpen, mut socket: WebSocket) {
    let id = agent.id.clone();
    let _hold = st.lc.activity().hold(&id, Use::Terminal);
    let attaching = open.session.is_some();
    let handle = if attaching {
        // The agent runs but its sandboxd is reconnecting: wait for it, but never start an
        // agent for a session that cannot exist any more.
        match st.lc.tunnels().wait(&id, ATTACH_WAIT).await {
            Ok(h) => h,
            Err(e) => {
                return close(
                    &mut socket,
                    close::ERROR,
                    &format!("the sandbox did not reconnect: {e}"),
                )
                .await
            }
        }
    } else {
        if !st.lc.tunnels().is_connected(&id) {
            let _ = socket
                .send(Message::Binary("Starting the sandbox…\r\n".into()))
                .await;
        }
        match st.lc.wake(&id, || {}).await {
            Ok(h) => h,
            Err(e) => {
                let msg = format!("\r\nThe sandbox could not be started: {e}\r\n");
                let _ = socket.send(Message::Binary(msg.into())).await;
                return close(
                    &mut socket,
                    close::ERROR,
                    "the sandbox could not be started",
                )
                .await;
            }
        }
    };
    if !attaching {
        // Now that the sandbox runs: its boot decides the placeholders.
        open.env = st.lc.boot_env(&id).launch_env(&agent).into_iter().collect();
    }
    match open_channel(&handle, &open).await {
        Ok((stream, opened)) => relay(&st, &id, &mut socket, stream, opened).await,
        Err(AttachError::Tunnel(e @ TunnelError::TooManyStreams(_))) => {
            let reason = e.to_string();
            if !attaching {
                let msg = format!("\r\nThe terminal could not be opened: {reason}\r\n");
                let _ = socket.send(Message::Binary(msg.into())).await;
            }
            close(&mut socket, close::TOO_MANY_STREAMS, &reason).await
        }
        Err(AttachError::Open(OpenError::Refused(e))) => {
            let (code, reason) = match e.code {
                ErrorCode::NotFound if attaching => {
                    (close::SESSION_GONE, SESSION_ENDED.to_string())
                }
                ErrorCode::Invalid => (close::BAD_REQUEST, e.message),
                ErrorCode::Busy => (close::BUSY, e.message),
                _ => (
                    close::ERROR,
                    format!("the terminal could not be opened: {}", e.message),
                ),
            };
            if !attaching {
                let msg = format!("\r\nThe terminal could not be opened: {reason}\r\n");
                let _ = socket.send(Message::Binary(msg.into())).await;
            }
            close(&mut socket, code, &reason).await
        }
        Err(e) => {
            if !attaching {
                let msg = format!("\r\nThe terminal could not be opened: {e}\r\n");
                let _ = socket.send(Message::Binary(msg.into())).await;
            }
            close(
                &mut socket,
                close::ERROR,
                "the terminal could not be opened",
            )
            .await
        }
    }
}

fn text(m: &TerminalMessage) -> Message {
    Message::Text(serde_json::to_string(m).unwrap_or_default().into())
}

/// A redraw being gathered from `Data` frames before it goes out as one message.
struct Gathering {
    offset: u64,
    len: usize,
    buf: BytesMut,
}

/// Moves bytes between the socket and the session until one side ends.
async fn relay(
    st: &AppState,
    id: &str,
    socket: &mut WebSocket,
    stream: LinkStream,
    opened: TerminalOpened,
) {
    let hello = TerminalMessage::Session {
        id: opened.session,
        offset: opened.offset,
        cols: opened.cols,
        rows: opened.rows,
    };
    if socket.send(text(&hello)).await.is_err() {
        return;
    }
    let mut pty = Framed::new(stream, FrameCodec::default());
    let mut redraw: Option<Gathering> = None;
    loop {
        tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    st.lc.activity().touch(id);
                    if pty.send(Frame::Data(b)).await.is_err() { break; }
                }
                Some(Ok(Message::Text(t))) => match serde_json::from_str::<TerminalMessage>(&t) {
                    Ok(TerminalMessage::Resize { cols, rows }) if check_dims(cols, rows).is_ok() => {
                        if pty.send(Frame::Resize { cols, rows }).await.is_err() { break; }
                    }
                    // A bad control message is ignored rather than ending someone's shell.
                    _ => tracing::debug!(agent = id, "ignored terminal control message"),
                },
                // The client left: dropping the stream detaches; the session lives on.
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            frame = pty.next() => match frame {
                Some(Ok(Frame::Data(mut b))) => {
                    if let Some(g) = &mut redraw {
                        let take = (g.len - g.buf.len()).min(b.len());
                        g.buf.extend_from_slice(&b.split_to(take));
                        if g.buf.len() == g.len {
                            let Some(g) = redraw.take() else { continue };
                            if send_redraw(socket, g.offset, g.buf.freeze()).await.is_err() { return; }
                        }
                    }
                    if !b.is_empty() && socket.send(Message::Binary(b)).await.is_err() { return; }
                }
                Some(Ok(Frame::Redraw { offset, len })) => {
                    if len > MAX_REDRAW { break; }
                    if len == 0 {
                        if send_redraw(socket, offset, Bytes::new()).await.is_err() { return; }
                    } else {
                        redraw = Some(Gathering { offset, len: len as usize, buf: BytesMut::with_capacity(len as usize) });
                    }
                }
                Some(Ok(Frame::Resize { cols, rows })) => {
                    if socket.send(text(&TerminalMessage::Resize { cols, rows })).await.is_err() { return; }
                }
                Some(Ok(Frame::PtyExit(code))) => {
                    let _ = socket.send(text(&TerminalMessage::Exit { code })).await;
                    return close(socket, close::NORMAL, &format!("the shell exited with code {code}")).await;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    // No terminal bytes here: they would be taken for session output and spoil the offset.
    if let Some(why) = sessions_ended(st, id).await {
        return close(socket, close::SESSION_GONE, &why).await;
    }
    close(
        socket,
        close::ERROR,
        "the connection to the sandbox was lost; reattach to the session",
    )
    .await;
}

/// Why the sandbox's link broke, when it is because the agent is being stopped, rebuilt or
/// destroyed (each ends every terminal session; the state changes before the sandbox goes)
/// rather than because sandboxd is reconnecting, after which the session is still there. A
/// client told to reattach to an ended session would only learn so from a second request, or,
/// for a destroyed agent, not at all (the attach gets "no such agent").
async fn sessions_ended(st: &AppState, id: &str) -> Option<String> {
    match st.lc.get(id).await {
        Ok(agent)
            if matches!(
                agent.state,
                AgentState::Running | AgentState::Paused | AgentState::Starting
            ) =>
        {
            None
        }
        Ok(agent) => Some(format!(
            "the terminal session ended (the agent is {})",
            agent.state
        )),
        Err(crate::lifecycle::LifecycleError::NotFound(_)) => {
            Some("the terminal session ended (the agent was destroyed)".to_string())
        }
        Err(_) => None,
    }
}

async fn send_redraw(socket: &mut WebSocket, offset: u64, bytes: Bytes) -> Result<(), axum::Error> {
    let head = TerminalMessage::Redraw {
        offset,
        bytes: bytes.len() as u64,
    };
    socket.send(text(&head)).await?;
    socket.send(Message::Binary(bytes)).await
}
