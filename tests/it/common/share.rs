//! What the tests of this one process share: the process itself (its memory, its file handles)
//! and the loopback ports.
//!
//! Every server a test runs (in this process, as a process of its own, in a container) holds a
//! [`Shared`] share, kept across its restarts; a test that measures or floods the whole process
//! (or host) runs its body in [`exclusive`], which waits until no server of another test runs and
//! keeps new ones from starting until it ends. Servers the exclusive test starts itself take no
//! share. Waiting readers are not held back by a waiting writer, so a test that starts a
//! second server while an exclusive one waits cannot deadlock with it.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{LazyLock, Mutex};

use tokio::sync::watch;

#[derive(Default, Clone, Copy)]
struct Holders {
    servers: usize,
    exclusive: bool,
}

static HOLDERS: LazyLock<watch::Sender<Holders>> =
    LazyLock::new(|| watch::Sender::new(Holders::default()));

tokio::task_local! {
    static IN_EXCLUSIVE: ();
}

/// Runs `body` while no server of another test runs in this process.
pub async fn exclusive<F: Future>(body: F) -> F::Output {
    let mut rx = HOLDERS.subscribe();
    loop {
        rx.wait_for(|h| !h.exclusive && h.servers == 0)
            .await
            .expect("the holders' sender lives as long as the process");
        let mut got = false;
        HOLDERS.send_if_modified(|h| {
            got = !h.exclusive && h.servers == 0;
            h.exclusive |= got;
            got
        });
        if got {
            break;
        }
    }
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            HOLDERS.send_modify(|h| h.exclusive = false);
        }
    }
    let _release = Release;
    IN_EXCLUSIVE.scope((), body).await
}

/// A running server's share of the process; `None` inside [`exclusive`]. Work of a test that
/// loads the host without a server of its own (a second Docker engine loading images onto the
/// host's disk) holds one too.
pub struct Shared(());

impl Shared {
    pub async fn take() -> Option<Shared> {
        if IN_EXCLUSIVE.try_with(|_| ()).is_ok() {
            return None;
        }
        let mut rx = HOLDERS.subscribe();
        loop {
            rx.wait_for(|h| !h.exclusive)
                .await
                .expect("the holders' sender lives as long as the process");
            let mut got = false;
            HOLDERS.send_if_modified(|h| {
                got = !h.exclusive;
                h.servers += usize::from(got);
                got
            });
            if got {
                return Some(Shared(()));
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        HOLDERS.send_modify(|h| h.servers -= 1);
    }
}

/// A loopback port nothing listens on, for a server that binds it a moment later (or for a
/// client that must find nothing there). It is below the kernel's ephemeral range, where every
/// `bind(…:0)` and outgoing connection of the tests' other servers and clients picks its ports,
/// so none of them can take it in between, and this process never hands it out twice.
pub fn free_port() -> u16 {
    static GIVEN: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(Default::default);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (from, to) = (low.saturating_sub(12000).max(1024), low);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = rand::random_range(from..to);
        // Free on every address: the tunnel may bind 0.0.0.0.
        if !given.contains(&port) && std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free port in {from}..{to}");
}
