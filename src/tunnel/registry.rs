//! The live tunnel session of each agent: at most one, replaced by a newer valid one.
//!
//! Each session also bounds the streams the API may open on it ([`Link::open`]). yamux allows
//! [`agenthold_proto::mux::MAX_STREAMS`] per connection, and in the yamux we use (0.14) going past that
//! on either end ends the whole connection, every other channel of the agent with it. So the
//! server keeps its own opens well below (`sandbox.max_streams_per_agent`) and refuses the
//! excess instead; what is left of yamux's limit is
//! [`agenthold_proto::mux::STREAM_HEADROOM`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use agenthold_proto::mux::{MuxHandle, MuxStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Live {
    conn_id: u64,
    link: Link,
    cancel: CancellationToken,
}

/// Agent id → the session its sandboxd holds.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<HashMap<String, Live>>>,
    /// Bumped at every change, so waiters can re-check.
    version: watch::Sender<u64>,
    /// Streams the API may have open on one session at once.
    max_streams: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("the sandbox did not connect within {0:?}")]
    Timeout(Duration),
    #[error("the sandbox is not connected")]
    NotConnected,
    #[error("the tunnel to the sandbox failed: {0}")]
    Mux(#[from] agenthold_proto::mux::MuxError),
    #[error(
        "the agent has {0} channels open, the most it may have at once \
         (sandbox.max_streams_per_agent); retry later"
    )]
    TooManyStreams(usize),
}

/// An agent's session, as the API uses it: opens streams within the session's cap.
/// Cloning is cheap.
#[derive(Clone, Debug)]
pub struct Link {
    handle: MuxHandle,
    streams: Arc<Semaphore>,
    limit: usize,
}

impl Link {
    fn new(handle: MuxHandle, limit: usize) -> Link {
        Link {
            handle,
            streams: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Opens a stream, or refuses at once when the session has its cap open: waiting for a
    /// free one would only pile the flood up here.
    pub async fn open(&self) -> Result<LinkStream, TunnelError> {
        let permit = Arc::clone(&self.streams)
            .try_acquire_owned()
            .map_err(|_| TunnelError::TooManyStreams(self.limit))?;
        let stream = self.handle.open().await?;
        Ok(LinkStream {
            stream,
            _permit: permit,
        })
    }

    pub fn is_closed(&self) -> bool {
        self.handle.is_closed()
    }
}

/// A stream opened through a [`Link`]; it counts against the session's cap until dropped.
pub struct LinkStream {
    stream: MuxStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for LinkStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LinkStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Registry {
    /// A registry whose sessions each allow `max_streams` API streams at once.
    pub fn new(max_streams: usize) -> Registry {
        Registry {
            inner: Arc::default(),
            version: watch::channel(0).0,
            max_streams,
        }
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `handle` the agent's session, ending the one it replaces. The new session gets a
    /// cap of its own: the streams of the old one die with it.
    pub fn insert(&self, id: &str, conn_id: u64, handle: MuxHandle, cancel: CancellationToken) {
        let old = self.lock().insert(
            id.to_string(),
            Live {
                conn_id,
                link: Link::new(handle, self.max_streams),
                cancel,
            },
        );
        if let Some(old) = old {
            tracing::info!(agent = id, "a new tunnel session replaces the old one");
            old.cancel.cancel();
        }
        self.bump();
    }

    /// Removes the session `conn_id` if it is still the agent's current one.
    pub fn remove_conn(&self, id: &str, conn_id: u64) {
        let mut map = self.lock();
        if map.get(id).is_some_and(|l| l.conn_id == conn_id) {
            map.remove(id);
            drop(map);
            self.bump();
        }
    }

    /// Ends and forgets the agent's session, whichever it is (the sandbox stopped).
    pub fn disconnect(&self, id: &str) {
        let old = self.lock().remove(id);
        if let Some(old) = old {
            old.cancel.cancel();
            self.bump();
        }
    }

    /// Ends every session: the server stops.
    pub fn disconnect_all(&self) {
        let all: Vec<_> = self.lock().drain().map(|(_, l)| l).collect();
        for old in &all {
            old.cancel.cancel();
        }
        if !all.is_empty() {
            self.bump();
        }
    }

    pub fn is_connected(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    pub fn get(&self, id: &str) -> Option<Link> {
        let map = self.lock();
        map.get(id)
            .filter(|l| !l.link.is_closed())
            .map(|l| l.link.clone())
    }

    /// Which connection is the agent's session (each sandboxd connection gets a new number).
    pub fn conn_id(&self, id: &str) -> Option<u64> {
        let map = self.lock();
        map.get(id)
            .filter(|l| !l.link.is_closed())
            .map(|l| l.conn_id)
    }

    pub fn connected_count(&self) -> usize {
        self.lock().len()
    }

    /// Waits until the agent has a session, at most `timeout`.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Link, TunnelError> {
        let mut rx = self.version.subscribe();
        let wait = async {
            loop {
                if let Some(h) = self.get(id) {
                    return Ok(h);
                }
                if rx.changed().await.is_err() {
                    return Err(TunnelError::NotConnected);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| TunnelError::Timeout(timeout))?
    }

    /// Opens a stream to the agent's sandbox.
    pub async fn open(&self, id: &str) -> Result<LinkStream, TunnelError> {
        let link = self.get(id).ok_or(TunnelError::NotConnected)?;
        link.open().await
    }
}
