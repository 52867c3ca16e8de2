//! Relaying between two TCP sockets with `splice(2)` through a pipe each way: the bytes move from
//! one socket's receive queue to the other's send queue inside the kernel, never copied through
//! the server's memory. Each way fills its pipe from one socket and drains it into the other
//! before reading again, so at most one pipe's worth is in flight per direction (bounded memory),
//! and a socket's end shuts the other's sending side while the opposite way goes on (half-close),
//! as `tokio::io::copy_bidirectional` does.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::counted::Tally;

/// What each way's pipe is asked to hold: larger pipes mean fewer calls per byte. Linux caps it
/// at `/proc/sys/fs/pipe-max-size` for unprivileged processes (1 MiB by default); a refusal
/// leaves the default 64 KiB, which still works.
const PIPE_SIZE: i32 = 1 << 20;

/// One way's pipe: the read end and the write end, both non-blocking.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// What one `splice` into it may move.
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let size = match fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE)) {
            Ok(n) => n,
            Err(_) => fcntl(&write, FcntlArg::F_GETPIPE_SZ)?,
        };
        Ok(Pipe {
            read,
            write,
            size: usize::try_from(size).unwrap_or(1 << 16).max(4096),
        })
    }
}

/// Relays between `client` and `upstream` until both ways have ended: first `early` (bytes the
/// client sent that were already read, e.g. by an HTTP parser) to the upstream, then each way
/// by splicing. The tally counts bytes written to `upstream` as up and read from it as down,
/// like [`super::counted::Counted`], as they move, so a relay cut short still reports them.
pub async fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    early: &[u8],
    tally: &Tally,
) -> io::Result<()> {
    write_all(upstream, early).await?;
    tally.up.fetch_add(early.len() as u64, Ordering::Relaxed);
    let (up, down) = (Pipe::new()?, Pipe::new()?);
    tokio::try_join!(
        one_way(client, upstream, &up, None, Some(&tally.up)),
        one_way(upstream, client, &down, Some(&tally.down), None),
    )?;
    Ok(())
}

