//! `agenthold shell AGENT`: the agent's terminal over a WebSocket, in our own terminal.

use std::io::{IsTerminal, Read};
use std::time::Duration;

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use super::client::ApiClient;

/// What a terminal is assumed to be when ours is not one (a pipe in a test).
const DEFAULT_SIZE: (u16, u16) = (80, 24);
/// Ctrl-D: at an empty prompt the shell reads it as end of input and exits.
const EOT: u8 = 0x04;
/// After piped input ends, Ctrl-D is typed only once the screen has been still this long:
/// sent earlier, it lands before the shell has set its terminal up and is lost.
const QUIET: Duration = Duration::from_millis(500);
/// Enough Ctrl-Ds to leave a shell and a program in it that was reading input.
const MAX_EOTS: u8 = 3;

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ShellArgs {
    /// Agent id or name
    pub agent: String,
}

pub(super) async fn run(client: &ApiClient, args: ShellArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    let tty = std::io::stdin().is_terminal();
    let (cols, rows) = size();
    let ws = client.connect_terminal(&agent.id, cols, rows).await?;
    let (mut sink, mut source) = ws.split();

    let raw = if tty { Some(RawMode::enable()?) } else { None };
    let mut input = spawn_stdin_reader();
    let mut winch = signal(SignalKind::window_change()).context("watching terminal resizes")?;
    let mut stdout = tokio::io::stdout();
    // Sending stops at our end of input or when the socket refuses; receiving goes on
    // until the server closes, so no output is lost.
    let mut input_open = true;
    let mut last_output = tokio::time::Instant::now();
    let mut eots: u8 = if tty { MAX_EOTS } else { 0 };

    loop {
        tokio::select! {
            chunk = input.recv(), if input_open => match chunk {
                Some(bytes) => {
                    input_open = sink.send(Message::Binary(bytes.into())).await.is_ok();
                }
                None => input_open = false,
            },
            // A pipe cannot close a pty; the end of piped input becomes the shell's EOF key
            // instead, so `echo cmd | agenthold shell x` finishes.
            _ = tokio::time::sleep_until(last_output + QUIET), if !input_open && eots < MAX_EOTS => {
                eots += 1;
                last_output = tokio::time::Instant::now();
                let _ = sink.send(Message::Binary(vec![EOT].into())).await;
            }
            _ = winch.recv() => {
                let (cols, rows) = size();
                let msg = serde_json::json!({"type": "resize", "cols": cols, "rows": rows});
                // A failed send means the socket is closing; its close frame tells why.
                let _ = sink.send(Message::Text(msg.to_string().into())).await;
            }
            msg = source.next() => match msg {
                Some(Ok(Message::Binary(bytes))) => {
                    last_output = tokio::time::Instant::now();
                    write_out(&mut stdout, &bytes).await?;
                }
                Some(Ok(Message::Text(text))) => {
                    last_output = tokio::time::Instant::now();
                    write_out(&mut stdout, text.as_bytes()).await?;
                }
                Some(Ok(Message::Close(frame))) => {
                    drop(raw);
                    // Sends the close reply tungstenite has queued; the server may not wait for it.
                    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
                    return Ok(match frame {
                        Some(f) if f.code != CloseCode::Normal => {
                            eprintln!("\nterminal closed: {} ({})", reason(&f.reason), u16::from(f.code));
                            1
                        }
                        _ => 0,
                    });
                }
                Some(Ok(_)) => {} // ping/pong are answered by tungstenite itself
                Some(Err(e)) => {
                    drop(raw);
                    anyhow::bail!("terminal connection lost: {e}");
                }
                None => {
                    drop(raw);
                    anyhow::bail!("terminal connection lost");
                }
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
