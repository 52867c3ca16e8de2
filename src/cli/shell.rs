//! `agenthold shell AGENT`: the agent's terminal over a WebSocket, in our own terminal.
//!
//! The terminal is a session that lives in the sandbox. When the socket drops (a network blip,
//! the server restarting, the tunnel to the sandbox reconnecting) the shell keeps running and
//! this command reattaches by itself with the offset it has seen, so nothing is lost or shown
//! twice.

use std::io::{IsTerminal, Read};
use std::time::Duration;

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::client::{ApiClient, Terminal};
use super::error::ClientError;
use crate::api::types::{close, TerminalMessage};

/// What a terminal is assumed to be when ours is not one (a pipe in a test).
const DEFAULT_SIZE: (u16, u16) = (80, 24);
/// Ctrl-D: at an empty prompt the shell reads it as end of input and exits.
const EOT: u8 = 0x04;
/// After piped input ends, Ctrl-D is typed only once the screen has been still this long:
/// sent earlier, it lands before the shell has set its terminal up and is lost.
const QUIET: Duration = Duration::from_millis(500);
/// Enough Ctrl-Ds to leave a shell and a program in it that was reading input.
const MAX_EOTS: u8 = 3;
/// Waits between reattach attempts: short at first (a tunnel reconnects in well under a
/// second), then no more than every few seconds.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(3);

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ShellArgs {
    /// Agent id or name
    pub agent: String,
    /// Attach to this terminal session instead of starting a new one (see GET
    /// /api/v1/agents/ID/terminals)
    #[arg(long)]
    pub session: Option<String>,
    /// How long to keep trying to reattach after the connection drops (e.g. 90s, 5m)
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub reattach_timeout: Duration,
}

/// What the control messages and output have told us about the session: enough to reattach
/// exactly where we left off.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Tracker {
    /// Known once the server's `session` message arrived.
    pub session: Option<String>,
    /// The offset of the next session byte we will receive.
    pub offset: u64,
    /// Set by a `session` message; binary bytes before it are the server's status text.
    in_session: bool,
    /// `offset` came from the server at least once, so it can be resumed from.
    has_offset: bool,
    /// The next binary message is a redraw taken at this offset.
    redraw_at: Option<u64>,
    /// The code from an `exit` message.
    pub exit_code: Option<i32>,
}

impl Tracker {
    fn new(session: Option<String>) -> Tracker {
        Tracker {
            session,
            ..Tracker::default()
        }
    }

    /// A new socket: everything before its `session` message is not session output.
    fn reconnected(&mut self) {
        self.in_session = false;
        self.redraw_at = None;
    }

    /// Takes a text (control) message; they are never shown.
    fn on_text(&mut self, text: &str) {
        // Kinds this client does not know are skipped, so the server may add some.
        let Ok(msg) = serde_json::from_str::<TerminalMessage>(text) else {
            return;
        };
        match msg {
            TerminalMessage::Session { id, offset, .. } => {
                self.session = Some(id);
                self.offset = offset;
                self.in_session = true;
                self.has_offset = true;
            }
            TerminalMessage::Redraw { offset, .. } => self.redraw_at = Some(offset),
            TerminalMessage::Exit { code } => self.exit_code = Some(code),
            // A resize by another viewer: our own terminal's size is not ours to change.
            TerminalMessage::Resize { .. } => {}
        }
    }

    /// Counts a binary message (to be shown as it is).
    fn on_binary(&mut self, len: usize) {
        if let Some(at) = self.redraw_at.take() {
            self.offset = at;
        } else if self.in_session {
            self.offset += len as u64;
        }
    }
}

/// How one socket ended.
enum End {
    /// The shell exited (or the session was ended): done.
    Exit,
    /// Reattaching may help.
    Lost(String),
    /// It will not: say why and stop.
    Fatal(String),
}

pub(super) async fn run(client: &ApiClient, args: ShellArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    let tty = std::io::stdin().is_terminal();
    let (cols, rows) = size();
    let mut tracker = Tracker::new(args.session.clone());
    let mut ws = dial(client, &agent.id, cols, rows, &tracker).await?;

    let raw = if tty { Some(RawMode::enable()?) } else { None };
    let mut input = spawn_stdin_reader();
    let mut winch = signal(SignalKind::window_change()).context("watching terminal resizes")?;
    let mut stdout = tokio::io::stdout();
    let mut io = Io {
        input_open: true,
        pending: None,
        last_output: tokio::time::Instant::now(),
        eots: if tty { MAX_EOTS } else { 0 },
    };
    loop {
        tracker.reconnected();
        let end = pump(
            ws,
            &mut tracker,
            &mut io,
            &mut input,
            &mut winch,
            &mut stdout,
        )
        .await?;
        let why = match end {
            End::Exit => return Ok(0),
            End::Fatal(why) => {
                drop(raw);
                eprintln!("\n{why}");
                return Ok(1);
            }
            End::Lost(why) => why,
        };
        let Some(session) = tracker.session.clone() else {
            drop(raw);
            anyhow::bail!("terminal connection lost: {why}");
        };
        // One quiet line; the replay that follows continues the screen where it stopped.
        eprint!("\r\n[agenthold: {why}; reattaching to terminal session {session}…]\r\n");
        match reattach(client, &agent.id, &tracker, args.reattach_timeout).await {
            Ok(socket) => ws = socket,
            Err(why) => {
                drop(raw);
                eprintln!("\n{why}");
                return Ok(1);
            }
        }
    }
}

