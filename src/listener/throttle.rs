//! Log lines about what an outsider can make happen as often as it likes (a refused connection,
//! a wrong token): at most one line per source address per [`LOG_EVERY`], carrying how many
//! went unlogged since, so a flood is told once rather than written out in full.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use super::caps::source_key;
use super::LOG_EVERY;

/// Sources remembered at most; past it, the ones whose window has closed are forgotten, and
/// when a flood from more addresses than this leaves none closed, the newcomers share one
/// window (a line for them all) rather than growing the map.
const MAX_SOURCES: usize = 1024;

#[derive(Clone, Copy)]
struct Window {
    last_line: Instant,
    unreported: u64,
}

/// One kind of line, throttled per source address.
#[derive(Default)]
pub struct ThrottledLog {
    sources: Mutex<HashMap<Option<IpAddr>, Window>>,
}

impl ThrottledLog {
    /// Counts one event from `source`; returns how many to report in a line now (this one and
    /// those held back since the last line), or `None` while its window is open.
    pub fn count(&self, source: IpAddr) -> Option<u64> {
        self.count_at(source, Instant::now())
    }

    fn count_at(&self, source: IpAddr, now: Instant) -> Option<u64> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = Some(source_key(source));
        if !sources.contains_key(&key) && sources.len() >= MAX_SOURCES {
            sources.retain(|_, w| now.duration_since(w.last_line) < LOG_EVERY);
            if sources.len() >= MAX_SOURCES {
                key = None;
            }
        }
        match sources.get_mut(&key) {
            Some(w) if now.duration_since(w.last_line) < LOG_EVERY => {
                w.unreported += 1;
                None
            }
            Some(w) => {
                let n = w.unreported + 1;
                *w = Window {
                    last_line: now,
                    unreported: 0,
                };
                Some(n)
            }
            None => {
                sources.insert(
                    key,
                    Window {
                        last_line: now,
                        unreported: 0,
                    },
                );
                Some(1)
            }
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
    fn one_line_per_source_per_window_with_the_count() {
        let log = ThrottledLog::default();
        let t0 = Instant::now();
        assert_eq!(log.count_at(ip("10.0.0.1"), t0), Some(1));
        for _ in 0..4999 {
            assert_eq!(log.count_at(ip("10.0.0.1"), t0), None);
        }
        assert_eq!(
            log.count_at(ip("10.0.0.2"), t0),
            Some(1),
            "another source has its own window"
        );
        assert_eq!(
            log.count_at(ip("10.0.0.1"), t0 + LOG_EVERY),
            Some(5000),
            "the next line carries what was held back"
        );
    }

    #[test]
    fn a_flood_from_many_addresses_keeps_the_map_bounded() {
        let log = ThrottledLog::default();
        let t0 = Instant::now();
        let lines = (0..20_000u32)
            .filter_map(|i| {
                let [_, a, b, c] = i.to_be_bytes();
                log.count_at(IpAddr::from([10, a, b, c]), t0)
            })
            .count();
        assert_eq!(
            lines,
            MAX_SOURCES + 1,
            "newcomers past the bound share a line"
        );
        assert!(log.sources.lock().unwrap().len() <= MAX_SOURCES + 1);
        // Once the windows close, new sources get lines of their own again.
        assert_eq!(log.count_at(ip("10.200.0.1"), t0 + LOG_EVERY), Some(1));
    }
}
