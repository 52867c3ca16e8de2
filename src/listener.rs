//! The accept loop of both listeners (the API on `server.listen`, the tunnel on
//! `sandbox.tunnel_listen`), in place of `axum::serve`.
//!
//! `axum::serve` gives a client unlimited time to send its headers and accepts until the process
//! runs out of file handles, so a few thousand connections that trickle a header line now and
//! then (a slowloris, from a sandbox or from anyone who reaches the API) take the whole control
//! plane down. Here every connection is counted against its listener's cap and its source
//! address's cap before it is served, the headers of each request must arrive within
//! `server.header_timeout`, and each listener has its own caps, so a flood on one leaves the
//! other its share of file handles.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// At most one log line this often about refused connections or failing accepts: during a
/// flood, a line per connection would be a flood of its own.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// First and longest pause after an accept fails for want of file handles or memory. Retrying
/// at once would spin a core while nothing frees up.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// File handles kept beyond both listeners' caps: the database, the Docker socket, files
/// streamed to and from sandboxes, the fake driver's own ends of its tunnel connections.
pub const FD_RESERVE: u64 = 512;
/// Linux's default `fs.nr_open`: the most a soft limit can be when the hard one is unlimited.
const NR_OPEN_DEFAULT: u64 = 1 << 20;
/// What a refused HTTP client reads before the connection closes. Written without waiting (a
/// client that does not read gets nothing), so a refusal costs no task and no buffer.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
    content-type: text/plain\r\nretry-after: 1\r\ncontent-length: 21\r\n\r\n\
    too many connections\n";

/// Why a connection was closed unserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the listener holds its most connections ({0})")]
    ListenerFull(usize),
    #[error("the address holds its most connections ({0})")]
    SourceFull(usize),
}

#[derive(Default)]
struct Counts {
    total: usize,
    /// The most open at once since [`ConnectionLimiter::take_peak`] last looked.
    peak: usize,
    per_source: HashMap<IpAddr, usize>,
}

#[derive(Default)]
struct RefusalLog {
    last_line: Option<Instant>,
    unreported: u64,
}

/// One listener's connection caps and the connections it holds now.
pub struct ConnectionLimiter {
    name: &'static str,
    max_total: usize,
    max_per_source: usize,
    /// Sources counted only against the total (a reverse proxy carries every client).
    uncounted: Vec<IpNet>,
    counts: Mutex<Counts>,
    refusals: Mutex<RefusalLog>,
}

/// Held for as long as a connection's socket is open, upgraded WebSockets included.
pub struct ConnectionGuard {
    limiter: Arc<ConnectionLimiter>,
    source: Option<IpAddr>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut counts = lock(&self.limiter.counts);
        counts.total = counts.total.saturating_sub(1);
        if let Some(source) = self.source {
            if let Some(n) = counts.per_source.get_mut(&source) {
                *n -= 1;
                if *n == 0 {
                    // Emptied entries go, so a flood from many addresses leaves no map behind.
                    counts.per_source.remove(&source);
                }
            }
        }
    }
}

/// The counts stay consistent across a panic (nothing panics while they are held), so a poisoned
/// lock is taken as it is rather than taking the listener down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The address a connection is counted against: IPv4 as it is (also when it arrives mapped into
/// IPv6), IPv6 by its /64, since one host is commonly given a whole /64.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl ConnectionLimiter {
    pub fn new(
        name: &'static str,
        max_total: usize,
        max_per_source: usize,
        uncounted: Vec<IpNet>,
    ) -> Arc<ConnectionLimiter> {
        Arc::new(ConnectionLimiter {
            name,
            max_total,
            max_per_source,
            uncounted,
            counts: Mutex::default(),
            refusals: Mutex::default(),
        })
    }

    /// Counts a new connection from `peer`, or says why it must be closed.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<ConnectionGuard, Refused> {
        let key = source_key(peer);
        let counted = !self.uncounted.iter().any(|net| net.contains(&key));
        let mut counts = lock(&self.counts);
        if counts.total >= self.max_total {
            return Err(Refused::ListenerFull(self.max_total));
        }
        if counted {
            let n = counts.per_source.get(&key).copied().unwrap_or(0);
            if n >= self.max_per_source {
                return Err(Refused::SourceFull(self.max_per_source));
            }
            counts.per_source.insert(key, n + 1);
        }
        counts.total += 1;
        counts.peak = counts.peak.max(counts.total);
        Ok(ConnectionGuard {
            limiter: self.clone(),
            source: counted.then_some(key),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        lock(&self.counts).total
    }

    /// The most connections open at once since the last call, and the number open now.
    fn take_peak(&self) -> (usize, usize) {
        let mut counts = lock(&self.counts);
        let open = counts.total;
        (std::mem::replace(&mut counts.peak, open), open)
    }

    /// Addresses holding a connection now.
    pub fn sources(&self) -> usize {
        lock(&self.counts).per_source.len()
    }

    fn log_refusal(&self, peer: SocketAddr, why: Refused) {
        let mut log = lock(&self.refusals);
        log.unreported += 1;
        let now = Instant::now();
        if log
            .last_line
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            tracing::warn!(
                listener = self.name,
                refused = log.unreported,
                last_peer = %peer,
                "closing new connections unserved: {why} (at most one such line per {}s)",
                LOG_EVERY.as_secs()
            );
            log.unreported = 0;
            log.last_line = Some(now);
        }
    }
}

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
        let guard = match limiter.admit(peer.ip()) {
            Ok(g) => g,
            Err(why) => {
                limiter.log_refusal(peer, why);
                // Accepted and closed rather than left in the backlog: the backlog is shared
                // with everyone else, and a client told at once can back off.
                let _ = tcp.try_write(REFUSAL);
                continue;
            }
        };
        // Terminal keystrokes and exec round trips are small writes: Nagle's algorithm would
        // hold them back for a delayed ACK (tens of milliseconds).
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
    }
    drop(listener);
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

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, so the listeners' caps, not
/// the default soft limit (often 1024), decide how many connections are held. Returns the soft
/// limit in force afterwards.
pub fn raise_nofile_limit() -> Result<u64, nix::Error> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    // Linux refuses an unlimited soft limit for open files: nr_open is the real ceiling.
    let target = if hard == RLIM_INFINITY {
        NR_OPEN_DEFAULT
    } else {
        hard
    };
    if soft >= target {
        return Ok(soft);
    }
    setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
    Ok(target)
}

