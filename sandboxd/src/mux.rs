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

/// Streams one session may have open at once.
pub const MAX_STREAMS: usize = 256;

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

pub fn config() -> yamux::Config {
    let mut cfg = yamux::Config::default();
    cfg.set_max_num_streams(MAX_STREAMS);
    cfg.set_max_connection_receive_window(Some(MAX_STREAMS * 256 * 1024));
    cfg
}

/// Starts the driver task for a session on `io`.
pub fn spawn<T>(io: T, mode: Mode) -> Session
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (open_tx, open_rx) = mpsc::unbounded_channel();
    let (in_tx, in_rx) = mpsc::unbounded_channel();
    let conn = yamux::Connection::new(io, config(), mode);
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

    #[tokio::test]
    async fn open_fails_once_the_peer_is_gone() {
        let (a, b) = tokio::io::duplex(1024);
        let client = spawn(a.compat(), Mode::Client);
        drop(b);
        let _ = client.driver.await;
        assert!(client.handle.open().await.is_err());
    }
}
