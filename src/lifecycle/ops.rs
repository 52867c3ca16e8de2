//! The operations: each is accepted with one guarded move from a settled state (else 409), then
//! worked in the background by a `run_*` that ends in the next state or in `error`.

use std::sync::Arc;
use std::time::SystemTime;

use super::{Lifecycle, LifecycleError, CREATE_FAILED, START_TIMEOUT};
use crate::driver::PullSink;
use crate::metrics::{OpKind, Outcome};
use crate::model::{Agent, AgentPatch, AgentState, AgentState::*, NewAgent};
use crate::store::{hash_token, new_token};
use crate::teams::access::{decide, Decision, Standing};

/// A lifetime whose deadline no date holds (only with an absurd `sandbox.idle_minute`).
fn past_any_date() -> LifecycleError {
    LifecycleError::BadChange {
        field: "ttlMinutes",
        why: "ttlMinutes gives a deadline past any date this server keeps".to_string(),
    }
}

/// States from which an operation may begin.
const SETTLED: &[AgentState] = &[Running, Paused, Sleeping, Error];

impl Lifecycle {
    /// Runs the background work of operation `kind` on `id`, timed for `/metrics`: it ends when
    /// the agent settles (a create or rebuild goes on into its start), and its outcome is
    /// whether the agent ended in `error`.
    pub(crate) fn spawn_op(self: &Arc<Self>, kind: OpKind, id: String) {
        let lc = self.clone();
        tokio::spawn(async move {
            let began = std::time::Instant::now();
            match kind {
                OpKind::create => lc.clone().run_create(id.clone()).await,
                OpKind::start => lc.clone().run_start(id.clone()).await,
                OpKind::stop => lc.clone().run_stop(id.clone()).await,
                OpKind::rebuild => lc.clone().run_rebuild(id.clone()).await,
                OpKind::destroy => lc.clone().run_destroy(id.clone()).await,
            }
            let outcome = match lc.store.get_agent(&id).await {
                Ok(a) if a.state == Error => Outcome::error,
                _ => Outcome::ok,
            };
            lc.metrics.observe_op(kind, outcome, began.elapsed());
        });
    }

    pub async fn create(self: &Arc<Self>, mut new: NewAgent) -> Result<Agent, LifecycleError> {
        new.expires_at = match new.ttl_minutes {
            Some(t) => Some(self.deadline(t).ok_or_else(past_any_date)?),
            None => None,
        };
        if let Some(agent) = self.claim(&new).await? {
            return Ok(agent);
        }
        let agent = self
            .store
            .insert_agent(new)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be created"))?;
        self.activity.touch(&agent.id);
        self.publish(&agent);
        self.spawn_op(OpKind::create, agent.id.clone());
        self.deadlines_changed();
        Ok(self.decorate(agent))
    }

    /// Changes the agent's settings. A new `ttl_minutes` is counted from now (0 or null takes
    /// the lifetime away).
    /// `standing` is the caller's on the agent: a change of `access` is the owner's or an
    /// admin's ([`AgentPatch::act`]).
    pub async fn patch(
        &self,
        id: &str,
        mut patch: AgentPatch,
        standing: Standing,
    ) -> Result<Agent, LifecycleError> {
        let access = self
            .store
            .agent_facts(id)
            .ok_or_else(|| LifecycleError::NotFound(id.to_string()))?
            .access;
        if decide(standing, access, patch.act()) != Decision::Allow {
            return Err(LifecycleError::Forbidden(
                "only the agent's owner and admins (not with a supervised token) change its access \
                 and which of its commands wait for approval"
                    .to_string(),
            ));
        }
        patch.ttl_minutes = patch.ttl_minutes.map(|t| t.filter(|&n| n > 0));
        patch.expires_at = match patch.ttl_minutes.flatten() {
            Some(t) => Some(self.deadline(t).ok_or_else(past_any_date)?),
            None => None,
        };
        patch.egress_default = self.config().sandbox.egress.default.clone();
        let ttl_changed = patch.ttl_minutes.is_some();
        let agent = self
            .store
            .patch_agent(
                id,
                patch,
                &[Running, Paused, Sleeping, Error, Starting, Creating],
            )
            .await
            .map_err(|e| LifecycleError::from_store(e, "be changed"))?;
        self.publish(&agent);
        if ttl_changed {
            self.deadlines_changed();
        }
        Ok(self.decorate(agent))
    }