/// Dials again until it works, the session is known to be gone, or `patience` runs out.
async fn reattach(
    client: &ApiClient,
    agent: &str,
    tracker: &Tracker,
    patience: Duration,
) -> Result<Terminal, String> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut wait = RETRY_FIRST;
    let session = tracker.session.as_deref().unwrap_or_default();
    loop {
        let (cols, rows) = size();
        match dial(client, agent, cols, rows, tracker).await {
            Ok(ws) => return Ok(ws),
            Err(e) => match e.status() {
                Some(404) => {
                    return Err(format!(
                        "the terminal session ended (the agent slept or was restarted): {e}"
                    ))
                }
                Some(400 | 401 | 403 | 409) => return Err(format!("cannot reattach: {e}")),
                // The server is restarting, or the sandbox is reconnecting: try again.
                _ => tracing::debug!(error = %e, "reattach failed; retrying"),
            },
        }
        if tokio::time::Instant::now() + wait > deadline {
            return Err(format!(
                "gave up reattaching after {}; the session may still be running: \
                 agenthold shell {agent} --session {session}",
                humantime::format_duration(patience)
            ));
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Opens the terminal socket: a new session, or the tracker's session from its offset.
async fn dial(
    client: &ApiClient,
    agent: &str,
    cols: u16,
    rows: u16,
    tracker: &Tracker,
) -> Result<Terminal, ClientError> {
    let mut req = client.terminal_request(agent, cols, rows)?;
    if let Some(session) = &tracker.session {
        let mut url = reqwest::Url::parse(&req.uri().to_string())
            .map_err(|e| ClientError::Transport(format!("terminal URL: {e}")))?;
        url.query_pairs_mut().append_pair("session", session);
        // Only a socket that reached the session has an offset worth resuming from; without
        // one the server sends a redraw of the screen.
        if tracker.has_offset {
            url.query_pairs_mut()
                .append_pair("offset", &tracker.offset.to_string());
        }
        *req.uri_mut() = url
            .as_str()
            .parse()
            .map_err(|e| ClientError::Transport(format!("terminal URL: {e}")))?;
    }
    use tokio_tungstenite::tungstenite::Error as WsError;
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(resp)) => Err(ClientError::from_status(
            resp.status().as_u16(),
            resp.body().as_deref().unwrap_or_default(),
        )),
        Err(e) => Err(ClientError::Transport(format!("terminal connection: {e}"))),
    }
}

/// Input state that outlives one socket.
struct Io {
    input_open: bool,
    /// Keystrokes read but not yet sent when the socket broke: they go to the next one.
    pending: Option<Vec<u8>>,
    last_output: tokio::time::Instant,
    eots: u8,
}

/// Runs one socket until it ends.
async fn pump(
    ws: Terminal,
    tracker: &mut Tracker,
    io: &mut Io,
    input: &mut mpsc::Receiver<Vec<u8>>,
    winch: &mut tokio::signal::unix::Signal,
    stdout: &mut tokio::io::Stdout,
) -> anyhow::Result<End> {
    let (mut sink, mut source) = ws.split();
    if let Some(bytes) = io.pending.take() {
        if sink
            .send(Message::Binary(bytes.clone().into()))
            .await
            .is_err()
        {
            io.pending = Some(bytes);
            return Ok(End::Lost("the connection dropped".into()));
        }
    }
    loop {
        tokio::select! {
            chunk = input.recv(), if io.input_open => match chunk {
                Some(bytes) => {
                    if sink.send(Message::Binary(bytes.clone().into())).await.is_err() {
                        // The socket broke under us: keep the keystrokes for the next one.
                        io.pending = Some(bytes);
                    }
                }
                None => io.input_open = false,
            },
            // A pipe cannot close a pty; the end of piped input becomes the shell's EOF key
            // instead, so `echo cmd | agenthold shell x` finishes.
            _ = tokio::time::sleep_until(io.last_output + QUIET), if !io.input_open && io.eots < MAX_EOTS => {
                io.eots += 1;
                io.last_output = tokio::time::Instant::now();
                let _ = sink.send(Message::Binary(vec![EOT].into())).await;
            }
            _ = winch.recv() => {
                let (cols, rows) = size();
                let msg = serde_json::to_string(&TerminalMessage::Resize { cols, rows }).unwrap_or_default();
                // A failed send means the socket is closing; its close frame tells why.
                let _ = sink.send(Message::Text(msg.into())).await;
            }
            msg = source.next() => match msg {
                Some(Ok(Message::Binary(bytes))) => {
                    io.last_output = tokio::time::Instant::now();
                    tracker.on_binary(bytes.len());
                    write_out(stdout, &bytes).await?;
                }
                Some(Ok(Message::Text(text))) => tracker.on_text(&text),
                Some(Ok(Message::Close(frame))) => {
                    // Sends the close reply tungstenite has queued; the server may not wait for it.
                    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
                    let (code, why) = match &frame {
                        Some(f) => (u16::from(f.code), reason(&f.reason).to_string()),
                        None => (1005, "closed without a reason".to_string()),
                    };
                    return Ok(match code {
                        close::NORMAL => End::Exit,
                        close::SESSION_GONE => End::Fatal(format!("terminal closed: {why}")),
                        // 1001 (the server is going away), 1006, 1011 (the sandbox link broke),
                        // 1012/1013 (restart, try later): the session may well live on.
                        1001 | 1005 | 1006 | 1011..=1014 | close::TOO_MANY_STREAMS => End::Lost(why),
                        _ => End::Fatal(format!("terminal closed: {why} ({code})")),
                    });
                }
                Some(Ok(_)) => {} // ping/pong are answered by tungstenite itself
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "terminal connection dropped");
                    return Ok(End::Lost("the connection dropped".into()));
                }
                None => return Ok(End::Lost("the connection dropped".into())),
            },
        }
    }
}

