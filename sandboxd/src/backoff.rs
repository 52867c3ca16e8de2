//! Reconnect delays: 100 ms doubling to 5 s, with jitter so many sandboxes restarting together
//! do not dial the server in lockstep.

use std::time::Duration;

pub const MIN_DELAY: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: MIN_DELAY }
    }
}

impl Backoff {
    /// The delay before the next attempt: the current step plus up to a quarter of it.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(MAX_DELAY);
        step + jitter(step / 4)
    }

    pub fn reset(&mut self) {
        self.next = MIN_DELAY;
    }
}

/// Randomness good enough for spreading retries, without a random-number crate.
fn jitter(max: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let max_ns = max.as_nanos() as u64;
    if max_ns == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) % max_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let first = b.next_delay();
        assert!(first >= MIN_DELAY && first <= MIN_DELAY + MIN_DELAY / 4);
        for _ in 0..20 {
            assert!(b.next_delay() <= MAX_DELAY + MAX_DELAY / 4);
        }
        assert!(b.next_delay() >= MAX_DELAY);
        b.reset();
        assert!(b.next_delay() < MIN_DELAY * 2);
    }
}