    /// Gives the agent `ttl_minutes` more to live, counted from now (its own lifetime again
    /// when `None`; an agent without one has nothing to keep alive).
    pub async fn keep_alive(
        &self,
        id: &str,
        ttl_minutes: Option<u32>,
    ) -> Result<Agent, LifecycleError> {
        let ttl = match ttl_minutes {
            Some(t) => t,
            None => self.get(id).await?.ttl_minutes.ok_or_else(|| {
                LifecycleError::Refused(format!(
                    "agent {id} has no ttlMinutes to keep alive; give one"
                ))
            })?,
        };
        let expires_at = self.deadline(ttl).ok_or_else(past_any_date)?;
        let agent = self
            .store
            .set_ttl(id, ttl, expires_at)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be kept alive"))?;
        self.publish(&agent);
        self.deadlines_changed();
        Ok(self.decorate(agent))
    }

    /// Starts a sleeping or failed agent, or thaws a paused one. One that is stopping is
    /// started once its stop is over, waited for at most `server.wake_timeout`
    /// ([`LifecycleError::WakeTimeout`]).
    pub async fn start(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        if self.thaw(id).await? {
            return self.get(id).await;
        }
        self.start_by(id, self.wake_deadline()).await
    }

    /// [`Lifecycle::start`], waiting for a stop until `deadline`.
    pub(super) async fn start_by(
        self: &Arc<Self>,
        id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Agent, LifecycleError> {
        let now = self.wait_out_stop(id, deadline).await?;
        // A create that failed (Docker unreachable, say) may have made nothing, not even the
        // home, which a start would then take for one removed outside: the start is that
        // create, done again, which goes on into the start.
        let create_failed = now.state == Error
            && now
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with(CREATE_FAILED));
        if create_failed {
            if let Ok(agent) = self.transition(id, &[Error], Creating, "start").await {
                self.activity.touch(id);
                self.spawn_op(OpKind::create, id.to_string());
                return Ok(self.decorate(agent));
            }
        }
        let agent = self
            .transition(id, &[Sleeping, Error], Starting, "start")
            .await?;
        self.activity.touch(id);
        self.spawn_op(OpKind::start, id.to_string());
        Ok(self.decorate(agent))
    }

    pub async fn stop(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        // A paused sandbox is thawed by the driver's stop, so its processes see the stop.
        self.stop_from(id, &[Running, Paused]).await
    }

    /// Stops agent `id` if it is in one of `from`.
    pub(super) async fn stop_from(
        self: &Arc<Self>,
        id: &str,
        from: &[AgentState],
    ) -> Result<Agent, LifecycleError> {
        let agent = self.transition(id, from, Stopping, "stop").await?;
        self.spawn_op(OpKind::stop, id.to_string());
        Ok(self.decorate(agent))
    }

    pub async fn rebuild(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        let agent = self.transition(id, SETTLED, Rebuilding, "rebuild").await?;
        self.spawn_op(OpKind::rebuild, id.to_string());
        Ok(self.decorate(agent))
    }

    pub async fn destroy(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        let agent = self
            .transition(id, SETTLED, Destroying, "be destroyed")
            .await?;
        self.spawn_op(OpKind::destroy, id.to_string());
        Ok(agent)
    }

    /// A sink for the driver that reports agent `id`'s pull to the event hub.
    fn pull_sink(&self, id: &str) -> PullSink {
        let hub = self.hub.clone();
        let id = id.to_string();
        PullSink::new(move |progress| hub.pull(&id, progress))
    }

    // Background work. Each `run_*` may also be called by reconcile to finish an operation that
    // a crash interrupted, which is why each driver call is idempotent.

    pub(crate) async fn run_create(self: Arc<Self>, id: String) {
        let Ok(agent) = self.store.get_agent(&id).await else {
            return;
        };
        let created = self
            .driver
            .create(&self.spec(&agent), &self.pull_sink(&id))
            .await;
        self.hub.forget_pull(&id);
        if let Err(e) = created {
            return self
                .fail(&id, &[Creating], format!("{CREATE_FAILED}: {e}"))
                .await;
        }
        self.go_on_to_start(id, Creating).await;
    }

