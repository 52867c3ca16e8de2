//! A process's output from a byte offset: the pieces as they come, then how it stands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agenthold_proto::{Frame, FrameCodec, ProcessInfo, ProcessOutput};
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::codec::FramedRead;

use super::process::{checked, ProcessName};
use super::{ConnError, SandboxConn};
use crate::tunnel::registry::LinkStream;

/// One piece of a process's output, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputPiece {
    Stdout(Bytes),
    Stderr(Bytes),
    /// The output from `from` to `to` had left the buffer; what follows starts at `to`.
    Gap {
        from: u64,
        to: u64,
    },
    /// The last piece: the process as it stood once everything up to its end was sent, or
    /// (without `follow`) still running after the output so far.
    End(ProcessInfo),
}

/// The pieces of one `output` call, or of an attach (see `attach.rs`).
pub struct OutputReader<R = LinkStream> {
    frames: FramedRead<R, FrameCodec>,
    ended: bool,
    /// Set when sandboxd says, on an attach, that the process's stdin is not open.
    stdin_closed: Arc<AtomicBool>,
}

impl<R: AsyncRead + Unpin> OutputReader<R> {
    pub(super) fn new(stream: R, stdin_closed: Arc<AtomicBool>) -> OutputReader<R> {
        OutputReader {
            frames: FramedRead::new(stream, FrameCodec::default()),
            ended: false,
            stdin_closed,
        }
    }

    /// The next piece; `None` after the end. A stream cut before its end gives
    /// [`ConnError::Lost`], an end no sandboxd sends [`ConnError::MalformedReport`].
    pub async fn next(&mut self) -> Option<Result<OutputPiece, ConnError>> {
        if self.ended {
            return None;
        }
        loop {
            let piece = match self.frames.next().await {
                Some(Ok(Frame::Stdout(b))) => OutputPiece::Stdout(b),
                Some(Ok(Frame::Stderr(b))) => OutputPiece::Stderr(b),
                Some(Ok(Frame::Gap { from, to })) => OutputPiece::Gap { from, to },
                Some(Ok(Frame::Process(info))) => {
                    self.ended = true;
                    return Some(checked(*info).map(OutputPiece::End));
                }
                Some(Ok(Frame::StdinEof)) => {
                    self.stdin_closed.store(true, Ordering::Relaxed);
                    continue;
                }
                // Frames of other channels mean nothing here.
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    self.ended = true;
                    return Some(Err(ConnError::Lost));
                }
            };
            return Some(Ok(piece));
        }
    }
}

impl SandboxConn {
    /// The process's output from `offset` (at most the output so far): with `follow`, what
    /// comes after it too, until the process ends.
    pub async fn output(
        &self,
        name: &ProcessName,
        offset: u64,
        follow: bool,
    ) -> Result<OutputReader, ConnError> {
        let header = ProcessOutput {
            process: name.as_str().to_string(),
            offset,
            follow,
        };
        let (stream, _) = self.open(header).await?;
        Ok(OutputReader::new(stream, Arc::default()))
    }
}
