//! The accept loop of every listener (the API on `server.listen`, the tunnel on
//! `sandbox.tunnel_listen`, the egress proxy on `sandbox.egress.port`), in place of
//! `axum::serve`.
//!
//! `axum::serve` gives a client unlimited time to send its headers and accepts until the process
//! runs out of file handles, so a few thousand connections that trickle a header line now and
//! then (a slowloris, from a sandbox or from anyone who reaches the API) take the whole control
//! plane down. Here every connection is counted against its listener's cap and its source
//! address's cap before it is served, the headers of each request must arrive within
//! `server.header_timeout`, and each listener has its own caps, so a flood on one leaves the
//! other its share of file handles.

mod caps;
mod fds;
mod throttle;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

pub use caps::{source_key, ConnectionGuard, ConnectionLimiter, Refused};
pub use fds::{fit_to_budget, raise_nofile_limit, FD_RESERVE};
pub use throttle::ThrottledLog;

/// At most one log line this often about refused connections or failing accepts: during a
/// flood, a line per connection would be a flood of its own.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// First and longest pause after an accept fails for want of file handles or memory. Retrying
/// at once would spin a core while nothing frees up.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// What a refused HTTP client reads before the connection closes. Written without waiting (a
/// client that does not read gets nothing), so a refusal costs no task and no buffer.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
    content-type: text/plain\r\nretry-after: 1\r\ncontent-length: 21\r\n\r\n\
    too many connections\n";

/// A counted connection: the guard lives as long as the socket, also after an upgrade to a
/// WebSocket hands the socket over from hyper to the handler.
struct Counted {
    io: TcpStream,
    _guard: ConnectionGuard,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Errors that end only the one connection being accepted; anything else (no file handles, no
/// memory) would fail again at once, so the loop waits before the next accept.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Accepts on `listener` until `shutdown` resolves, counting every connection against
/// `limiter` before anything else is done for it: one refused is answered with `refusal` (written
/// without waiting, so it costs no task and no buffer) and closed at once; one admitted is handed
/// to `admitted` with the guard that holds its place. Shared by every listener of the server, so
/// that the same caps, the same budget and the same throttled log apply to each.
pub async fn accept_loop(
    listener: TcpListener,
    limiter: Arc<ConnectionLimiter>,
    refusal: impl Fn(Refused) -> Bytes,
    shutdown: impl Future<Output = ()>,
    mut admitted: impl FnMut(TcpStream, SocketAddr, ConnectionGuard),
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = MIN_BACKOFF;
    let mut last_error_line: Option<Instant> = None;
    let mut unreported_errors = 0u64;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                backoff = MIN_BACKOFF;
                a
            }
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                unreported_errors += 1;
                let now = Instant::now();
                if last_error_line.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) {
                    tracing::error!(
                        listener = limiter.name,
                        failures = unreported_errors,
                        open = limiter.open(),
                        "accept failed: {e}; pausing accepts (at most one such line per {}s)",
                        LOG_EVERY.as_secs()
                    );
                    last_error_line = Some(now);
                    unreported_errors = 0;
                }
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        match limiter.admit(peer.ip()) {
            Ok(guard) => admitted(tcp, peer, guard),
            Err(why) => {
                limiter.log_refusal(peer, why);
                // Accepted and closed rather than left in the backlog: the backlog is shared
                // with everyone else, and a client told at once can back off.
                answer_and_close(tcp, &refusal(why));
            }
        }
    }
}

/// What [`answer_and_close`] reads of a refused connection's request, at most.
const MAX_DRAIN: usize = 16 * 1024;

/// Answers a connection that is refused and closes it, without waiting for anything: what its
/// client already sent is read first (a socket closed with unread bytes is reset, and the client
/// might never see the answer), the answer is written if the socket takes it now, and the
/// socket is closed. A refusal so costs no task, no timer and no file handle past this call.
pub fn answer_and_close(tcp: TcpStream, answer: &[u8]) {
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < MAX_DRAIN {
        match tcp.try_read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    let _ = tcp.try_write(answer);
    // Dropped with nothing unread: closed with a FIN after the answer, not reset.
    drop(tcp);
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, asks every
/// connection to finish its request and waits for them (upgraded WebSockets are on their own by
/// then). Handlers see the peer as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    limiter: Arc<ConnectionLimiter>,
    header_timeout: Duration,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    accept_loop(
        listener,
        limiter,
        |_| Bytes::from_static(REFUSAL),
        shutdown,
        |tcp, peer, guard| {
            // Terminal keystrokes and exec round trips are small writes: Nagle's algorithm
            // would hold them back for a delayed ACK (tens of milliseconds).
            let _ = tcp.set_nodelay(true);
            connections.spawn(serve_connection(
                Counted {
                    io: tcp,
                    _guard: guard,
                },
                peer,
                header_timeout,
                app.clone(),
                closing.clone(),
            ));
        },
    )
    .await;
    closing.cancel();
    connections.close();
    connections.wait().await;
}

async fn serve_connection(
    io: Counted,
    peer: SocketAddr,
    header_timeout: Duration,
    app: Router,
    closing: CancellationToken,
) {
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().oneshot(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The header timer also runs while a kept-alive connection waits for its next request, so
    // it is the idle timeout too.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = closing.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        // Timeouts, resets and malformed requests: the client's business, not the operator's.
        tracing::debug!(%peer, "connection ended: {e}");
    }
}

/// How often [`return_memory_after_floods`] looks, and how many connections must have closed
/// since the last look (a flood, not everyday traffic) before it trims.
const TRIM_EVERY: Duration = Duration::from_secs(10);
const TRIM_AFTER_CLOSED: usize = 256;

/// Gives the memory of closed connections back to the system after a flood. Each connection's
/// buffers are freed when it closes, but glibc keeps freed memory in its arenas, so without
/// this a flood of a few thousand connections left the server's RSS 70-100 MB higher for good.
pub async fn return_memory_after_floods(limiters: Vec<Arc<ConnectionLimiter>>) {
    let mut every = tokio::time::interval(TRIM_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let closed: usize = limiters
            .iter()
            .map(|l| {
                let (peak, open) = l.take_peak();
                peak.saturating_sub(open)
            })
            .sum();
        if closed >= TRIM_AFTER_CLOSED {
            // Trimming walks every arena: milliseconds, kept off the runtime's threads.
            let _ = tokio::task::spawn_blocking(trim_heap).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it takes no pointers and
    // is thread-safe (it locks each arena while it works on it).
    let trimmed = unsafe { libc::malloc_trim(0) };
    tracing::debug!(trimmed, "returned free heap memory to the system");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}
