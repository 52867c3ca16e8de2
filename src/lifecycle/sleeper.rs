//! Puts idle agents to sleep: no terminal, no exec, no use of files or API, and under 5% of a
//! core of CPU, for the agent's `idleMinutes`. An idle agent is paused first (its processes and
//! memory kept), then stopped after its deep-sleep time; with a deep-sleep time of 0 it is
//! stopped straight away. Under memory pressure the longest-paused are stopped early.

use std::sync::Arc;

use chrono::Utc;

use super::pressure::{self, PausedAgent};
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
            put_to_sleep(&lc, agent).await;
        }
        for agent in agents.iter().filter(|a| a.state == AgentState::Paused) {
            if lc.deep_sleep_at(agent).is_some_and(|at| at <= now) {
                tracing::info!(agent = agent.id, "paused long enough; stopping it");
                stop_paused(&lc, &agent.id).await;
            }
        }
        relieve_memory(&lc, &agents).await;
    }
}

/// Pauses idle `agent`, or stops it when it is not to be paused.
async fn put_to_sleep(lc: &Arc<Lifecycle>, agent: &Agent) {
    if lc.deep_sleep_minutes(agent) == 0 {
        tracing::info!(
            agent = agent.id,
            "idle for {} minutes; putting it to sleep",
            agent.idle_minutes
        );
        return stop(lc, &agent.id).await;
    }
    // Idle still once the freeze lock is held: a use that began meanwhile keeps it running.
    match lc.freeze(&agent.id, |a| is_idle(lc, a, Utc::now())).await {
        Ok(Some(_)) => tracing::info!(
            agent = agent.id,
            "idle for {} minutes; paused",
            agent.idle_minutes
        ),
        Ok(None) => {}
        Err(e) => tracing::debug!(agent = agent.id, "not paused: {e}"),
    }
}

/// Stops paused agents, the longest-paused first, while the host is short of memory.
async fn relieve_memory(lc: &Arc<Lifecycle>, agents: &[Agent]) {
    let min_free = lc.config().sandbox.min_free_memory_mb;
    if min_free == 0 {
        return;
    }
    let paused: Vec<PausedAgent> = agents
        .iter()
        .filter(|a| a.state == AgentState::Paused)
        .filter_map(|a| {
            Some(PausedAgent {
                id: a.id.clone(),
                paused_at: lc.paused_at(&a.id)?,
                memory_mb: a.memory_mb,
            })
        })
        .collect();
    if paused.is_empty() {
        return;
    }
    let Some(available) = pressure::available_mb() else {
        return;
    };
    for id in pressure::choose(paused, available, min_free) {
        tracing::info!(
            agent = id,
            "the host has {available} MiB of memory available (sandbox.min_free_memory_mb is \
             {min_free}); stopping this paused agent"
        );
        stop_paused(lc, &id).await;
    }
}

async fn stop(lc: &Arc<Lifecycle>, id: &str) {
    if let Err(e) = lc.stop(id).await {
        tracing::debug!(agent = id, "not put to sleep: {e}");
    }
}

/// Stops `id` only if it is still paused (a use may have thawed it since the look).
async fn stop_paused(lc: &Arc<Lifecycle>, id: &str) {
    if let Err(e) = lc.stop_paused(id).await {
        tracing::debug!(agent = id, "not put to sleep: {e}");
    }
}
