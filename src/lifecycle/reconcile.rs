//! Settling every agent with what the driver really has, at startup: operations a crash
//! interrupted are finished, changes made outside are taken in, leftovers are removed.

use std::collections::HashSet;
use std::sync::Arc;

use super::Lifecycle;
use crate::driver::SandboxStatus;
use crate::metrics::{OpKind, Repair};
use crate::model::AgentState::*;

#[derive(Debug, Default, PartialEq)]
pub struct Report {
    pub resumed: usize,
    pub now_sleeping: usize,
    pub now_starting: usize,
    pub orphans_removed: usize,
}

/// Runs once before the API opens. Resumed operations go on in the background.
pub async fn reconcile(lc: &Arc<Lifecycle>) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let repairs = lc.metrics.repairs();
    let agents = lc.store.list_agents().await?;
    for agent in &agents {
        let id = agent.id.clone();
        match agent.state {
            Creating => {
                lc.spawn_op(OpKind::create, id);
                report.resumed += 1;
                repairs.record(Repair::resumed_operation);
            }
            Starting => {
                lc.spawn_op(OpKind::start, id);
                report.resumed += 1;
                repairs.record(Repair::resumed_operation);
            }
            Stopping => {
                lc.spawn_op(OpKind::stop, id);
                report.resumed += 1;
                repairs.record(Repair::resumed_operation);
            }
            Rebuilding => {
                lc.spawn_op(OpKind::rebuild, id);
                report.resumed += 1;
                repairs.record(Repair::resumed_operation);
            }
            Destroying => {
                lc.spawn_op(OpKind::destroy, id);
                report.resumed += 1;
                repairs.record(Repair::resumed_operation);
            }
            Running => match lc.driver.inspect(&id).await? {
                SandboxStatus::Running => {
                    // Its sandboxd reconnects by itself; if it never does, the agent fails.
                    tokio::spawn(lc.clone().await_hello(id));
                }
                SandboxStatus::Stopped | SandboxStatus::Missing => {
                    // Died of something while the server was down (out of memory): say so.
                    if let Some(why) = lc.driver.failure_reason(&id).await {
                        lc.failed_outside(&id, why).await;
                        repairs.record(Repair::found_stopped);
                    } else if lc.settle(&id, &[Running], Sleeping).await.is_ok() {
                        tracing::info!(agent = id, "was running before the restart; now sleeping");
                        report.now_sleeping += 1;
                        repairs.record(Repair::found_stopped);
                    }
                }
            },
            Sleeping => {
                if lc.driver.inspect(&id).await? == SandboxStatus::Running
                    && lc.settle(&id, &[Sleeping], Starting).await.is_ok()
                {
                    tracing::info!(agent = id, "was started outside agenthold");
                    tokio::spawn(lc.clone().await_hello(id));
                    report.now_starting += 1;
                    repairs.record(Repair::found_started);
                }
            }
            Error => {}
        }
    }
    let known: HashSet<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    for sandbox in lc.driver.list().await? {
        if !known.contains(sandbox.id.as_str()) {
            tracing::warn!(
                sandbox = sandbox.id,
                "removing a sandbox that belongs to no agent"
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
        lc.on_driver_event(event, at).await;
    }
}
