//! Talking to a process for as long as it runs: its stdin and its output on one
//! `process.attach` stream, instead of one stream per stdin write beside an output stream.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agenthold_proto::{self as proto, Frame, FrameCodec, ProcessAttach, ProcessInfo};
use bytes::Bytes;
use futures::SinkExt;
use tokio::io::{ReadHalf, WriteHalf};
use tokio_util::codec::FramedWrite;

use super::output::OutputReader;
use super::process::{checked, ProcessName};
use super::{ConnError, SandboxConn};
use crate::tunnel::registry::LinkStream;

/// A process attached to: as it stood, then its output and its stdin. Dropping both halves
/// leaves it running.
pub struct Attached {
    pub info: ProcessInfo,
    pub output: AttachedOutput,
    pub stdin: StdinWriter,
}

/// The output of a process attached to.
pub type AttachedOutput = OutputReader<ReadHalf<LinkStream>>;

/// The process's stdin, on an attach.
pub struct StdinWriter {
    frames: FramedWrite<WriteHalf<LinkStream>, FrameCodec>,
    /// sandboxd said the stdin is not open (seen by the output's reader).
    closed: Arc<AtomicBool>,
}

impl StdinWriter {
    /// Sends `bytes` to the process's stdin, after what was sent before. Once sandboxd has
    /// said (as the output was read) that its stdin is not open, refuses with
    /// [`ConnError::StdinClosed`].
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), ConnError> {
        for chunk in bytes.chunks(proto::DATA_CHUNK) {
            self.send(Frame::Data(Bytes::copy_from_slice(chunk)))
                .await?;
        }
        Ok(())
    }

    /// Closes the process's stdin once what was sent before has been written.
    pub async fn close(&mut self) -> Result<(), ConnError> {
        self.send(Frame::StdinEof).await
    }

    async fn send(&mut self, frame: Frame) -> Result<(), ConnError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(ConnError::StdinClosed);
        }
        self.frames.send(frame).await.map_err(|_| ConnError::Lost)
    }
}

impl SandboxConn {
    /// Attaches to the process: its output from `offset` (at most the output so far) until it
    /// ends, and its stdin. A sandboxd older than the `process.attach` channel refuses it
    /// ([`ConnError::Refused`] with `ErrorCode::UnknownChannel`); `output` and `write_stdin`
    /// serve every sandboxd.
    pub async fn attach(&self, name: &ProcessName, offset: u64) -> Result<Attached, ConnError> {
        let header = ProcessAttach {
            process: name.as_str().to_string(),
            offset,
        };
        let (stream, info) = self.open(header).await?;
        let (rd, wr) = tokio::io::split(stream);
        let closed = Arc::new(AtomicBool::new(false));
        Ok(Attached {
            info: checked(info)?,
            output: OutputReader::new(rd, closed.clone()),
            stdin: StdinWriter {
                frames: FramedWrite::new(wr, FrameCodec::default()),
                closed,
            },
        })
    }
}
