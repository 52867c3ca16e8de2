//! One command tied to its caller (`exec`): its stdin sent, its output as it comes or collected.

use agenthold_proto::{self as proto, ExecExit, Frame, FrameCodec, ProtoError};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::ReadHalf;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::{ConnError, SandboxConn};
use crate::activity::{Use, UseGuard};
use crate::launch::Launch;
use crate::tunnel::registry::LinkStream;

/// One piece of a running command's output, in order; the exit comes last.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecPiece {
    Stdout(Bytes),
    Stderr(Bytes),
    Exit(ExecExit),
}

/// A command's whole output and how it ended.
#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: ExecExit,
}

/// A running command. Dropping it ends the stream, which kills the command; while it lives,
/// the agent counts as in use.
pub struct ExecRun {
    frames: FramedRead<ReadHalf<LinkStream>, FrameCodec>,
    exited: bool,
    _feeder: AbortOnDrop,
    _hold: UseGuard,
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<(), ProtoError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ExecRun {
    /// The next piece; `None` after the exit. A stream that ends before the exit gives
    /// [`ConnError::Lost`].
    pub async fn next(&mut self) -> Option<Result<ExecPiece, ConnError>> {
        if self.exited {
            return None;
        }
        loop {
            let piece = match self.frames.next().await {
                Some(Ok(Frame::Stdout(b))) => ExecPiece::Stdout(b),
                Some(Ok(Frame::Stderr(b))) => ExecPiece::Stderr(b),
                Some(Ok(Frame::ExecExit(exit))) => {
                    self.exited = true;
                    ExecPiece::Exit(exit)
                }
                // Frames of other channels mean nothing here.
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    self.exited = true;
                    return Some(Err(ConnError::Lost));
                }
            };
            return Some(Ok(piece));
        }
    }

    /// Waits for the exit, keeping all the output.
    pub async fn collect(mut self) -> Result<ExecOutput, ConnError> {
        let mut out = ExecOutput::default();
        while let Some(piece) = self.next().await {
            match piece? {
                ExecPiece::Stdout(b) => out.stdout.extend_from_slice(&b),
                ExecPiece::Stderr(b) => out.stderr.extend_from_slice(&b),
                ExecPiece::Exit(exit) => {
                    out.exit = exit;
                    return Ok(out);
                }
            }
        }
        Err(ConnError::Lost)
    }
}

impl SandboxConn {
    /// Runs `launch` with `stdin` as its whole input.
    pub async fn exec(&self, launch: Launch, stdin: Vec<u8>) -> Result<ExecRun, ConnError> {
        let hold = self.activity.hold(&self.id, Use::Exec);
        let (stream, _) = self.open(launch.into_request(&self.boot)).await?;
        let (rd, wr) = tokio::io::split(stream);
        // Stdin goes in its own task so a command that prints before it reads cannot deadlock
        // the caller.
        let feeder = tokio::spawn(async move {
            let mut sink = FramedWrite::new(wr, FrameCodec::default());
            for chunk in stdin.chunks(proto::DATA_CHUNK) {
                sink.send(Frame::Data(Bytes::copy_from_slice(chunk)))
                    .await?;
            }
            sink.send(Frame::StdinEof).await?;
            // Keep the write half open: dropping it would reset the stream and kill the command.
            futures::future::pending::<()>().await;
            Ok::<_, ProtoError>(())
        });
        Ok(ExecRun {
            frames: FramedRead::new(rd, FrameCodec::default()),
            exited: false,
            _feeder: AbortOnDrop(feeder),
            _hold: hold,
        })
    }
}
