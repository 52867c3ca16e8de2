//! Puts idle agents to sleep: no terminal, no exec, no use of files or API, and under 5% of a
//! core of CPU, for the agent's `idleMinutes`.

use std::sync::Arc;

use chrono::Utc;

use super::Lifecycle;
use crate::config::SandboxConfig;
use crate::model::{Agent, AgentState};

/// How long `idle_minutes` units of `sandbox.idle_minute` (a minute but in tests) last.
pub fn idle_time(config: &SandboxConfig, idle_minutes: u32) -> chrono::Duration {
    let total = config.idle_minute.saturating_mul(idle_minutes);
    chrono::Duration::from_std(total).unwrap_or(chrono::Duration::MAX)
}

/// True when `agent` has been idle for its whole idle time.
pub fn is_idle(lc: &Lifecycle, agent: &Agent, now: chrono::DateTime<Utc>) -> bool {
    if agent.state != AgentState::Running || agent.idle_minutes == 0 {
        return false;
    }
    let view = lc.activity().view(&agent.id);
    !view.busy && now - view.last_activity_at >= idle_time(&lc.config().sandbox, agent.idle_minutes)
}

pub async fn run(lc: Arc<Lifecycle>) {
    let mut tick = tokio::time::interval(lc.config().sandbox.idle_check_interval);
    loop {
        tick.tick().await;
        let agents = match lc.list().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("the sleeper could not list agents: {e}");
                continue;
            }
        };
        let now = Utc::now();
        for agent in agents.iter().filter(|a| is_idle(&lc, a, now)) {
            tracing::info!(
                agent = agent.id,
                "idle for {} minutes; putting it to sleep",
                agent.idle_minutes
            );
            if let Err(e) = lc.stop(&agent.id).await {
                tracing::debug!(agent = agent.id, "not put to sleep: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn idle_minutes_are_counted_in_idle_minute_units() {
        let mut c = SandboxConfig::default();
        assert_eq!(idle_time(&c, 15), chrono::Duration::minutes(15));
        c.idle_minute = Duration::from_secs(2);
        assert_eq!(idle_time(&c, 3), chrono::Duration::seconds(6));
        c.idle_minute = Duration::MAX;
        assert_eq!(idle_time(&c, u32::MAX), chrono::Duration::MAX);
    }
}
