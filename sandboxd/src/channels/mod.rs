//! One module per channel, and what they share: replies and a frame writer task.

pub mod activity;
pub mod code;
pub mod exec;
pub mod fs;
pub mod ports;
pub mod process;
pub mod terminal;

use agenthold_proto::{self as proto, ChannelError, Frame, FrameCodec, ProtoError, Reply};
use futures::SinkExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::FramedWrite;

/// Sends a reply and logs instead of failing: the peer may already be gone.
pub(crate) async fn reply<W: AsyncWrite + Unpin>(w: &mut W, reply: &Reply) -> bool {
    match proto::write_message(w, reply).await {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "cannot send a reply");
            false
        }
    }
}

/// Sends an error reply and closes our side.
pub(crate) async fn refuse<W: AsyncWrite + Unpin>(mut w: W, err: ChannelError) {
    if reply(&mut w, &Reply::Error(err)).await {
        let _ = w.shutdown().await;
    }
}

/// Frames queued for one stream; the queue is bounded so a slow peer slows the producers.
pub(crate) type FrameTx = mpsc::Sender<Frame>;

/// Starts a task that writes queued frames in order and closes the stream once every sender is
/// gone. A failed write ends it early, which senders see as a closed queue: the peer left.
pub(crate) fn frame_writer<W>(w: W) -> (FrameTx, tokio::task::JoinHandle<Result<(), ProtoError>>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Frame>(16);
    let task = tokio::spawn(async move {
        let mut out = FramedWrite::new(w, FrameCodec::default());
        while let Some(frame) = rx.recv().await {
            out.send(frame).await?;
        }
        out.get_mut().shutdown().await?;
        Ok(())
    });
    (tx, task)
}
