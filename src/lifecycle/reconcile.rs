//! Settling every agent with what the driver really has, at startup: operations a crash
//! interrupted are finished, changes made outside are taken in, leftovers are removed.

use std::collections::HashSet;
use std::sync::Arc;

use super::Lifecycle;
use crate::driver::{DriverEvent, SandboxStatus};
use crate::metrics::{OpKind, Repair};
use crate::model::AgentState::{self, *};

#[derive(Debug, Default, PartialEq)]
pub struct Report {
    pub resumed: usize,
    pub now_sleeping: usize,
    pub now_starting: usize,
    pub now_running: usize,
    pub now_paused: usize,
    pub orphans_removed: usize,
}

/// The operation an agent in `state` was in the middle of: a crash cut it short, and it is run
/// again from its start (each driver call is idempotent).
fn interrupted(state: AgentState) -> Option<OpKind> {
    match state {
        Creating => Some(OpKind::create),
        Starting => Some(OpKind::start),
        Stopping => Some(OpKind::stop),
        Rebuilding => Some(OpKind::rebuild),
        Destroying => Some(OpKind::destroy),
        Running | Paused | Sleeping | Error => None,
    }
}

/// Runs once before the API opens. Resumed operations go on in the background.
pub async fn reconcile(lc: &Arc<Lifecycle>) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let repairs = lc.metrics.repairs();
    let agents = lc.store.list_agents().await?;
    for agent in &agents {
        let id = agent.id.clone();
        if let Some(kind) = interrupted(agent.state) {
            lc.spawn_op(kind, id);
            report.resumed += 1;
            repairs.record(Repair::resumed_operation);
            continue;
        }
        match agent.state {
            Running | Paused => match lc.driver.inspect(&id).await? {
                SandboxStatus::Running => {
                    if agent.state == Paused && lc.settle(&id, &[Paused], Running).await.is_ok() {
                        tracing::info!(agent = id, "was unpaused outside agenthold");
                        report.now_running += 1;
                        repairs.record(Repair::found_started);
                    }
                    // Its sandboxd reconnects by itself; if it never does, the agent fails.
                    tokio::spawn(lc.clone().await_hello(id));
                }
                // Frozen, its sandboxd cannot dial in: it does once a wake thaws it.
                SandboxStatus::Paused => {
                    if agent.state == Running && lc.settle(&id, &[Running], Paused).await.is_ok() {
                        tracing::info!(agent = id, "was paused outside agenthold");
                        report.now_paused += 1;
                        repairs.record(Repair::found_paused);
                    } else {
                        lc.note_pause_state(agent);
                    }
                }
                SandboxStatus::Stopped | SandboxStatus::Missing => {
                    // Died of something while the server was down (out of memory): say so.
                    if let Some(why) = lc.driver.failure_reason(&id).await {
                        lc.failed_outside(&id, why).await;
                        repairs.record(Repair::found_stopped);
                    } else if lc.settle(&id, &[Running, Paused], Sleeping).await.is_ok() {
                        tracing::info!(agent = id, "was running before the restart; now sleeping");
                        report.now_sleeping += 1;
                        repairs.record(Repair::found_stopped);
                    }
                }
            },
            Sleeping => match lc.driver.inspect(&id).await? {
                SandboxStatus::Running => {
                    if lc.settle(&id, &[Sleeping], Starting).await.is_ok() {
                        tracing::info!(agent = id, "was started outside agenthold");
                        tokio::spawn(lc.clone().await_hello(id));
                        report.now_starting += 1;
                        repairs.record(Repair::found_started);
                    }
                }
                // Started and paused outside: a wake thaws it, and its sandboxd dials in.
                SandboxStatus::Paused => {
                    if lc.settle(&id, &[Sleeping], Paused).await.is_ok() {
                        tracing::info!(agent = id, "was started and paused outside agenthold");
                        report.now_paused += 1;
                        repairs.record(Repair::found_paused);
                    }
                }
                SandboxStatus::Stopped | SandboxStatus::Missing => {}
            },
            Creating | Starting | Stopping | Rebuilding | Destroying | Error => {}
        }
    }
    let entries = lc.reconcile_pool().await?;
    let known: HashSet<&str> = agents
        .iter()
        .map(|a| a.id.as_str())
        .chain(entries.iter().map(String::as_str))
        .collect();
    for sandbox in lc.driver.list().await? {
        if !known.contains(sandbox.id.as_str()) {
            tracing::warn!(
                sandbox = sandbox.id,
                "removing a sandbox that belongs to no agent and no warm pool entry"
            );
            lc.driver.destroy(&sandbox.id).await?;
            report.orphans_removed += 1;
            repairs.record(Repair::orphan_removed);
        }
    }
    tracing::info!(?report, "reconciled");
    Ok(report)
}

/// Follows the driver's events for as long as the server runs.
pub async fn follow_driver_events(lc: Arc<Lifecycle>) {
    use futures::StreamExt;
    let mut events = lc.driver.events();
    while let Some((event, at)) = events.next().await {
        match event {
            // Settled under the agent's freeze lock, which a pause or thaw holds across a
            // Docker call: waiting here would hold up every other agent's events meanwhile.
            DriverEvent::Paused(_) | DriverEvent::Unpaused(_) => {
                let lc = lc.clone();
                tokio::spawn(async move { lc.on_driver_event(event, at).await });
            }
            _ => lc.on_driver_event(event, at).await,
        }
    }
}
