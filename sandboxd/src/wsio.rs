//! A WebSocket seen as a byte stream, so yamux can run on it.
//!
//! Generic over any `Stream<Item = io::Result<Bytes>> + Sink<Bytes>`, so the same adapter serves
//! axum's socket on the server and tokio-tungstenite's in sandboxd; each side maps its own
//! message type to and from `Bytes`. Writes are coalesced until a flush, which yamux issues after
//! every frame batch, so one binary message carries many small yamux frames.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures::io::{AsyncRead, AsyncWrite};
use futures::{Sink, Stream};

/// Flush on our own once this many bytes wait, so one message never grows without bound.
const MAX_MESSAGE: usize = 256 * 1024;

pub struct WsIo<S> {
    inner: S,
    read_buf: Bytes,
    write_buf: BytesMut,
}

impl<S> WsIo<S> {
    pub fn new(inner: S) -> Self {
        WsIo {
            inner,
            read_buf: Bytes::new(),
            write_buf: BytesMut::new(),
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
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
