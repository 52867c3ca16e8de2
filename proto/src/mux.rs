//! One yamux session over a byte stream, driven by a single task.
//!
//! yamux's `Connection` must be polled by one owner; everybody else holds a cheap [`MuxHandle`]
//! that asks the driver task for new outbound streams over a channel. Inbound streams are handed
//! out on an unbounded channel so a slow consumer never stalls the session's I/O.

use std::collections::VecDeque;
use std::task::Poll;

use futures::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};

pub use yamux::Mode;

/// A channel's stream, as a tokio `AsyncRead + AsyncWrite`.
pub type MuxStream = Compat<yamux::Stream>;

/// Streams one session may have open at once, counting both directions. Reaching it is fatal
/// in yamux 0.14, not a refused stream: an open past it fails the whole connection, and a peer's
/// SYN past it makes yamux end the connection. So the server keeps the streams it opens well
/// below (`sandbox.max_streams_per_agent`), and sandboxd opens only a few of its own.
pub const MAX_STREAMS: usize = 256;

/// Streams of each session that `sandbox.max_streams_per_agent` may not take: the ones the
/// cap does not count (the server's pings, sandboxd's hello, activity and pings) and the
/// streams one end has let go of that the other still holds while its channel winds down.
/// Pings are exempt from the cap on purpose: they are what keeps the session alive under a
/// flood of other channels.
pub const STREAM_HEADROOM: usize = 32;
/// The most streams the server opens on one session for the API: the largest
/// `sandbox.max_streams_per_agent`.
pub const MAX_STREAMS_PER_AGENT: usize = MAX_STREAMS - STREAM_HEADROOM;

#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    #[error("the tunnel session is closed")]
    Closed,
    #[error("tunnel session: {0}")]
    Yamux(#[from] yamux::ConnectionError),
}

type OpenReply = oneshot::Sender<Result<yamux::Stream, MuxError>>;

/// Opens outbound streams on a running session. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct MuxHandle {
    open_tx: mpsc::UnboundedSender<OpenReply>,
}

impl MuxHandle {
    pub async fn open(&self) -> Result<MuxStream, MuxError> {
        let (tx, rx) = oneshot::channel();
        self.open_tx.send(tx).map_err(|_| MuxError::Closed)?;
        let stream = rx.await.map_err(|_| MuxError::Closed)??;
        Ok(stream.compat())
    }

    /// True once the driver task has ended.
    pub fn is_closed(&self) -> bool {
        self.open_tx.is_closed()
    }
}

/// A running session: the handle to open streams, the inbound streams, and the driver's result.
pub struct Session {
    pub handle: MuxHandle,
    pub inbound: mpsc::UnboundedReceiver<MuxStream>,
    pub driver: tokio::task::JoinHandle<Result<(), MuxError>>,
}

/// Largest yamux data frame we send. yamux's default (16 KiB) made a file transfer pay the
/// per-frame costs (an allocation, a queue hop to the session task, a frame header to parse, a
/// buffer to zero on the receiving side) every 16 KiB; 64 KiB quarters them. yamux accepts
/// frame bodies up to 1 MiB, and a frame never exceeds the credit its receiver granted, so an
/// older sandboxd or server is unaffected. Still small next to a WebSocket message (up to
/// [`crate::wsio::MAX_MESSAGE`]), so a keystroke waits behind little.
pub const SPLIT_SEND_SIZE: usize = 64 * 1024;

/// What the receive windows of one session's streams may grow by, together, beyond yamux's
/// 256 KiB each. yamux doubles a stream's window while its reader keeps up and the sender uses
/// the window up within two round trips. With no room every stream stays at 256 KiB, and an
/// upload waits for a window update every 128 KiB, each a round trip through two processes and
/// several task wake-ups: with 4 MiB of room, 1 GiB uploads ran ~15% faster on the bench
/// machine.
///
/// The room is memory a peer can make us hold: bytes received and not yet read. sandboxd
/// ([`Mode::Client`], it dials) receives uploads and holds one session; 4 MiB did as well as
/// 16 MiB. The server ([`Mode::Server`]) receives downloads, holds a session per agent, and
/// what a download's stream holds is what a slow HTTP client leaves unread: it gets none
/// (downloads already run at twice `docker cp`; 4 MiB of room made them ~10% faster and grew
/// the server's RSS by 6 MiB during one).
pub fn window_room(mode: Mode) -> usize {
    match mode {
        Mode::Client => 4 << 20,
        Mode::Server => 0,
    }
}

pub fn config(mode: Mode) -> yamux::Config {
    let mut cfg = yamux::Config::default();
    cfg.set_max_num_streams(MAX_STREAMS);
    cfg.set_max_connection_receive_window(Some(
        MAX_STREAMS * yamux::DEFAULT_CREDIT as usize + window_room(mode),
    ));
    cfg.set_split_send_size(SPLIT_SEND_SIZE);
    cfg
}

