//! Splits a channel stream into read and write halves that can still tell a reset from a
//! clean end.
//!
//! yamux reports both a peer's FIN and its RST as end-of-file; only the stream's state tells
//! them apart, and `tokio::io::split` hides the stream. `fs.write` must not commit a file the
//! peer abandoned, and `exec` must kill a command whose caller went away.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use agenthold_proto::mux::MuxStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// True when the stream was reset (or its session died) rather than closed cleanly by the peer.
/// Only meaningful once a read has returned end-of-file and before we close our own side:
/// a FIN from the peer leaves the stream half-open until then.
pub fn was_reset(stream: &MuxStream) -> bool {
    stream.get_ref().is_closed()
}

type Shared = Arc<Mutex<MuxStream>>;

fn lock(s: &Shared) -> MutexGuard<'_, MuxStream> {
    // The guarded stream has no invariant a panicking poll could break.
    s.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct ReadHalf(Shared);
pub struct WriteHalf(Shared);

/// Answers [`was_reset`] for a split stream.
#[derive(Clone)]
pub struct ResetProbe(Shared);

pub fn split(stream: MuxStream) -> (ReadHalf, WriteHalf, ResetProbe) {
    let shared = Arc::new(Mutex::new(stream));
    (
        ReadHalf(shared.clone()),
        WriteHalf(shared.clone()),
        ResetProbe(shared),
    )
}

impl ResetProbe {
    pub fn was_reset(&self) -> bool {
        was_reset(&lock(&self.0))
    }
}

// The lock is held only for one non-blocking poll; yamux keeps separate wakers for reading and
// writing, so the halves can be polled from different tasks.
impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.0)).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *lock(&self.0)).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.0)).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.0)).poll_shutdown(cx)
    }
}
