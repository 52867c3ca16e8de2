//! Every change of an agent's state goes through here, which publishes it (decorated) to SSE
//! clients and waiters, so that no move is made unannounced. A move is either ours (an
//! operation began it: stamped, so the driver's late news of older events cannot undo it) or
//! observed (found at boot, a hello, a change made outside: announced, not stamped).

use std::collections::HashMap;
use std::time::SystemTime;

use super::{Lifecycle, LifecycleError};
use crate::events::AgentEvent;
use crate::model::{Agent, AgentState, AgentState::*};

impl Lifecycle {
    /// Announces `agent` as it now is; also for changes that are not moves (its setup's state).
    pub(super) fn publish(&self, agent: &Agent) {
        self.note_pause_state(agent);
        self.hub
            .publish(AgentEvent::Changed(Box::new(self.decorate(agent.clone()))));
    }

    /// A move an operation of ours makes: stamped, so that driver events from before it are not
    /// taken for news about the operation.
    pub(super) async fn transition(
        &self,
        id: &str,
        from: &[AgentState],
        to: AgentState,
        op: &'static str,
    ) -> Result<Agent, LifecycleError> {
        let before = SystemTime::now();
        let agent = self
            .store
            .transition(id, from, to)
            .await
            .map_err(|e| LifecycleError::from_store(e, op))?;
        self.moved_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), before);
        if to == Starting {
            self.driver_starts_lock().insert(id.to_string(), None);
        }
        self.publish(&agent);
        Ok(agent)
    }

    /// A move the server observes rather than makes (found at boot, a hello, a change made
    /// outside): published, but not stamped as ours, so the driver's events from before it still
    /// count. A sleeping sandbox has no session: its tunnel is dropped before the move is
    /// announced, so nobody who hears of it finds the old session still up.
    pub(super) async fn settle(
        &self,
        id: &str,
        from: &[AgentState],
        to: AgentState,
    ) -> Result<Agent, LifecycleError> {
        let agent = self
            .store
            .transition(id, from, to)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be settled"))?;
        if to == Sleeping {
            self.tunnels.disconnect(id);
        }
        self.publish(&agent);
        Ok(agent)
    }

    /// Whether an event that happened `at` is older than the lifecycle's last move of `id`.
    pub(super) fn older_than_last_move(&self, id: &str, at: SystemTime) -> bool {
        self.moved_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .is_some_and(|moved| at < *moved)
    }

    /// Records a failed operation; the agent shows `error` with `message`.
    pub(super) async fn fail(&self, id: &str, from: &[AgentState], message: String) {
        tracing::warn!(agent = id, "{message}");
        match self.store.fail(id, from, &message).await {
            Ok(agent) => self.publish(&agent),
            Err(e) => tracing::debug!(agent = id, "not marked as failed: {e}"),
        }
    }

    /// The sandbox failed without the server asking: from `from`, the agent goes to `error` with
    /// `why`, its session dropped before that is announced.
    pub(super) async fn fail_outside(&self, id: &str, from: &[AgentState], why: &str) {
        match self.store.fail(id, from, why).await {
            Ok(agent) => {
                tracing::warn!(agent = id, "{why}");
                self.tunnels.disconnect(id);
                self.publish(&agent);
            }
            Err(e) => tracing::debug!(agent = id, "not marked as failed: {e}"),
        }
    }

    /// `error` for a boot whose sandboxd never said hello, unless the agent has left that boot
    /// (it failed, stopped, or was started again) in the meantime.
    pub(super) async fn fail_boot(&self, id: &str, boot_hash: &str, message: String) {
        match self.store.fail_boot(id, boot_hash, &message).await {
            Ok(agent) => {
                tracing::warn!(agent = id, "{message}");
                self.publish(&agent);
            }
            Err(e) => tracing::debug!(agent = id, "earlier boot's timeout ignored: {e}"),
        }
    }

    /// The agent's row is gone: what the server keeps of it in memory goes too, and its
    /// removal is announced.
    pub(super) fn deleted(&self, id: String) {
        self.take_staged_boot(&id);
        self.moved_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        self.driver_starts_lock().remove(&id);
        self.activity.forget(&id);
        self.forget_pause(&id);
        self.hub.forget_processes(&id);
        self.hub.egress_log().forget(&id);
        self.hub.publish(AgentEvent::Deleted(id));
    }

    pub(super) fn driver_starts_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, Option<SystemTime>>> {
        self.driver_starts.lock().unwrap_or_else(|e| e.into_inner())
    }
}
