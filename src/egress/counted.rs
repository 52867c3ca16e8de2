//! A stream that counts the bytes through it each way, readable while it is still open (the
//! close event needs them even when a rule change cuts the connection short).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Default, Debug)]
pub struct Tally {
    /// Written into the stream: toward the destination.
    pub up: AtomicU64,
    /// Read from the stream: from the destination.
    pub down: AtomicU64,
}

impl Tally {
    pub fn get(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
}

pub struct Counted<S> {
    inner: S,
    tally: Arc<Tally>,
}

impl<S> Counted<S> {
    pub fn new(inner: S, tally: Arc<Tally>) -> Counted<S> {
        Counted { inner, tally }
    }

    /// The stream and its tally, for a relay that moves bytes without reading them through
    /// this type (and so counts them itself).
    pub fn parts(&self) -> (&S, &Tally) {
        (&self.inner, &self.tally)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before) as u64;
        self.tally.down.fetch_add(read, Ordering::Relaxed);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.tally.up.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
