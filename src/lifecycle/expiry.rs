//! Lifetimes: an agent with `ttlMinutes` is destroyed at its `expiresAt`, whatever its state (a
//! destroy through the lifecycle, as the API's), after an `expiring` event one
//! `sandbox.idle_minute` (a minute but in tests) before it, or at once when less remains. The
//! deadlines are stored, so a restarted server keeps them; [`run`] sleeps until the next one
//! (or a change of one), at most `sandbox.idle_check_interval`.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::view::idle_time;
use super::{Lifecycle, LifecycleError};
use crate::events::AgentEvent;
use crate::model::{Agent, AgentState};

/// The least time between two looks, so that an agent whose deadline passed but which cannot
/// be destroyed yet (an operation is under way) is not asked about in a busy loop.
const LEAST_WAIT: Duration = Duration::from_millis(100);

/// How soon a destroy that was refused (an operation under way) is tried again.
const RETRY: chrono::Duration = chrono::Duration::seconds(1);

/// What is due for `agent` at `now`.
#[derive(Debug, PartialEq)]
enum Due {
    Nothing,
    /// Announce `expiring` (its deadline is within `warn`).
    Warn(DateTime<Utc>),
    Destroy,
}

fn due(agent: &Agent, now: DateTime<Utc>, warn: chrono::Duration) -> Due {
    match agent.expires_at {
        None => Due::Nothing,
        Some(_) if agent.state == AgentState::Destroying => Due::Nothing,
        Some(at) if at <= now => Due::Destroy,
        Some(at) if at - warn <= now => Due::Warn(at),
        Some(_) => Due::Nothing,
    }
}

impl Lifecycle {
    /// The deadline of a lifetime of `ttl_minutes` counted from now; `None` past any date.
    pub(super) fn deadline(&self, ttl_minutes: u32) -> Option<DateTime<Utc>> {
        Utc::now().checked_add_signed(idle_time(&self.config().sandbox, ttl_minutes))
    }

    /// A deadline was set, moved or taken away: the task that keeps them looks again now.
    pub(super) fn deadlines_changed(&self) {
        self.deadlines.notify_one();
    }

    /// Announces that agent `id` expires `at`, once per deadline.
    fn warn_expiring(&self, id: &str, at: DateTime<Utc>) {
        let first = self
            .expiring_announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), at)
            != Some(at);
        if first {
            tracing::info!(agent = id, expires_at = %at, "expiring");
            self.hub.publish(AgentEvent::Expiring {
                id: id.to_string(),
                expires_at: at,
            });
        }
    }

    /// One look at every agent's deadline: warns and destroys what is due, and says when the
    /// next thing is due (`None`: nothing is).
    async fn enforce_deadlines(self: &Arc<Self>) -> Result<Option<DateTime<Utc>>, LifecycleError> {
        let warn = idle_time(&self.config().sandbox, 1);
        let agents = self.list().await?;
        let now = Utc::now();
        let mut next: Option<DateTime<Utc>> = None;
        let mut sooner = |t: DateTime<Utc>| next = Some(next.map_or(t, |n| n.min(t)));
        {
            let mut announced = self
                .expiring_announced
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            announced.retain(|id, _| agents.iter().any(|a| &a.id == id));
        }
        for agent in &agents {
            match due(agent, now, warn) {
                Due::Nothing => {
                    if let Some(at) = agent.expires_at {
                        if agent.state != AgentState::Destroying {
                            sooner(at - warn);
                        }
                    }
                }
                Due::Warn(at) => {
                    self.warn_expiring(&agent.id, at);
                    sooner(at);
                }
                Due::Destroy => {
                    self.warn_expiring(&agent.id, agent.expires_at.unwrap_or(now));
                    tracing::info!(agent = agent.id, "its ttlMinutes is up; destroying it");
                    match self.destroy(&agent.id).await {
                        Ok(_) => {}
                        // An operation is under way: again once it may have ended.
                        Err(LifecycleError::Conflict { .. }) => sooner(now + RETRY),
                        Err(e) => {
                            tracing::warn!(agent = agent.id, "not destroyed at its deadline: {e}");
                            sooner(now + RETRY);
                        }
                    }
                }
            }
        }
        Ok(next)
    }
}

/// Keeps the agents' deadlines until the server stops.
pub async fn run(lc: Arc<Lifecycle>) {
    loop {
        let longest = lc.config().sandbox.idle_check_interval.max(LEAST_WAIT);
        let wait = match lc.enforce_deadlines().await {
            Ok(Some(next)) => (next - Utc::now())
                .to_std()
                .unwrap_or_default()
                .clamp(LEAST_WAIT, longest),
            Ok(None) => longest,
            Err(e) => {
                tracing::warn!("the lifetimes' keeper could not list agents: {e}");
                longest
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = lc.deadlines.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(state: AgentState, expires_at: Option<DateTime<Utc>>) -> Agent {
        Agent {
            id: "a".into(),
            name: "a".into(),
            image: "i".into(),
            cpus: 1.0,
            memory_mb: 64,
            disk_mb: None,
            runtime: "runc".into(),
            egress: None,
            idle_minutes: 0,
            deep_sleep_minutes: None,
            state,
            error: None,
            needs_rebuild: false,
            created_at: Utc::now(),
            last_activity_at: None,
            sleeps_at: None,
            pull: None,
            preset: None,
            env: Default::default(),
            secrets: Vec::new(),
            setup: None,
            ttl_minutes: expires_at.map(|_| 1),
            expires_at,
            labels: Default::default(),
            allow_root: false,
            approvals: Default::default(),
            owner_id: "admin".into(),
            owner_name: "admin".into(),
            warm: false,
            access: Default::default(),
        }
    }

    #[test]
    fn a_deadline_warns_within_the_warning_then_destroys_in_any_state_but_destroying() {
        let now = Utc::now();
        let warn = chrono::Duration::seconds(60);
        let at = |s: i64| Some(now + chrono::Duration::seconds(s));
        assert_eq!(
            due(&agent(AgentState::Running, None), now, warn),
            Due::Nothing
        );
        assert_eq!(
            due(&agent(AgentState::Running, at(61)), now, warn),
            Due::Nothing
        );
        assert_eq!(
            due(&agent(AgentState::Sleeping, at(60)), now, warn),
            Due::Warn(now + warn)
        );
        for state in [
            AgentState::Sleeping,
            AgentState::Error,
            AgentState::Starting,
        ] {
            assert_eq!(due(&agent(state, at(0)), now, warn), Due::Destroy);
        }
        assert_eq!(
            due(&agent(AgentState::Destroying, at(-5)), now, warn),
            Due::Nothing
        );
    }
}
