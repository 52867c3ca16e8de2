//! The bounded stream of secret-use events. Each substitution is worth knowing about, but a loop
//! of requests on one intercepted connection costs the sandbox nothing, and an event for each would
//! flood the event hub and push the agent's refusals out of its 200-entry egress log. So each agent
//! gets one use event per secret and destination in a window of [`USE_WINDOW`], and at most
//! [`USES_PER_WINDOW`] destinations per secret in it; the uses between are neither told nor
//! recorded (the first one says the secret went there). Refusals are not limited here: every one is
//! recorded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::egress::dial::Destination;

pub(super) const USE_WINDOW: Duration = Duration::from_secs(10);
pub(super) const USES_PER_WINDOW: usize = 8;
/// Windows held before quiet ones are dropped: a bound on the memory, whatever the agents do.
const MAX_WINDOWS: usize = 4096;

#[derive(Default)]
pub(super) struct UseEvents {
    windows: Mutex<HashMap<(String, String), UseWindow>>,
}

struct UseWindow {
    started: Instant,
    told: Vec<Destination>,
}

impl UseEvents {
    /// Whether the use of `secret` by `agent` toward `dest` is to be told now.
    pub(super) fn worth_telling(&self, agent: &str, secret: &str, dest: &Destination) -> bool {
        self.worth_telling_at(agent, secret, dest, Instant::now())
    }

    fn worth_telling_at(
        &self,
        agent: &str,
        secret: &str,
        dest: &Destination,
        now: Instant,
    ) -> bool {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() >= MAX_WINDOWS {
            windows.retain(|_, w| now.duration_since(w.started) < USE_WINDOW);
        }
        let w = windows
            .entry((agent.to_string(), secret.to_string()))
            .or_insert_with(|| UseWindow {
                started: now,
                told: Vec::new(),
            });
        if now.duration_since(w.started) >= USE_WINDOW {
            w.started = now;
            w.told.clear();
        }
        if w.told.len() >= USES_PER_WINDOW || w.told.contains(dest) {
            return false;
        }
        w.told.push(dest.clone());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_use_event_per_secret_and_destination_in_a_window() {
        let u = UseEvents::default();
        let d = |h: &str| Destination {
            host: h.into(),
            port: 443,
        };
        let t0 = Instant::now();
        assert!(u.worth_telling_at("a", "GH", &d("api.test"), t0));
        assert!(
            (0..1000).all(|_| !u.worth_telling_at("a", "GH", &d("api.test"), t0)),
            "a loop of uses is one event"
        );
        assert!(
            u.worth_telling_at("a", "KEY", &d("api.test"), t0),
            "another secret"
        );
        assert!(
            u.worth_telling_at("b", "GH", &d("api.test"), t0),
            "another agent"
        );
        let told = (0..100)
            .filter(|i| u.worth_telling_at("a", "GH", &d(&format!("h{i}.test")), t0))
            .count();
        assert_eq!(told, USES_PER_WINDOW - 1, "destinations are bounded too");
        assert!(
            u.worth_telling_at("a", "GH", &d("api.test"), t0 + USE_WINDOW),
            "a new window, a new event"
        );
    }
}
