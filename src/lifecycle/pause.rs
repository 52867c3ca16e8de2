//! Light sleep: a paused agent's sandbox is frozen (the cgroup freezer), so its processes,
//! memory, terminal sessions and open files are kept while it gets no CPU, and any use thaws it
//! at once. Pausing and thawing one agent are serialized by its freeze lock, so that a wake
//! never finds a sandbox frozen under it: the sleeper decides on idleness inside the lock, after
//! every use that began before has touched the agent's activity.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::view::idle_time;
use super::{Lifecycle, LifecycleError};
use crate::model::{Agent, AgentState::*};

impl Lifecycle {
    /// Pauses a running agent now (`POST …/pause`).
    pub async fn pause(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        match self.freeze(id, |_| true).await? {
            Some(agent) => Ok(self.decorate(agent)),
            None => Err(LifecycleError::Refused(format!(
                "agent {id} was not paused"
            ))),
        }
    }

    /// Pauses `id` if `still_idle` says so once the freeze lock is held: `None` when it does
    /// not.
    pub(super) async fn freeze(
        &self,
        id: &str,
        still_idle: impl FnOnce(&Agent) -> bool,
    ) -> Result<Option<Agent>, LifecycleError> {
        // Counted before the lock: a use that begins while this waits for it, or once it is
        // held, saw the agent running and goes on to the sandbox, so the pause is undone below
        // (`POST …/pause` asks nothing of idleness that would see that use).
        let uses = self.activity.uses(id);
        let _held = self.freeze_guard(id).await;
        let agent = self
            .store
            .get_agent(id)
            .await
            .map_err(|e| LifecycleError::from_store(e, "pause"))?;
        if agent.state != Running {
            return Err(LifecycleError::Conflict {
                id: id.to_string(),
                state: agent.state,
                op: "pause",
            });
        }
        if !still_idle(&agent) {
            return Ok(None);
        }
        self.driver.pause(id).await?;
        match self.transition(id, &[Running], Paused, "pause").await {
            // A use that began while the sandbox was being frozen saw it running and went on
            // to it (a wake touches the activity before it looks for a pause): it must not wait
            // on a frozen sandbox, so the pause is undone at once.
            Ok(_) if self.activity.uses(id) != uses => {
                self.thaw_held(id).await?;
                Ok(None)
            }
            Ok(agent) => Ok(Some(agent)),
            Err(e) => {
                // It moved on meanwhile (a stop or destroy began): whatever it does next needs
                // the sandbox thawed.
                if let Err(thaw) = self.driver.unpause(id).await {
                    tracing::warn!(agent = id, "thawing after a pause that lost a race: {thaw}");
                }
                Err(e)
            }
        }
    }

    /// Stops agent `id` if it is still paused once its freeze lock is held (the sleeper's deep
    /// sleep and memory pressure): a use that thawed it meanwhile keeps it running, and one
    /// that comes after finds it stopping and wakes it once the stop is over.
    pub(super) async fn stop_paused(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        let _held = self.freeze_guard(id).await;
        self.stop_from(id, &[Paused]).await
    }

    /// Thaws a paused agent (true when this call did); one that is not paused is left as it
    /// is. A sandbox that will not thaw puts the agent in `error` (a start or a destroy gets it
    /// out).
    pub(super) async fn thaw(&self, id: &str) -> Result<bool, LifecycleError> {
        let _held = self.freeze_guard(id).await;
        self.thaw_held(id).await
    }

    /// [`Lifecycle::thaw`] with agent `id`'s freeze lock held by the caller.
    async fn thaw_held(&self, id: &str) -> Result<bool, LifecycleError> {
        let state = self
            .store
            .get_agent(id)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be woken"))?
            .state;
        if state != Paused {
            return Ok(false);
        }
        if let Err(e) = self.driver.unpause(id).await {
            let why = format!("thawing the paused sandbox failed: {e}");
            self.fail(id, &[Paused], why.clone()).await;
            return Err(LifecycleError::WakeFailed(why));
        }
        self.activity.touch(id);
        match self.transition(id, &[Paused], Running, "be woken").await {
            Ok(_) => Ok(true),
            // Moved on meanwhile (a stop, thawing it itself): the caller reads the state anew.
            Err(LifecycleError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Thaws agent `id` if it is paused, for a use that never starts a sleeping agent
    /// (attaching to a terminal session, ending one): a paused agent's sessions are there,
    /// frozen.
    pub async fn thaw_for_use(&self, id: &str) -> Result<(), LifecycleError> {
        if self.paused_at(id).is_some() {
            self.activity.touch(id);
            self.thaw(id).await?;
        }
        Ok(())
    }

    /// When agent `id` was last seen to become paused (by this server run), if it is paused.
    pub fn paused_at(&self, id: &str) -> Option<DateTime<Utc>> {
        self.paused_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .copied()
    }

    /// Keeps [`Lifecycle::paused_at`] in step with `agent`'s state as published.
    pub(super) fn note_pause_state(&self, agent: &Agent) {
        let mut paused = self.paused_since.lock().unwrap_or_else(|e| e.into_inner());
        if agent.state == Paused {
            paused.entry(agent.id.clone()).or_insert_with(Utc::now);
        } else {
            paused.remove(&agent.id);
        }
    }

    /// How many `idle_minute` units `agent` stays paused before it is stopped; 0: it is never
    /// paused.
    pub fn deep_sleep_minutes(&self, agent: &Agent) -> u32 {
        agent
            .deep_sleep_minutes
            .unwrap_or_else(|| self.config().sandbox.default_deep_sleep_minutes)
    }

    /// When paused `agent` is due to be stopped.
    pub(super) fn deep_sleep_at(&self, agent: &Agent) -> Option<DateTime<Utc>> {
        let since = self.paused_at(&agent.id)?;
        let span = idle_time(&self.config().sandbox, self.deep_sleep_minutes(agent));
        since.checked_add_signed(span)
    }

    /// Agent `id`'s freeze lock, held until the guard drops. Its entry goes with the last
    /// holder, so ids that come and go (destroyed agents, warm pool entries, an event about a
    /// container that is no agent's) leave nothing behind.
    pub(super) async fn freeze_guard(&self, id: &str) -> FreezeGuard<'_> {
        let lock = self
            .freeze_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone();
        FreezeGuard {
            held: Some(lock.lock_owned().await),
            lc: self,
            id: id.to_string(),
        }
    }

    /// Forgets what pausing kept of agent `id`, which is gone.
    pub(super) fn forget_pause(&self, id: &str) {
        self.paused_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

/// A held freeze lock (see [`Lifecycle::freeze_guard`]).
pub(super) struct FreezeGuard<'a> {
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
    lc: &'a Lifecycle,
    id: String,
}

impl Drop for FreezeGuard<'_> {
    fn drop(&mut self) {
        let mut locks = self
            .lc
            .freeze_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The map's reference and this guard's alone: nobody waits, so the entry goes. One that
        // comes after makes a new lock, which is free, as this one is about to be.
        if locks
            .get(&self.id)
            .is_some_and(|lock| Arc::strong_count(lock) <= 2)
        {
            locks.remove(&self.id);
        }
        drop(locks);
        self.held.take();
    }
}
