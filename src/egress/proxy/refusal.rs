//! Saying no: the answer a refused request gets (with the command that would allow it), the
//! bounded stream of refusal events, and the answer to a connection refused before any of its
//! request was read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Response, StatusCode};
use tokio::net::TcpStream;

use super::{text, Caller, Proxy};
use crate::egress::dial::{Destination, Refusal};

const REFUSAL_EVENTS_PER_SEC: usize = 20;

impl Proxy {
    pub(super) fn refuse(
        &self,
        caller: &Caller,
        name: &str,
        dest: &Destination,
        refusal: Refusal,
    ) -> Response<Body> {
        let rule = match &refusal {
            Refusal::Denied { rule } => rule.as_ref().map(ToString::to_string),
            _ => None,
        };
        let reason = refusal.to_string();
        if refusal.is_policy() {
            if self.refusals.worth_telling(&caller.id, dest) {
                self.publish(caller, dest, false, rule, Some(reason.clone()), None);
            } else {
                let e = super::event(caller, dest, false, rule, Some(reason.clone()), None);
                self.sandboxes.record(&e);
            }
            let hint = match refusal {
                Refusal::Denied { rule: None } => format!(
                    "; to allow it: agenthold egress {} --allow {}",
                    caller.id, dest.host
                ),
                Refusal::Denied { rule: Some(r) } => format!(
                    "; to allow it: agenthold egress {} --remove '{r}'",
                    caller.id
                ),
                _ => String::new(),
            };
            text(
                StatusCode::FORBIDDEN,
                format!(
                    "agenthold: agent {name} ({}) may not reach {dest}: {reason}{hint}\n",
                    caller.id
                ),
            )
        } else {
            self.publish(caller, dest, true, None, Some(reason.clone()), Some((0, 0)));
            text(
                StatusCode::BAD_GATEWAY,
                format!("agenthold: cannot reach {dest} for agent {name}: {reason}\n"),
            )
        }
    }
}

/// Refusals cost the sandbox nothing (no DNS, no dial), so a loop of them would flood the event
/// hub that every agent's changes share: each agent gets at most [`REFUSAL_EVENTS_PER_SEC`]
/// refusal events a second, and one per destination in that second.
#[derive(Default)]
pub(super) struct RefusalEvents {
    agents: Mutex<HashMap<String, RefusalWindow>>,
}

struct RefusalWindow {
    started: Instant,
    told: Vec<Destination>,
}

impl RefusalEvents {
    pub(super) fn worth_telling(&self, agent: &str, dest: &Destination) -> bool {
        self.worth_telling_at(agent, dest, Instant::now())
    }

    fn worth_telling_at(&self, agent: &str, dest: &Destination, now: Instant) -> bool {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        // Windows of agents quiet for a second are dropped, so this holds only the noisy ones.
        if agents.len() > 1024 {
            agents.retain(|_, w| now.duration_since(w.started) < Duration::from_secs(1));
        }
        let w = agents
            .entry(agent.to_string())
            .or_insert_with(|| RefusalWindow {
                started: now,
                told: Vec::new(),
            });
        if now.duration_since(w.started) >= Duration::from_secs(1) {
            w.started = now;
            w.told.clear();
        }
        if w.told.len() >= REFUSAL_EVENTS_PER_SEC || w.told.contains(dest) {
            return false;
        }
        w.told.push(dest.clone());
        true
    }
}

/// Answers a connection refused before any of its request was read and closes it at once: a
/// refusal holds no file handle, no task and no buffer past this call, whatever the client does.
pub(super) fn refuse_now(tcp: TcpStream, status: StatusCode, body: &str) {
    crate::listener::answer_and_close(tcp, &plain_response(status, body));
}

/// A whole answer as bytes, for connections refused before any HTTP is read.
pub(super) fn plain_response(status: StatusCode, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {} {}\r\nconnection: close\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_events_are_one_per_destination_and_bounded_per_agent() {
        let r = RefusalEvents::default();
        let d = |h: &str| Destination {
            host: h.into(),
            port: 443,
        };
        let t0 = Instant::now();
        assert!(r.worth_telling_at("a", &d("x.example"), t0));
        assert!(
            !r.worth_telling_at("a", &d("x.example"), t0),
            "the same one again in the second"
        );
        assert!(
            r.worth_telling_at("b", &d("x.example"), t0),
            "another agent's is its own"
        );
        let told = (0..100)
            .filter(|i| r.worth_telling_at("a", &d(&format!("h{i}.example")), t0))
            .count();
        assert_eq!(told, REFUSAL_EVENTS_PER_SEC - 1);
        let later = t0 + Duration::from_secs(1);
        assert!(
            r.worth_telling_at("a", &d("x.example"), later),
            "a new second, a new window"
        );
    }
}