/// Moves bytes from `from` to `to` through `pipe` until `from` ends, then shuts `to`'s sending
/// side. `read` counts what leaves `from`, `written` what reaches `to`.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    read: Option<&AtomicU64>,
    written: Option<&AtomicU64>,
) -> io::Result<()> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        // The pipe is empty here, so "would block" can only mean `from` has nothing yet.
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from.as_fd(), None, &pipe.write, None, pipe.size, flags)
                    .map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return shutdown_write(to);
        }
        if let Some(c) = read {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        // Here the pipe holds data, so "would block" means `to` is full.
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe.read, None, to.as_fd(), None, left, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => {
                    left -= m;
                    if let Some(c) = written {
                        c.fetch_add(m as u64, Ordering::Relaxed);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

async fn write_all(to: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        to.writable().await?;
        match to.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The end of one way: the peer reads EOF while it may still send the other way. A peer that
/// has already gone makes this fail with `ENOTCONN`, which is no error for a relay.
fn shutdown_write(to: &TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    match nix::sys::socket::shutdown(to.as_raw_fd(), nix::sys::socket::Shutdown::Write) {
        Ok(()) | Err(nix::errno::Errno::ENOTCONN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const DEADLINE: Duration = Duration::from_secs(60);

    /// Two connected pairs: (client's far end, client's near end) and (upstream's near end,
    /// upstream's far end); the relay runs between the two near ends.
    async fn pairs() -> ((TcpStream, TcpStream), (TcpStream, TcpStream)) {
        async fn pair() -> (TcpStream, TcpStream) {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = l.local_addr().expect("addr");
            let (a, b) = tokio::join!(TcpStream::connect(addr), l.accept());
            (a.expect("connect"), b.expect("accept").0)
        }
        (pair().await, pair().await)
    }

    fn payload(len: usize, seed: u64) -> Vec<u8> {
        // xorshift: incompressible enough, and no dependency on a random source.
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Writes `data`, shuts the sending side, and reads everything the other way until EOF.
    async fn send_and_read(mut s: TcpStream, data: Vec<u8>) -> Vec<u8> {
        let (mut r, mut w) = s.split();
        let write = async {
            w.write_all(&data).await.expect("write");
            w.shutdown().await.expect("shutdown");
        };
        let mut got = Vec::new();
        let read = async { r.read_to_end(&mut got).await.expect("read") };
        tokio::join!(write, read);
        got
    }

    #[tokio::test]
    async fn large_payloads_both_ways_arrive_intact_and_are_tallied() {
        let ((client_far, client), (upstream, upstream_far)) = pairs().await;
        let up = payload(48 << 20, 1);
        let down = payload(40 << 20, 2);
        let early = b"already read by the parser".to_vec();
        let tally = Tally::default();
        let relay = relay(&client, &upstream, &early, &tally);
        let (r, from_upstream, from_client) = tokio::time::timeout(DEADLINE, async {
            tokio::join!(
                relay,
                send_and_read(client_far, up.clone()),
                send_and_read(upstream_far, down.clone())
            )
        })
        .await
        .expect("the relay finished in time");
        r.expect("the relay ended without error");
        let mut want_up = early.clone();
        want_up.extend_from_slice(&up);
        assert!(from_client == want_up, "the bytes up differ");
        assert!(from_upstream == down, "the bytes down differ");
        assert_eq!(tally.get(), (want_up.len() as u64, down.len() as u64));
    }

    #[tokio::test]
    async fn one_way_ending_leaves_the_other_open() {
        let ((mut client_far, client), (upstream, mut upstream_far)) = pairs().await;
        let tally = Arc::new(Tally::default());
        let t = tally.clone();
        let relay = tokio::spawn(async move { relay(&client, &upstream, b"", &t).await });
        client_far.write_all(b"request").await.expect("write");
        client_far.shutdown().await.expect("shutdown");
        // The upstream sees the request and then EOF...
        let mut got = Vec::new();
        tokio::time::timeout(DEADLINE, upstream_far.read_to_end(&mut got))
            .await
            .expect("EOF in time")
            .expect("read");
        assert_eq!(got, b"request");
        // ...and can still answer, which the client reads to the end.
        upstream_far.write_all(b"answer").await.expect("write");
        upstream_far.shutdown().await.expect("shutdown");
        let mut back = Vec::new();
        tokio::time::timeout(DEADLINE, client_far.read_to_end(&mut back))
            .await
            .expect("EOF in time")
            .expect("read");
        assert_eq!(back, b"answer");
        tokio::time::timeout(DEADLINE, relay)
            .await
            .expect("the relay ended in time")
            .expect("join")
            .expect("no error");
        assert_eq!(tally.get(), (7, 6));
    }

    #[tokio::test]
    async fn dropping_the_relay_closes_both_sockets_and_keeps_the_tally() {
        let ((mut client_far, client), (upstream, mut upstream_far)) = pairs().await;
        let tally = Arc::new(Tally::default());
        let cancel = tokio_util::sync::CancellationToken::new();
        let (t, c) = (tally.clone(), cancel.clone());
        let relay = tokio::spawn(async move {
            tokio::select! {
                r = relay(&client, &upstream, b"", &t) => Some(r),
                () = c.cancelled() => None,
            }
            // Both sockets drop here, with the relay.
        });
        client_far.write_all(b"hello").await.expect("write");
        let mut five = [0u8; 5];
        tokio::time::timeout(DEADLINE, upstream_far.read_exact(&mut five))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&five, b"hello");
        cancel.cancel();
        let ended = tokio::time::timeout(DEADLINE, relay)
            .await
            .expect("the relay stopped in time")
            .expect("join");
        assert!(ended.is_none(), "cancellation, not an end of the relay");
        // Both far ends see the connection closed (EOF or reset), though neither closed it.
        let mut rest = Vec::new();
        let up_end = tokio::time::timeout(DEADLINE, upstream_far.read_to_end(&mut rest))
            .await
            .expect("closed in time");
        assert!(up_end.map_or(true, |n| n == 0));
        let client_end = tokio::time::timeout(DEADLINE, client_far.read_to_end(&mut rest))
            .await
            .expect("closed in time");
        assert!(client_end.map_or(true, |n| n == 0));
        assert_eq!(tally.get(), (5, 0));
    }
}
