//! Everything written to stdout goes through one writer task, so lines never interleave and the
//! process exits only after the lines queued before the exit are out.

use std::convert::Infallible;

use serde::Serialize;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use crate::wire;

/// Lines waiting for the writer. Bounded: a turn that floods the client waits for the client to
/// read instead of growing this queue without limit.
const QUEUE_LINES: usize = 256;

enum Outgoing {
    Line(String),
    /// Write everything queued before, then end the process with this code.
    Exit(i32),
}

#[derive(Clone)]
pub struct Outbox {
    queue: mpsc::Sender<Outgoing>,
}

impl Outbox {
    /// Starts the writer task on the current `LocalSet`.
    pub fn start(output: impl AsyncWrite + Unpin + 'static) -> Outbox {
        let (queue, lines) = mpsc::channel(QUEUE_LINES);
        tokio::task::spawn_local(write_lines(BufWriter::new(output), lines));
        Outbox { queue }
    }

    /// Sends one JSON-RPC message. One that cannot be encoded is logged and dropped: it would be
    /// a bug here, and the client then sees a missing message rather than half a line.
    pub async fn send<M: Serialize>(&self, message: M) {
        match wire::encode(message) {
            Ok(line) => self.send_line(line).await,
            Err(error) => crate::log!("dropped a message that did not encode: {error}"),
        }
    }

    /// Sends a line as it is, JSON or not (the `garbage` command).
    pub async fn send_line(&self, line: String) {
        // Fails only once the writer has stopped, when the process is on its way out.
        let _ = self.queue.send(Outgoing::Line(line)).await;
    }

    /// Ends the process with `code` once every line queued so far is written.
    pub async fn exit(&self, code: i32) -> Infallible {
        if self.queue.send(Outgoing::Exit(code)).await.is_err() {
            std::process::exit(code);
        }
        std::future::pending().await
    }
}

async fn write_lines(mut output: impl AsyncWrite + Unpin, mut lines: mpsc::Receiver<Outgoing>) {
    while let Some(outgoing) = lines.recv().await {
        let written = match outgoing {
            Outgoing::Line(line) => write_line(&mut output, &line, lines.is_empty()).await,
            Outgoing::Exit(code) => {
                if let Err(error) = output.flush().await {
                    crate::log!("stdout: {error}");
                }
                std::process::exit(code);
            }
        };
        if let Err(error) = written {
            // The client closed our stdout: nothing more can be said to it.
            crate::log!("stdout: {error}; exiting");
            std::process::exit(1);
        }
    }
    // Every sender is gone: nothing more will come.
    let _ = output.flush().await;
}

/// Writes one line; flushes when nothing else is waiting, so a burst goes out in few writes and
/// a lone message goes out at once.
async fn write_line(
    output: &mut (impl AsyncWrite + Unpin),
    line: &str,
    queue_empty: bool,
) -> std::io::Result<()> {
    output.write_all(line.as_bytes()).await?;
    output.write_all(b"\n").await?;
    if queue_empty {
        output.flush().await?;
    }
    Ok(())
}