/// File-handle counts wanted by each listener (the API's and the tunnel's connections, the
/// egress proxy's two handles per connection), shrunk in proportion when together with
/// [`FD_RESERVE`] they would pass `nofile`: past it accepts fail with EMFILE for every
/// listener alike, and the server cannot open its own files either.
pub fn fit_to_budget<const N: usize>(nofile: u64, wanted: [usize; N]) -> [usize; N] {
    let total: u64 = wanted.iter().map(|&n| n as u64).sum();
    let budget = nofile.saturating_sub(FD_RESERVE);
    if total <= budget {
        return wanted;
    }
    wanted.map(|n| ((n as u64 * budget / total) as usize).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("a test address")
    }

    #[test]
    fn caps_per_source_and_in_total_and_frees_on_drop() {
        let l = ConnectionLimiter::new("test", 5, 2, vec!["10.9.0.0/16".parse().unwrap()]);
        let a1 = l.admit(ip("10.0.0.1")).unwrap();
        let a2 = l.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(l.admit(ip("10.0.0.1")).err(), Some(Refused::SourceFull(2)));
        // The same address mapped into IPv6 is the same source.
        assert_eq!(
            l.admit(ip("::ffff:10.0.0.1")).err(),
            Some(Refused::SourceFull(2))
        );
        let b = l.admit(ip("10.0.0.2")).unwrap();
        // A trusted proxy counts only against the total.
        let p1 = l.admit(ip("10.9.0.1")).unwrap();
        let p2 = l.admit(ip("10.9.0.1")).unwrap();
        assert_eq!(l.open(), 5);
        assert_eq!(
            l.admit(ip("10.0.0.3")).err(),
            Some(Refused::ListenerFull(5))
        );
        drop(a1);
        let a3 = l.admit(ip("10.0.0.1")).unwrap();
        for g in [a2, a3, b, p1, p2] {
            drop(g);
        }
        assert_eq!(l.open(), 0);
        assert_eq!(l.sources(), 0, "emptied sources are forgotten");
        assert_eq!(l.take_peak(), (5, 0));
        assert_eq!(
            l.take_peak(),
            (0, 0),
            "the peak starts again from what is open"
        );
    }

    #[test]
    fn ipv6_counts_by_slash_64() {
        let l = ConnectionLimiter::new("test", 10, 1, Vec::new());
        let _a = l.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            l.admit(ip("2001:db8:1:2:ffff::9")).err(),
            Some(Refused::SourceFull(1))
        );
        assert!(l.admit(ip("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn budget_keeps_the_reserve() {
        assert_eq!(fit_to_budget(1 << 20, [4096, 2048]), [4096, 2048]);
        let [api, tunnel] = fit_to_budget(1024, [4096, 2048]);
        assert!(api + tunnel <= (1024 - FD_RESERVE) as usize);
        assert_eq!((api, tunnel), (341, 170));
        assert_eq!(fit_to_budget(10, [4096, 2048]), [1, 1]);
        let [_, _, egress] = fit_to_budget(1024, [4096, 2048, 2048]);
        assert_eq!(egress, 128);
    }

    #[test]
    fn nofile_soft_limit_is_raised_to_the_hard_one() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Start from a low soft limit, as many init systems give, so there is something to raise.
        setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard), hard).unwrap();
        let now = raise_nofile_limit().unwrap();
        let (soft, hard_after) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(hard_after, hard, "the hard limit is left alone");
        assert_eq!(soft, now);
        assert!(soft == hard || (soft == NR_OPEN_DEFAULT && hard > soft));
        assert_eq!(
            raise_nofile_limit().unwrap(),
            soft,
            "raising twice changes nothing"
        );
    }
}
