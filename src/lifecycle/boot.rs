//! A sandbox's boot, seen from the server: the token each start hands out (or stages in a
//! stopped sandbox ahead of its next start), the check a dialling sandboxd must pass, and the
//! hello that makes the agent run, or the wait that fails it when none comes; what the tunnel
//! asks of the server ([`TunnelHost`]).

use std::sync::Arc;
use std::time::Duration;

use agenthold_proto::ProcessInfo;

use super::{Lifecycle, LifecycleError, START_TIMEOUT};
use crate::activity::ActivityTracker;
use crate::metrics::Metrics;
use crate::model::AgentState::*;
use crate::store::{hash_token, new_token};
use crate::tunnel::registry::Registry;
use crate::tunnel::{BootRefusal, TunnelHost};

impl Lifecycle {
    /// Whether a sandbox that dials the tunnel as agent `id` with boot `token` may connect: the
    /// token is the one its current start handed out, and the agent is starting or running; or
    /// `id` is a warm pool entry and the token the one it was started with.
    pub async fn authorize_boot(&self, id: &str, token: &str) -> Result<(), BootRefusal> {
        let stored = self.store.boot_token_hash(id).await.ok().flatten();
        let Some(hash) = stored.filter(|h| crate::store::verify_token(token, h)) else {
            // Not an agent's boot: a warm pool entry's, or none.
            if self.is_pool_boot(id, token).await {
                return Ok(());
            }
            return Err(BootRefusal::InvalidToken);
        };
        match self.store.get_agent(id).await {
            Ok(a) if matches!(a.state, Starting | Running | Paused) => {
                self.boots_lock().insert(id.to_string(), hash);
                Ok(())
            }
            Ok(a) => Err(BootRefusal::NotStarted(a.state)),
            Err(_) => Err(BootRefusal::InvalidToken),
        }
    }

    pub(super) fn boots_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, String>> {
        self.boots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The boot of agent `id`'s connected sandboxd (its token's hash), if one is known.
    pub(super) fn boot_of(&self, id: &str) -> Option<String> {
        self.boots_lock().get(id).cloned()
    }

    /// For a start the server did not make: `error` if sandboxd never says hello.
    pub(crate) async fn await_hello(self: Arc<Self>, id: String) {
        // This boot (started outside) used the staged token, if there was one.
        self.take_staged_boot(&id);
        let boot_hash = self.store.boot_token_hash(&id).await.ok().flatten();
        if let Err(e) = self.tunnels.wait(&id, START_TIMEOUT).await {
            let message = format!("sandboxd did not connect: {e}");
            match boot_hash {
                Some(hash) => self.fail_boot(&id, &hash, message).await,
                None => self.fail(&id, &[Starting], message).await,
            }
        }
    }

    /// Has the driver put the next boot's token into the sandbox that just stopped, so that
    /// waking it (what a person waits for) skips that step. Each start still gets a token of its
    /// own: this one serves the next start only, ours or one from outside. Done while the agent
    /// is `stopping`, so no start of ours can overlap it. Best effort: when it fails, the start
    /// hands over a token itself.
    pub(super) async fn stage_next_boot(&self, id: &str) {
        let Ok(agent) = self.store.get_agent(id).await else {
            return;
        };
        let token = new_token();
        match self.driver.stage_boot(&self.spec(&agent), &token).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::debug!(agent = id, "staging the next boot failed: {e}");
                return;
            }
        }
        // The sandbox holds this token now; a start from outside presents it.
        if let Err(e) = self
            .store
            .set_boot_token_hash(id, Some(&hash_token(&token)))
            .await
        {
            tracing::warn!(agent = id, "storing the staged boot token failed: {e}");
            return;
        }
        self.staged_boots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), token);
    }

    pub(super) fn take_staged_boot(&self, id: &str) -> Option<String> {
        self.staged_boots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }

    /// sandboxd said hello on a valid session: the agent runs.
    pub async fn on_hello(self: &Arc<Self>, id: &str) {
        self.activity.touch(id);
        match self.settle(id, &[Starting], Running).await {
            Ok(_) => {}
            // Already running: its tunnel dropped and came back.
            Err(LifecycleError::Conflict { state: Running, .. }) => {
                self.metrics.sandboxd_reconnected();
            }
            Err(e) => {
                tracing::debug!(agent = id, "hello did not change the state: {e}");
                return;
            }
        }
        self.setup_after_hello(id);
    }
}

#[async_trait::async_trait]
impl TunnelHost for Lifecycle {
    async fn authorize_boot(&self, id: &str, token: &str) -> Result<(), BootRefusal> {
        Lifecycle::authorize_boot(self, id, token).await
    }

    async fn on_hello(self: Arc<Self>, id: &str) {
        Lifecycle::on_hello(&self, id).await
    }

    fn tunnels(&self) -> &Registry {
        Lifecycle::tunnels(self)
    }

    fn activity(&self) -> &ActivityTracker {
        Lifecycle::activity(self)
    }

    fn process_reported(&self, id: &str, info: ProcessInfo) {
        self.hub.process(id, info);
    }

    fn metrics(&self) -> &Metrics {
        Lifecycle::metrics(self)
    }

    fn ping_interval(&self) -> Duration {
        self.config().sandbox.ping_interval
    }

    fn is_paused(&self, id: &str) -> bool {
        self.paused_at(id).is_some()
    }
}
