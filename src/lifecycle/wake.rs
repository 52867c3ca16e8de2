//! Waking: what every operation that needs the sandbox (an exec, a process call, a file
//! operation, a terminal, a session's prompt) does before it uses an agent. It thaws a paused
//! agent, starts a sleeping one (one that is stopping: once the stop is over) and waits for its
//! session, at most `server.wake_timeout`; its rules (which states wait, which give up) live here.
//!
//! The state machine's own limit on a start (the hello within [`START_TIMEOUT`]) is apart: it
//! decides when a start has failed, while `wake_timeout` only bounds how long a caller waits.
//!
//! [`START_TIMEOUT`]: super::START_TIMEOUT

use std::sync::Arc;

use tokio::time::Instant;

use super::{Lifecycle, LifecycleError};
use crate::model::{Agent, AgentState, AgentState::*};
use crate::tunnel::registry::{Link, TunnelError};

impl Lifecycle {
    /// Makes sure the agent is running (starting it if it sleeps or is stopping) and returns
    /// its session. `on_wait` runs once if the caller has to wait, so a terminal can say so.
    /// Gives up after `server.wake_timeout` with [`LifecycleError::WakeTimeout`].
    pub async fn wake(
        self: &Arc<Self>,
        id: &str,
        on_wait: impl FnOnce(),
    ) -> Result<Link, LifecycleError> {
        // Only an agent is woken: a warm pool entry has a session under the id its agent will
        // have, but no row until a create claims it, and nobody reaches it before that.
        self.store
            .get_agent(id)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be used"))?;
        self.activity.touch(id);
        // A paused sandbox keeps its session, frozen: thawed first, it answers at once.
        if self.paused_at(id).is_some() {
            self.thaw(id).await?;
        }
        if let Some(handle) = self.tunnels.get(id) {
            return Ok(handle);
        }
        let limit = self.config().server.wake_timeout;
        let deadline = Instant::now() + limit;
        let mut on_wait = Some(on_wait);
        let mut events = self.hub.subscribe();
        // Whether this wake may still start the agent: until it did, or saw it on its way up
        // without us. One found asleep (or stopping) after that was put to sleep meanwhile, by
        // someone who meant it.
        let mut may_start = true;
        let mut first = true;
        let mut last_state = Sleeping;
        let waited = async {
            loop {
                if let Some(handle) = self.tunnels.get(id) {
                    return Ok(handle);
                }
                let agent = self
                    .store
                    .get_agent(id)
                    .await
                    .map_err(|e| LifecycleError::from_store(e, "be used"))?;
                last_state = agent.state;
                match agent.state {
                    Sleeping | Stopping if may_start => {
                        may_start = false;
                        if let Some(f) = on_wait.take() {
                            f();
                        }
                        // A start that finds the agent stopping waits for the stop to end.
                        match self.start_by(id, deadline).await {
                            Ok(_) | Err(LifecycleError::Conflict { .. }) => {}
                            Err(e) => return Err(e),
                        }
                        first = false;
                        continue;
                    }
                    // Paused without a session (after a server restart, its sandboxd frozen
                    // before it could dial again): thawed, it dials in.
                    Paused => {
                        self.thaw(id).await?;
                        may_start = false;
                    }
                    Running | Starting | Creating | Rebuilding => may_start = false,
                    Error if !first => {
                        return Err(LifecycleError::WakeFailed(agent.error.unwrap_or_default()))
                    }
                    state => {
                        return Err(LifecycleError::Conflict {
                            id: id.to_string(),
                            state,
                            op: "be used",
                        })
                    }
                }
                first = false;
                if let Some(f) = on_wait.take() {
                    f();
                }
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::select! {
                    r = self.tunnels.wait(id, left) => {
                        return r.map_err(|source| LifecycleError::Tunnel { id: id.to_string(), source });
                    }
                    _ = events.recv() => {}
                }
            }
        };
        let outcome = tokio::time::timeout_at(deadline, waited).await;
        match outcome {
            Ok(Err(LifecycleError::Tunnel {
                source: TunnelError::Timeout(_),
                ..
            }))
            | Err(_) => Err(LifecycleError::WakeTimeout {
                id: id.to_string(),
                state: last_state,
                waited: limit,
            }),
            Ok(r) => r,
        }
    }

    /// Waits while agent `id` is `stopping`, until `deadline`; returns it as it then is.
    pub(super) async fn wait_out_stop(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<Agent, LifecycleError> {
        let mut events = self.hub.subscribe();
        let waited = async {
            loop {
                let agent = self
                    .store
                    .get_agent(id)
                    .await
                    .map_err(|e| LifecycleError::from_store(e, "start"))?;
                if agent.state != Stopping {
                    return Ok(agent);
                }
                // Lagging behind only means reading the store again.
                let _ = events.recv().await;
            }
        };
        tokio::time::timeout_at(deadline, waited)
            .await
            .map_err(|_| LifecycleError::WakeTimeout {
                id: id.to_string(),
                state: AgentState::Stopping,
                waited: self.config().server.wake_timeout,
            })?
    }

    /// When a wait that begins now gives up (`server.wake_timeout` from now).
    pub(super) fn wake_deadline(&self) -> Instant {
        Instant::now() + self.config().server.wake_timeout
    }
}
