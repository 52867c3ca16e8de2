//! Changes the server did not make: the driver's events (`docker stop`, `docker start`,
//! `docker pause` and `unpause`, a container removed, a sandbox killed for lack of memory). Events arrive late and may echo our
//! own operations, so each is checked against the driver's view now and the last move we made.

use std::sync::Arc;
use std::time::SystemTime;

use super::{Lifecycle, LifecycleError};
use crate::driver::{DriverEvent, SandboxStatus};
use crate::model::AgentState::*;

impl Lifecycle {
    /// A change the driver saw that the server did not make (for example `docker stop`).
    /// Events arrive late and may echo one of our own operations, so each is checked against
    /// what the driver sees now before it changes anything.
    pub async fn on_driver_event(self: &Arc<Self>, event: DriverEvent, at: SystemTime) {
        let id = event.agent().to_string();
        // A pause or thaw of ours between reading the driver's view and settling on it would be
        // undone by news already stale: with the freeze lock held, neither can run in between.
        let _frozen_out = match event {
            DriverEvent::Paused(_) | DriverEvent::Unpaused(_) => Some(self.freeze_guard(&id).await),
            _ => None,
        };
        // The operation that move began settles the agent itself, whatever happened before it.
        if self.older_than_last_move(&id, at) {
            tracing::debug!(
                agent = id,
                ?event,
                "driver event older than our last move; ignored"
            );
            return;
        }
        let now = match self.driver.inspect(&id).await {
            Ok(status) => status,
            Err(e) => {
                tracing::debug!(agent = id, "driver event not checked: {e}");
                return;
            }
        };
        match (event, now) {
            (DriverEvent::Stopped(_), SandboxStatus::Stopped) => {
                match self.driver.failure_reason(&id).await {
                    Some(why) => self.failed_outside(&id, why).await,
                    None => self.stopped_outside(&id, false, at).await,
                }
            }
            (DriverEvent::Stopped(_), SandboxStatus::Missing)
            | (DriverEvent::Removed(_), SandboxStatus::Missing) => {
                self.stopped_outside(&id, true, at).await
            }
            (DriverEvent::Started(_), SandboxStatus::Running) => {
                if self.settle(&id, &[Sleeping], Starting).await.is_ok() {
                    tracing::info!(agent = id, "the sandbox was started outside agenthold");
                    tokio::spawn(self.clone().await_hello(id));
                }
            }
            (DriverEvent::Paused(_), SandboxStatus::Paused) => {
                if self.settle(&id, &[Running], Paused).await.is_ok() {
                    tracing::info!(agent = id, "the sandbox was paused outside agenthold");
                }
            }
            (DriverEvent::Unpaused(_), SandboxStatus::Running) => {
                if self.settle(&id, &[Paused], Running).await.is_ok() {
                    tracing::info!(agent = id, "the sandbox was unpaused outside agenthold");
                    self.activity.touch(&id);
                }
            }
            (event, now) => {
                tracing::debug!(
                    agent = id,
                    ?event,
                    ?now,
                    "driver event no longer true; ignored"
                )
            }
        }
    }

    /// The sandbox stopped, or went (`gone`), without the server asking. A running agent now
    /// sleeps. A starting one never came up: that is a failed start, and its `error` says how
    /// the sandbox ended (a sandboxd that exits at boot leaves nothing else to go on).
    async fn stopped_outside(&self, id: &str, gone: bool, at: SystemTime) {
        match self.settle(id, &[Running, Paused], Sleeping).await {
            Ok(_) => {
                tracing::info!(agent = id, "the sandbox stopped outside agenthold");
                return;
            }
            Err(LifecycleError::Conflict {
                state: Starting, ..
            }) => {}
            Err(_) => return,
        }
        let before_our_start = match self.driver_starts_lock().get(id) {
            Some(None) => true,
            Some(Some(returned)) => at < *returned,
            None => false,
        };
        if gone && before_our_start {
            tracing::debug!(
                agent = id,
                "the container is gone while the driver starts it; the start makes it anew"
            );
            return;
        }
        let why = if gone {
            "the sandbox's container was removed before sandboxd said hello; start the agent \
             again to make it anew"
                .to_string()
        } else {
            let how = self
                .driver
                .exit_report(id)
                .await
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            format!(
                "the sandbox stopped before sandboxd said hello{how}; start the agent again, \
                 or rebuild it if its image is at fault"
            )
        };
        // Only from `starting`: a hello that won the race stays running.
        self.fail_outside(id, &[Starting], &why).await;
    }

    /// The sandbox stopped by itself for a reason that makes it a failure (it ran out of
    /// memory): a running agent goes to `error` with `why`.
    pub(crate) async fn failed_outside(&self, id: &str, why: String) {
        self.fail_outside(id, &[Running, Paused, Starting], &why)
            .await;
    }
}
