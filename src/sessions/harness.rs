//! The harness's process in the sandbox, as a session's runner talks to it: started as a
//! background process of sandboxd with its stdin kept (so it survives tunnel drops and server
//! restarts), attached to by byte offset, its stdout cut into lines by a reader task.

use agenthold_proto::{ErrorCode, ProcessInfo};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use super::lines::Line;
use super::lines::Lines;
use crate::config::HarnessConfig;
use crate::launch::{check_command, Launch, ProcessOptions};
use crate::model::sessions::SessionRecord;
use crate::tunnel::conn::{ConnError, OutputPiece, ProcessName, SandboxConn, StdinWriter};

/// Pieces the reader may have read ahead of the runner: each holds the lines of one frame of
/// output (at most 64 KiB), and a line it completes is at most `sessions.update_max_kb`.
const READ_AHEAD: usize = 8;

/// What the reader saw.
#[derive(Debug)]
pub enum Output {
    /// The lines one piece of stdout completed, in order: whole ones, and over-long ones cut to
    /// their start; each with the offset to read on from once it is handled.
    Lines(Vec<Line>),
    /// Output had left sandboxd's buffer before it was read.
    Gap { from: u64, to: u64 },
    /// The process ended (all of its output was read).
    Exited(ProcessInfo),
    /// The connection to the sandbox broke.
    Lost,
}

/// A running harness process, attached to.
pub struct Harness {
    pub conn: SandboxConn,
    pub process: ProcessName,
    pub stdin: StdinWriter,
    pub output: mpsc::Receiver<Output>,
    reader: JoinHandle<()>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The tag of a session's harness process.
pub fn tag(session: &str) -> String {
    format!("acp-{session}")
}

/// Starts the session's harness in the sandbox: `harness.command` in the session's `cwd`, as
/// the agent account, with the agent's env under the harness's own.
pub async fn start(
    conn: &SandboxConn,
    session: &SessionRecord,
    harness: &HarnessConfig,
    agent: &crate::model::Agent,
) -> Result<ProcessInfo, String> {
    let run = check_command(
        &harness.command,
        Some(&session.cwd),
        Some(&harness.env),
        None,
    )
    .map_err(|e| format!("harness {:?}: {e}", session.harness))?;
    let launch = Launch::new(run, agent).map_err(|e| e.to_string())?;
    let options = ProcessOptions {
        tag: Some(tag(&session.id)),
        stdin: true,
        keep_awake: false,
    };
    match conn.start_process(launch.clone(), options.clone()).await {
        Ok(info) => Ok(info),
        // A process of an earlier run still holds the tag (its record was lost with a crash):
        // it is no one's now.
        Err(ConnError::Refused(e)) if e.code == ErrorCode::Exists => {
            let name = ProcessName::parse(tag(&session.id)).map_err(|e| e.to_string())?;
            let _ = conn.remove_process(&name).await;
            conn.start_process(launch, options)
                .await
                .map_err(|e| format!("starting the harness failed: {e}"))
        }
        Err(e) => Err(format!("starting the harness failed: {e}")),
    }
}

/// Attaches to the harness `process` from `offset`; its stdout lines (at most `max_line`
/// bytes) come through [`Harness::output`].
pub async fn attach(
    conn: SandboxConn,
    process: ProcessName,
    offset: u64,
    max_line: usize,
) -> Result<(Harness, ProcessInfo), ConnError> {
    let attached = conn.attach(&process, offset).await?;
    let info = attached.info.clone();
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    // sandboxd starts at the oldest byte it still has when `offset` has left its buffer.
    let start = offset.max(info.output_start).min(info.output_bytes);
    let reader = tokio::spawn(read(attached.output, start, max_line, tx));
    Ok((
        Harness {
            conn,
            process,
            stdin: attached.stdin,
            output: rx,
            reader,
        },
        info,
    ))
}

async fn read(
    mut output: crate::tunnel::conn::AttachedOutput,
    mut pos: u64,
    max_line: usize,
    tx: mpsc::Sender<Output>,
) {
    let mut lines = Lines::new(max_line);
    let mut cut = Vec::new();
    loop {
        let piece = output.next().await;
        let out = match piece {
            Some(Ok(OutputPiece::Stdout(b))) => {
                lines.feed(&b, pos, &mut cut);
                pos += b.len() as u64;
                if cut.is_empty() {
                    continue;
                }
                Output::Lines(std::mem::take(&mut cut))
            }
            Some(Ok(OutputPiece::Stderr(b))) => {
                pos += b.len() as u64;
                continue;
            }
            Some(Ok(OutputPiece::Gap { from, to })) => {
                lines.reset();
                pos = to;
                Output::Gap { from, to }
            }
            Some(Ok(OutputPiece::End(info))) => Output::Exited(info),
            Some(Err(_)) | None => Output::Lost,
        };
        let last = matches!(out, Output::Exited(_) | Output::Lost);
        if tx.send(out).await.is_err() || last {
            return;
        }
    }
}
