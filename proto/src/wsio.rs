//! A WebSocket seen as a byte stream, so yamux can run on it.
//!
//! Generic over any `Stream<Item = io::Result<Bytes>> + Sink<Bytes>`, so the same adapter serves
//! axum's socket on the server and tokio-tungstenite's in sandboxd; each side maps its own
//! message type to and from `Bytes`.
//!
//! Writes are coalesced into one binary message per flush. yamux flushes after *every* frame it
//! writes, even when more frames wait in its queue, so a flush is first put off once (see
//! [`WsIo::poll_flush`]): the frames already queued join the message, which is sent when yamux
//! has nothing more to add. A 1 GiB upload went from one message (and one `send`) per 16 KiB
//! frame to messages of up to [`MAX_MESSAGE`].

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures::io::{AsyncRead, AsyncWrite};
use futures::{Sink, Stream};

/// Flush on our own once this many bytes wait, so one message never grows without bound. The
/// server accepts messages of up to 4 MiB (`MAX_WS_MESSAGE` in the server's tunnel).
pub const MAX_MESSAGE: usize = 256 * 1024;

pub struct WsIo<S> {
    inner: S,
    read_buf: Bytes,
    write_buf: BytesMut,
    /// A flush was put off to let more writes join the message, and none came since.
    flush_deferred: bool,
}

impl<S> WsIo<S> {
    pub fn new(inner: S) -> Self {
        WsIo {
            inner,
            read_buf: Bytes::new(),
            write_buf: BytesMut::new(),
            flush_deferred: false,
        }
    }
}

impl<S> WsIo<S>
where
    S: Sink<Bytes, Error = io::Error> + Unpin,
{
    fn poll_send_buffered(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        ready!(Pin::new(&mut self.inner).poll_ready(cx))?;
        let msg = self.write_buf.split().freeze();
        Pin::new(&mut self.inner).start_send(msg)?;
        Poll::Ready(Ok(()))
    }
}

impl<S> AsyncRead for WsIo<S>
where
    S: Stream<Item = io::Result<Bytes>> + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        while self.read_buf.is_empty() {
            match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                Some(Ok(b)) => self.read_buf = b,
                Some(Err(e)) => return Poll::Ready(Err(e)),
                None => return Poll::Ready(Ok(0)),
            }
        }
        let n = buf.len().min(self.read_buf.len());
        buf[..n].copy_from_slice(&self.read_buf[..n]);
        self.read_buf.advance(n);
        Poll::Ready(Ok(n))
    }
}