    /// A create or a rebuild is done: the agent goes on into its start.
    async fn go_on_to_start(self: Arc<Self>, id: String, from: AgentState) {
        if self
            .transition(&id, &[from], Starting, "start")
            .await
            .is_ok()
        {
            self.run_start(id).await;
        }
    }

    pub(crate) async fn run_start(self: Arc<Self>, id: String) {
        let Ok(agent) = self.store.get_agent(&id).await else {
            return;
        };
        let token = self.take_staged_boot(&id).unwrap_or_else(new_token);
        let boot_hash = hash_token(&token);
        if let Err(e) = self.store.set_boot_token_hash(&id, Some(&boot_hash)).await {
            return self
                .fail(
                    &id,
                    &[Starting],
                    format!("storing the boot token failed: {e}"),
                )
                .await;
        }
        self.activity.reset_cpu(&id);
        // The old session, if any, belongs to the previous boot.
        self.tunnels.disconnect(&id);
        let started = self
            .driver
            .start(&self.spec(&agent), &token, &self.pull_sink(&id))
            .await;
        self.driver_starts_lock()
            .insert(id.clone(), Some(SystemTime::now()));
        self.hub.forget_pull(&id);
        if let Err(e) = started {
            return self
                .fail(
                    &id,
                    &[Starting],
                    format!("starting the sandbox failed: {e}"),
                )
                .await;
        }
        if let Err(e) = self.tunnels.wait(&id, START_TIMEOUT).await {
            self.fail_boot(
                &id,
                &boot_hash,
                format!("sandboxd did not connect: {e}; see the sandbox's log"),
            )
            .await;
        }
    }

    pub(crate) async fn run_stop(self: Arc<Self>, id: String) {
        if let Err(e) = self.driver.stop(&id).await {
            return self
                .fail(
                    &id,
                    &[Stopping],
                    format!("stopping the sandbox failed: {e}"),
                )
                .await;
        }
        self.tunnels.disconnect(&id);
        self.hub.sandbox_stopped(&id);
        self.stage_next_boot(&id).await;
        // The token the sandbox now holds (the staged one, or else its last boot's) stays valid:
        // a sandbox started again from outside (`docker start`) presents it, and the tunnel
        // accepts it only while the agent is starting or running.
        let _ = self.transition(&id, &[Stopping], Sleeping, "sleep").await;
    }

    pub(crate) async fn run_rebuild(self: Arc<Self>, id: String) {
        let Ok(agent) = self.store.get_agent(&id).await else {
            return;
        };
        self.tunnels.disconnect(&id);
        let rebuilt = self
            .driver
            .rebuild(&self.spec(&agent), &self.pull_sink(&id))
            .await;
        self.hub.forget_pull(&id);
        // The new container starts with no processes.
        self.hub.forget_processes(&id);
        if let Err(e) = rebuilt {
            return self
                .fail(
                    &id,
                    &[Rebuilding],
                    format!("rebuilding the sandbox failed: {e}"),
                )
                .await;
        }
        if let Err(e) = self.store.clear_needs_rebuild(&id).await {
            tracing::warn!(agent = id, "clearing needsRebuild failed: {e}");
        }
        // A new container has lost what the script installed outside the home: forgetting
        // its run makes the next hello run it again.
        if self.setup_on_rebuild(&agent) {
            if let Err(e) = self.store.set_setup(&id, None).await {
                tracing::warn!(agent = id, "forgetting the setup's run failed: {e}");
            }
        }
        self.go_on_to_start(id, Rebuilding).await;
    }

    pub(crate) async fn run_destroy(self: Arc<Self>, id: String) {
        self.tunnels.disconnect(&id);
        if let Err(e) = self.driver.destroy(&id).await {
            return self
                .fail(
                    &id,
                    &[Destroying],
                    format!("destroying the sandbox failed: {e}"),
                )
                .await;
        }
        match self.store.delete_agent(&id).await {
            Ok(()) => self.deleted(id),
            Err(e) => {
                self.fail(
                    &id,
                    &[Destroying],
                    format!("removing the agent failed: {e}"),
                )
                .await
            }
        }
    }
}