fn reason(r: &str) -> &str {
    if r.is_empty() {
        "no reason given"
    } else {
        r
    }
}

async fn write_out(out: &mut tokio::io::Stdout, bytes: &[u8]) -> anyhow::Result<()> {
    out.write_all(bytes).await?;
    out.flush().await?;
    Ok(())
}

fn size() -> (u16, u16) {
    if std::io::stdout().is_terminal() {
        match crossterm::terminal::size() {
            Ok((c, r)) if c > 0 && r > 0 => (c, r),
            _ => DEFAULT_SIZE,
        }
    } else {
        DEFAULT_SIZE
    }
}

/// Reads stdin on a plain thread: tokio's stdin blocks runtime shutdown until the next
/// keypress, and this read can never be cancelled. The thread dies with the process.
fn spawn_stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 8192];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    });
    rx
}

/// Raw mode for as long as this lives: restored on return, on error and on unwinding.
struct RawMode;

impl RawMode {
    fn enable() -> anyhow::Result<Self> {
        crossterm::terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
        restore_on_panic();
        Ok(RawMode)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The panic message is printed before unwinding drops the guard; in raw mode it would come
/// out as a staircase, so the hook restores the terminal first.
fn restore_on_panic() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = crossterm::terminal::disable_raw_mode();
            previous(info);
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_count_session_bytes_only() {
        let mut t = Tracker::new(None);
        // The server's "Starting the sandbox…" comes before the session message.
        t.on_binary(25);
        assert_eq!(t.offset, 0);
        t.on_text(r#"{"type":"session","id":"abcdefghijklmnop","offset":0,"cols":80,"rows":24}"#);
        assert_eq!(t.session.as_deref(), Some("abcdefghijklmnop"));
        t.on_binary(10);
        t.on_binary(5);
        t.on_text(r#"{"type":"resize","cols":100,"rows":30}"#);
        assert_eq!(t.offset, 15);
        // A redraw moves the offset to where it was taken and does not count itself.
        t.on_text(r#"{"type":"redraw","offset":4000,"bytes":900}"#);
        t.on_binary(900);
        assert_eq!(t.offset, 4000);
        t.on_binary(7);
        assert_eq!(t.offset, 4007);
        t.on_text(r#"{"type":"exit","code":3}"#);
        assert_eq!(t.exit_code, Some(3));
        // Junk is ignored.
        t.on_text("{not json");
        assert_eq!(t.offset, 4007);
    }

    #[test]
    fn a_reattach_resumes_from_the_servers_offset() {
        let mut t = Tracker::new(None);
        t.on_text(r#"{"type":"session","id":"s","offset":0}"#);
        t.on_binary(100);
        t.reconnected();
        // Bytes before the new session message do not count.
        t.on_binary(3);
        assert_eq!(t.offset, 100);
        t.on_text(r#"{"type":"session","id":"s","offset":100}"#);
        t.on_binary(1);
        assert_eq!((t.session.as_deref(), t.offset), (Some("s"), 101));
    }

    #[test]
    fn reattach_timeouts_parse() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            shell: ShellArgs,
        }
        let c = Cli::try_parse_from([
            "x",
            "agent",
            "--session",
            "abc",
            "--reattach-timeout",
            "90s",
        ])
        .map_err(|e| e.to_string());
        let c = match c {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(c.shell.session.as_deref(), Some("abc"));
        assert_eq!(c.shell.reattach_timeout, Duration::from_secs(90));
    }
}