impl<S> AsyncWrite for WsIo<S>
where
    S: Sink<Bytes, Error = io::Error> + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.write_buf.len() >= MAX_MESSAGE {
            ready!(self.poll_send_buffered(cx))?;
        }
        self.write_buf.extend_from_slice(buf);
        self.flush_deferred = false;
        Poll::Ready(Ok(buf.len()))
    }

    /// Sends what is buffered as one message, but only once the writer has stopped adding to it:
    /// the first flush after a write wakes the task and returns `Pending`, so the writer's loop
    /// (yamux ignores a pending flush and goes on) can add the frames it already has; the flush
    /// that finds nothing new since sends. No timer: a lone frame costs one extra poll.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.write_buf.is_empty() && !self.flush_deferred {
            self.flush_deferred = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(self.poll_send_buffered(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_buffered(cx))?;
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Maps tokio-tungstenite's socket (used by sandboxd and by tests) to the byte stream shape.
pub fn tungstenite_bytes<T>(
    ws: tokio_tungstenite::WebSocketStream<T>,
) -> impl Stream<Item = io::Result<Bytes>> + Sink<Bytes, Error = io::Error> + Unpin + Send
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let ws = ws
        .sink_map_err(io::Error::other)
        .with(|b: Bytes| futures::future::ready(Ok::<_, io::Error>(Message::Binary(b))));
    ws.filter_map(|m| {
        futures::future::ready(match m {
            Ok(Message::Binary(b)) => Some(Ok(b)),
            Ok(Message::Close(_)) => Some(Err(io::Error::from(io::ErrorKind::ConnectionAborted))),
            Ok(Message::Text(_)) => Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "text message on the tunnel",
            ))),
            Ok(_) => None,
            Err(e) => Some(Err(io::Error::other(e))),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{AsyncReadExt, AsyncWriteExt, SinkExt, StreamExt};

    #[tokio::test]
    async fn writes_are_coalesced_until_flush() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded::<Bytes>();
        let sink = tx.sink_map_err(io::Error::other);
        let stream = futures::stream::empty::<io::Result<Bytes>>();
        let mut io = WsIo::new(Combined { sink, stream });
        io.write_all(b"ab").await.unwrap();
        io.write_all(b"cd").await.unwrap();
        io.flush().await.unwrap();
        assert_eq!(rx.next().await.unwrap(), Bytes::from_static(b"abcd"));
    }

    /// Counts the wake-ups a poll asked for.
    struct CountWakes(std::sync::atomic::AtomicUsize);
    impl futures::task::ArcWake for CountWakes {
        fn wake_by_ref(arc_self: &std::sync::Arc<Self>) {
            arc_self
                .0
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// yamux writes a frame and flushes, frame after frame: the frames written before a put-off
    /// flush is polled again travel in one message.
    #[test]
    fn a_flush_is_put_off_once_so_queued_frames_join_the_message() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded::<Bytes>();
        let mut io = WsIo::new(Combined {
            sink: tx.sink_map_err(io::Error::other),
            stream: futures::stream::empty::<io::Result<Bytes>>(),
        });
        let wakes = std::sync::Arc::new(CountWakes(Default::default()));
        let waker = futures::task::waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut io = Pin::new(&mut io);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::Relaxed);

        assert!(matches!(
            io.as_mut().poll_write(&mut cx, b"frame1"),
            Poll::Ready(Ok(6))
        ));
        assert!(io.as_mut().poll_flush(&mut cx).is_pending());
        assert_eq!(woken(), 1, "a put-off flush must ask to be polled again");
        assert!(rx.try_recv().is_err(), "sent before the writer was done");
        assert!(io.as_mut().poll_write(&mut cx, b"frame2").is_ready());
        assert!(io.as_mut().poll_flush(&mut cx).is_pending());
        // Nothing new since: this flush sends.
        assert!(matches!(
            io.as_mut().poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"frame1frame2"));
        // With nothing buffered a flush is immediate, and asks for no extra poll.
        assert!(matches!(
            io.as_mut().poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(woken(), 2);
    }

    /// However much is written between flushes, a message stays within the limit the server
    /// accepts (`MAX_MESSAGE` plus one write).
    #[tokio::test]
    async fn messages_stay_within_the_limit() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Bytes>();
        let mut io = WsIo::new(Combined {
            sink: tx.sink_map_err(io::Error::other),
            stream: futures::stream::empty::<io::Result<Bytes>>(),
        });
        let frame = vec![7u8; crate::mux::SPLIT_SEND_SIZE];
        for _ in 0..40 {
            io.write_all(&frame).await.unwrap();
        }
        io.close().await.unwrap();
        let sizes: Vec<usize> = rx.map(|m| m.len()).collect().await;
        assert_eq!(sizes.iter().sum::<usize>(), 40 * frame.len());
        assert!(sizes.len() > 1, "one message of {} bytes", sizes[0]);
        assert!(
            sizes
                .iter()
                .all(|&n| n <= MAX_MESSAGE + crate::mux::SPLIT_SEND_SIZE),
            "{sizes:?}"
        );
    }

    #[tokio::test]
    async fn reads_span_messages() {
        let msgs = vec![
            Ok(Bytes::from_static(b"hel")),
            Ok(Bytes::from_static(b"lo")),
        ];
        let (tx, _rx) = futures::channel::mpsc::unbounded::<Bytes>();
        let mut io = WsIo::new(Combined {
            sink: tx.sink_map_err(io::Error::other),
            stream: futures::stream::iter(msgs),
        });
        let mut out = String::new();
        io.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello");
    }

    struct Combined<K, T> {
        sink: K,
        stream: T,
    }
    impl<K: Unpin, T: Stream + Unpin> Stream for Combined<K, T> {
        type Item = T::Item;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
            Pin::new(&mut self.stream).poll_next(cx)
        }
    }
    impl<K: Sink<Bytes> + Unpin, T: Unpin> Sink<Bytes> for Combined<K, T> {
        type Error = K::Error;
        fn poll_ready(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), K::Error>> {
            Pin::new(&mut self.sink).poll_ready(cx)
        }
        fn start_send(mut self: Pin<&mut Self>, item: Bytes) -> Result<(), K::Error> {
            Pin::new(&mut self.sink).start_send(item)
        }
        fn poll_flush(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), K::Error>> {
            Pin::new(&mut self.sink).poll_flush(cx)
        }
        fn poll_close(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), K::Error>> {
            Pin::new(&mut self.sink).poll_close(cx)
        }
    }
}
