//! How often one address may try a password: [`TRIES_PER_MINUTE`], then it waits.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Password tries an address gets a minute (a burst of this many, then one every
/// `60 / TRIES_PER_MINUTE` seconds).
pub const TRIES_PER_MINUTE: u32 = 10;

/// Addresses remembered before the idle ones are swept out.
const SWEEP_AT: usize = 10_000;

pub struct SignInThrottle {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
}

impl Default for SignInThrottle {
    fn default() -> SignInThrottle {
        let per_minute = NonZeroU32::new(TRIES_PER_MINUTE).unwrap_or(NonZeroU32::MIN);
        SignInThrottle {
            limiter: RateLimiter::keyed(Quota::per_minute(per_minute)),
            clock: DefaultClock::default(),
        }
    }
}

impl SignInThrottle {
    /// Counts a try from `ip`: `Err` with how long to wait when it has used up its tries.
    pub fn try_from(&self, ip: IpAddr) -> Result<(), Duration> {
        // An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d: one address, one count.
        // An IPv6 host usually has a whole /64 to pick addresses from: one count for it.
        let ip = match ip.to_canonical() {
            IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
            v4 => v4,
        };
        if self.limiter.len() >= SWEEP_AT {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(&ip)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addresses_of_one_ipv6_slash_64_share_their_tries() {
        let t = SignInThrottle::default();
        for i in 0..TRIES_PER_MINUTE {
            let ip: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().unwrap();
            assert!(t.try_from(ip).is_ok());
        }
        assert!(t.try_from("2001:db8:1:2:ffff::1".parse().unwrap()).is_err());
        assert!(t.try_from("2001:db8:1:3::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn an_address_gets_its_tries_then_waits_and_others_are_not_held_up() {
        let t = SignInThrottle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..TRIES_PER_MINUTE {
            assert!(t.try_from(a).is_ok());
        }
        let wait = t.try_from(a).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert!(t.try_from("192.0.2.2".parse().unwrap()).is_ok());
    }
}
