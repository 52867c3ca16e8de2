//! Waking: what a terminal, an exec or a file request does before it uses an agent. It starts a
//! sleeping agent and waits for its session, which is the only wait on an agent's state that
//! callers make, so its rules (which states wait, which give up) live apart.

use std::sync::Arc;
use std::time::Duration;

use super::{Lifecycle, LifecycleError, START_TIMEOUT};
use crate::model::AgentState::*;
use crate::tunnel::registry::{Link, TunnelError};

impl Lifecycle {
    /// Makes sure the agent is running (starting it if it sleeps) and returns its session.
    /// `on_wait` runs once if the caller has to wait, so a terminal can say so.
    pub async fn wake(
        self: &Arc<Self>,
        id: &str,
        on_wait: impl FnOnce(),
    ) -> Result<Link, LifecycleError> {
        self.activity.touch(id);
        if let Some(handle) = self.tunnels.get(id) {
            return Ok(handle);
        }
        let agent = self.get(id).await?;
        match agent.state {
            Sleeping => match self.start(id).await {
                Ok(_) | Err(LifecycleError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            },
            Running | Starting | Creating | Rebuilding => {}
            state => {
                return Err(LifecycleError::Conflict {
                    id: id.to_string(),
                    state,
                    op: "be used",
                })
            }
        }
        on_wait();
        let mut events = self.hub.subscribe();
        let waited = async {
            loop {
                if let Some(handle) = self.tunnels.get(id) {
                    return Ok(handle);
                }
                let agent = self.store.get_agent(id).await;
                match agent {
                    Ok(a) if a.state == Error => {
                        return Err(LifecycleError::WakeFailed(a.error.unwrap_or_default()))
                    }
                    Ok(a) if matches!(a.state, Stopping | Sleeping | Destroying) => {
                        return Err(LifecycleError::Conflict {
                            id: id.to_string(),
                            state: a.state,
                            op: "be used",
                        })
                    }
                    Ok(_) => {}
                    Err(e) => return Err(LifecycleError::from_store(e, "be used")),
                }
                tokio::select! {
                    r = self.tunnels.wait(id, START_TIMEOUT) => {
                        return r.map_err(|source| LifecycleError::Tunnel { id: id.to_string(), source });
                    }
                    _ = events.recv() => {}
                }
            }
        };
        tokio::time::timeout(START_TIMEOUT + Duration::from_secs(5), waited)
            .await
            .map_err(|_| LifecycleError::Tunnel {
                id: id.to_string(),
                source: TunnelError::Timeout(START_TIMEOUT),
            })?
    }
}