/// Starts the driver task for a session on `io`.
pub fn spawn<T>(io: T, mode: Mode) -> Session
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (open_tx, open_rx) = mpsc::unbounded_channel();
    let (in_tx, in_rx) = mpsc::unbounded_channel();
    let conn = yamux::Connection::new(io, config(mode), mode);
    let driver = tokio::spawn(drive(conn, open_rx, in_tx));
    Session {
        handle: MuxHandle { open_tx },
        inbound: in_rx,
        driver,
    }
}

async fn drive<T>(
    mut conn: yamux::Connection<T>,
    mut open_rx: mpsc::UnboundedReceiver<OpenReply>,
    in_tx: mpsc::UnboundedSender<MuxStream>,
) -> Result<(), MuxError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut pending: VecDeque<OpenReply> = VecDeque::new();
    let mut handles_gone = false;
    let result = futures::future::poll_fn(|cx| {
        while !handles_gone {
            match open_rx.poll_recv(cx) {
                Poll::Ready(Some(reply)) => pending.push_back(reply),
                Poll::Ready(None) => handles_gone = true,
                Poll::Pending => break,
            }
        }
        while !pending.is_empty() {
            match conn.poll_new_outbound(cx) {
                Poll::Ready(Ok(stream)) => {
                    if let Some(reply) = pending.pop_front() {
                        // The asker may have given up; the stream is then dropped (reset).
                        let _ = reply.send(Ok(stream));
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(MuxError::from(e))),
                Poll::Pending => break,
            }
        }
        loop {
            match conn.poll_next_inbound(cx) {
                Poll::Ready(Some(Ok(stream))) => {
                    let _ = in_tx.send(stream.compat());
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(MuxError::from(e))),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    for reply in pending {
        let _ = reply.send(Err(MuxError::Closed));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::compat::TokioAsyncReadCompatExt;

    #[tokio::test]
    async fn streams_flow_both_ways_with_split_halves() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let client = spawn(a.compat(), Mode::Client);
        let mut server = spawn(b.compat(), Mode::Server);

        let echo = tokio::spawn(async move {
            while let Some(s) = server.inbound.recv().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = tokio::io::split(s);
                    tokio::io::copy(&mut r, &mut w).await.unwrap();
                    w.shutdown().await.unwrap();
                });
            }
        });

        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let s = client.handle.open().await.unwrap();
        let (mut r, mut w) = tokio::io::split(s);
        let to_send = payload.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&to_send).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got, payload);
        echo.abort();
    }

    /// What one side of a session wrote, kept for inspection.
    struct Tap<T> {
        inner: T,
        written: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = r {
                self.written.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            r
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_close(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_close(cx)
        }
    }

    /// The body lengths of the yamux data frames in `wire` (12-byte headers: version, type,
    /// flags, stream id, length; only data frames, type 0, carry a body).
    fn data_frames(mut wire: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        while wire.len() >= 12 {
            let len = u32::from_be_bytes([wire[8], wire[9], wire[10], wire[11]]) as usize;
            let body = if wire[1] == 0 { len } else { 0 };
            if wire[1] == 0 && len > 0 {
                out.push(len);
            }
            wire = &wire[(12 + body).min(wire.len())..];
        }
        out
    }

    #[tokio::test]
    async fn data_travels_in_frames_of_up_to_the_split_size() {
        let (a, b) = tokio::io::duplex(1 << 20);
        let written = std::sync::Arc::default();
        let tap = Tap {
            inner: a.compat(),
            written: std::sync::Arc::clone(&written),
        };
        let client = spawn(tap, Mode::Client);
        let mut server = spawn(b.compat(), Mode::Server);
        let reader = tokio::spawn(async move {
            let mut s = server.inbound.recv().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got.len()
        });
        let len = 4 << 20;
        let mut s = client.handle.open().await.unwrap();
        s.write_all(&vec![7u8; len]).await.unwrap();
        s.shutdown().await.unwrap();
        assert_eq!(reader.await.unwrap(), len);

        let frames = data_frames(&written.lock().unwrap());
        assert_eq!(frames.iter().sum::<usize>(), len);
        assert!(frames.iter().all(|&n| n <= SPLIT_SEND_SIZE), "{frames:?}");
        let full = frames.iter().filter(|&&n| n == SPLIT_SEND_SIZE).count();
        assert!(full * 2 >= frames.len(), "mostly small frames: {frames:?}");
    }

    #[test]
    fn both_ends_have_a_valid_config() {
        // yamux asserts the connection window covers every stream's initial window.
        for mode in [Mode::Client, Mode::Server] {
            let _ = config(mode);
        }
        assert!(window_room(Mode::Server) <= window_room(Mode::Client));
    }

    #[tokio::test]
    async fn open_fails_once_the_peer_is_gone() {
        let (a, b) = tokio::io::duplex(1024);
        let client = spawn(a.compat(), Mode::Client);
        drop(b);
        let _ = client.driver.await;
        assert!(client.handle.open().await.is_err());
    }
}
