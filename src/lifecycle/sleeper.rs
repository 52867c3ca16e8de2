//! Puts idle agents to sleep: no terminal, no exec, no use of files or API, and under 5% of a
//! core of CPU, for the agent's `idleMinutes`.

use std::sync::Arc;

use chrono::Utc;

use super::view::idle_time;
use super::Lifecycle;
use crate::model::{Agent, AgentState};

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
