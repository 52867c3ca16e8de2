//! One listener's connection caps: how many it holds in total and per source address, the
//! guard that frees a connection's place when its socket closes, and the throttled log of
//! refusals.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use ipnet::IpNet;

use super::LOG_EVERY;

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
    pub(super) name: &'static str,
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

    /// The caps: connections in total, and per source address.
    pub fn caps(&self) -> (usize, usize) {
        (self.max_total, self.max_per_source)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        lock(&self.counts).total
    }

    /// The most connections open at once since the last call, and the number open now.
    pub(super) fn take_peak(&self) -> (usize, usize) {
        let mut counts = lock(&self.counts);
        let open = counts.total;
        (std::mem::replace(&mut counts.peak, open), open)
    }

    /// Addresses holding a connection now.
    pub fn sources(&self) -> usize {
        lock(&self.counts).per_source.len()
    }

    pub(super) fn log_refusal(&self, peer: SocketAddr, why: Refused) {
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
}
