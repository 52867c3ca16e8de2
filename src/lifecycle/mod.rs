//! The state machine: every operation moves the state with one guarded update, then does its
//! work in the background and ends in the next state or in `error` with a message.
//!
//! Operations are only accepted from settled states (`running`, `sleeping`, `error`), so at most
//! one piece of background work runs per agent; everything else answers 409.
//!
//! Every change of state goes through this module, which publishes it (decorated, see
//! [`Lifecycle::decorate`]) to SSE clients and waiters: nothing else holds the store or the driver.
//! [`reconcile`] settles agents with the driver at boot and on its events, and [`sleeper`] puts
//! idle ones to sleep.

pub mod reconcile;
pub mod runtimes;
pub mod setup;
pub mod sleeper;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::Utc;

use crate::activity::ActivityTracker;
use crate::config::Config;
use crate::driver::{Driver, DriverError, DriverEvent, SandboxSpec, SandboxStatus};
use crate::events::{AgentEvent, EventHub};
use crate::metrics::{Metrics, OpKind, Outcome};
use crate::model::{Agent, AgentPatch, AgentState, NewAgent};
use crate::store::{hash_token, new_token, Store, StoreError};
use crate::tunnel::registry::{Link, Registry, TunnelError};

use AgentState::*;

/// States from which an operation may begin.
const SETTLED: &[AgentState] = &[Running, Sleeping, Error];
/// How long a start waits for sandboxd to say hello before the agent goes to `error`.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How the message of an agent whose create failed begins (see [`Lifecycle::start`]).
const CREATE_FAILED: &str = "creating the sandbox failed";

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("no agent with id {0:?}")]
    NotFound(String),
    #[error("agent {id} is {state}; it cannot {op} now")]
    Conflict {
        id: String,
        state: AgentState,
        op: &'static str,
    },
    #[error("an agent named {0:?} already exists")]
    NameTaken(String),
    /// The change is not allowed for this agent as it is; `field` is the request's field.
    #[error("{why}")]
    BadChange { field: &'static str, why: String },
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("agent {id}: {source}")]
    Tunnel { id: String, source: TunnelError },
    #[error("the agent went to error while waking: {0}")]
    WakeFailed(String),
    #[error("store: {0}")]
    Store(StoreError),
    /// Not possible for this agent as it is (a conflict); the message says why.
    #[error("{0}")]
    Refused(String),
}

/// What the egress proxy asks about agents.
#[async_trait::async_trait]
impl crate::egress::Sandboxes for Lifecycle {
    async fn agent_at(&self, local: std::net::IpAddr, peer: std::net::IpAddr) -> Option<String> {
        self.driver.sandbox_at(local, peer).await
    }

    async fn rules(&self, id: &str) -> Option<(String, crate::egress::EgressRules)> {
        let agent = self.get(id).await.ok()?;
        // `decorate` fills in the default for agents made before rules existed.
        Some((agent.name, agent.egress.unwrap_or_default()))
    }
}

/// What the egress resolver asks about agents.
#[async_trait::async_trait]
impl crate::egress::dns::Askers for Lifecycle {
    async fn asker(&self, peer: std::net::IpAddr) -> Option<(String, std::net::IpAddr)> {
        self.driver.sandbox_from(peer).await
    }

    async fn rules_of(&self, id: &str) -> Option<crate::egress::EgressRules> {
        crate::egress::Sandboxes::rules(self, id)
            .await
            .map(|(_, rules)| rules)
    }
}

impl LifecycleError {
    fn from_store(e: StoreError, op: &'static str) -> LifecycleError {
        match e {
            StoreError::NotFound(id) => LifecycleError::NotFound(id),
            StoreError::Conflict { id, state } => LifecycleError::Conflict { id, state, op },
            StoreError::NameTaken(n) => LifecycleError::NameTaken(n),
            StoreError::BadChange { field, why } => LifecycleError::BadChange { field, why },
            other => LifecycleError::Store(other),
        }
    }
}

pub struct Lifecycle {
    store: Store,
    driver: Arc<dyn Driver>,
    hub: EventHub,
    tunnels: Registry,
    activity: ActivityTracker,
    config: Arc<Config>,
    /// Boot tokens the driver put into sleeping sandboxes (see `stage_next_boot`), by agent.
    /// In memory only: after a server restart a start hands over a new token itself.
    staged_boots: std::sync::Mutex<HashMap<String, String>>,
    /// When the lifecycle last moved each agent's state itself (taken just before the move), so
    /// that a driver event from before it, arriving late, is not taken for news about the
    /// operation that move began (an outside `docker rm` seen after an API start began).
    moved_at: std::sync::Mutex<HashMap<String, SystemTime>>,
    /// Agents in `starting` by an operation of ours: `None` while the driver starts the
    /// sandbox, then when that call returned. A container gone before then is no news for the
    /// start: the driver makes it anew (removed from outside just before, say, with Docker's
    /// event arriving after the start began).
    driver_starts: std::sync::Mutex<HashMap<String, Option<SystemTime>>>,
    metrics: Arc<Metrics>,
    /// Agents whose setup script a task follows to its end.
    setup_followers: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    /// Held from the check that no setup runs to the record of the one started, so that a
    /// hello and a `POST …/setup` at the same moment start one script, not two.
    setup_start: tokio::sync::Mutex<()>,
    runtimes: runtimes::Runtimes,
}

/// Why a sandbox's tunnel connection is refused (see [`Lifecycle::authorize_boot`]).
#[derive(Debug, thiserror::Error)]
pub enum BootRefusal {
    /// One answer for an unknown agent and a wrong token, so that ids cannot be probed.
    #[error("invalid boot token")]
    InvalidToken,
    #[error("agent is {0}; only a starting or running agent may connect")]
    NotStarted(AgentState),
}

impl Lifecycle {
    pub fn new(
        store: Store,
        driver: Arc<dyn Driver>,
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        runtimes: runtimes::Runtimes,
    ) -> Lifecycle {
        Lifecycle {
            store,
            driver,
            hub: EventHub::default(),
            tunnels: Registry::new(config.sandbox.max_streams_per_agent),
            activity: ActivityTracker::default(),
            config,
            staged_boots: Default::default(),
            moved_at: Default::default(),
            driver_starts: Default::default(),
            metrics,
            setup_followers: Default::default(),
            setup_start: Default::default(),
            runtimes,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The sandboxes' tunnels, by agent.
    pub fn tunnels(&self) -> &Registry {
        &self.tunnels
    }

    /// Use of each agent, for the sleeper.
    pub fn activity(&self) -> &ActivityTracker {
        &self.activity
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Every agent change from now on, as published.
    /// Where agent changes are announced; the egress proxy announces its decisions there too.
    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<AgentEvent> {
        self.hub.subscribe()
    }

    /// The driver's name (`docker`, `fake`).
    pub fn driver_kind(&self) -> &'static str {
        self.driver.kind()
    }

    /// The runtimes agents may ask for, and the default.
    pub fn runtimes(&self) -> &runtimes::Runtimes {
        &self.runtimes
    }

    /// What the driver makes `agent`'s sandbox from.
    fn spec(&self, agent: &Agent) -> SandboxSpec {
        SandboxSpec::of(agent, &self.runtimes.default)
    }

    /// Why an agent cannot be given a disk limit here, if it cannot.
    pub fn disk_limits_unavailable(&self) -> Option<String> {
        self.driver.disk_limits_unavailable()
    }

    /// The limit on each sandbox's writes outside its home and `/tmp`, if enforced.
    pub fn rootfs_limit_mb(&self) -> Option<u64> {
        self.driver.rootfs_limit_mb()
    }

    /// Lets the driver finish what it does in the background, at server shutdown.
    pub async fn shutdown(&self) {
        self.driver.shutdown().await
    }

    /// Whether a sandbox that dials the tunnel as agent `id` with boot `token` may connect: the
    /// token is the one its current start handed out, and the agent is starting or running.
    pub async fn authorize_boot(&self, id: &str, token: &str) -> Result<(), BootRefusal> {
        let stored = self.store.boot_token_hash(id).await.ok().flatten();
        if !stored.is_some_and(|h| crate::store::verify_token(token, &h)) {
            return Err(BootRefusal::InvalidToken);
        }
        match self.store.get_agent(id).await {
            Ok(a) if matches!(a.state, Starting | Running) => Ok(()),
            Ok(a) => Err(BootRefusal::NotStarted(a.state)),
            Err(_) => Err(BootRefusal::InvalidToken),
        }
    }

    /// Adds what only the running server knows: the egress rules of an agent made before
    /// they existed (the server's default), activity, the time the agent will sleep, and
    /// the image pull under way.
    pub fn decorate(&self, mut agent: Agent) -> Agent {
        agent
            .egress
            .get_or_insert_with(|| self.config.sandbox.egress.default.clone());
        if agent.runtime.is_empty() {
            agent.runtime = self.runtimes.default.clone();
        }
        if matches!(agent.state, Destroying) {
            return agent;
        }
        agent.pull = self.hub.pull_of(&agent.id);
        let view = self.activity.view(&agent.id);
        agent.last_activity_at = Some(view.last_activity_at);
        // An agent with no idle time never sleeps.
        agent.sleeps_at = if agent.state == Running && agent.idle_minutes > 0 {
            let idle = sleeper::idle_time(&self.config.sandbox, agent.idle_minutes);
            let from = if view.busy {
                Utc::now()
            } else {
                view.last_activity_at
            };
            from.checked_add_signed(idle)
        } else {
            None
        };
        agent
    }

    fn publish(&self, agent: &Agent) {
        self.hub
            .publish(AgentEvent::Changed(Box::new(self.decorate(agent.clone()))));
    }

    pub async fn get(&self, id: &str) -> Result<Agent, LifecycleError> {
        let agent = self
            .store
            .get_agent(id)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be read"))?;
        Ok(self.decorate(agent))
    }

    pub async fn list(&self) -> Result<Vec<Agent>, LifecycleError> {
        let agents = self
            .store
            .list_agents()
            .await
            .map_err(|e| LifecycleError::from_store(e, "be listed"))?;
        Ok(agents.into_iter().map(|a| self.decorate(a)).collect())
    }

    async fn transition(
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

    /// A move that reconcile finds already made outside (at boot): published, but not stamped
    /// as ours, so the driver's events from before it still count.
    async fn settle(
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
        self.publish(&agent);
        Ok(agent)
    }

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

    /// Whether an event that happened `at` is older than the lifecycle's last move of `id`.
    fn older_than_last_move(&self, id: &str, at: SystemTime) -> bool {
        self.moved_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .is_some_and(|moved| at < *moved)
    }

    /// Records a failed operation; the agent shows `error` with `message`.
    async fn fail(&self, id: &str, from: &[AgentState], message: String) {
        tracing::warn!(agent = id, "{message}");
        match self.store.fail(id, from, &message).await {
            Ok(agent) => self.publish(&agent),
            Err(e) => tracing::debug!(agent = id, "not marked as failed: {e}"),
        }
    }

    pub async fn create(self: &Arc<Self>, new: NewAgent) -> Result<Agent, LifecycleError> {
        let agent = self
            .store
            .insert_agent(new)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be created"))?;
        self.activity.touch(&agent.id);
        self.publish(&agent);
        self.spawn_op(OpKind::create, agent.id.clone());
        Ok(self.decorate(agent))
    }

    pub async fn patch(&self, id: &str, patch: AgentPatch) -> Result<Agent, LifecycleError> {
        let agent = self
            .store
            .patch_agent(id, patch, &[Running, Sleeping, Error, Starting, Creating])
            .await
            .map_err(|e| LifecycleError::from_store(e, "be changed"))?;
        self.publish(&agent);
        Ok(self.decorate(agent))
    }

    pub async fn start(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        // A create that failed (Docker unreachable, say) may have made nothing, not even the
        // home, which a start would then take for one removed outside: the start is that
        // create, done again, which goes on into the start.
        let create_failed = self.store.get_agent(id).await.is_ok_and(|a| {
            a.state == Error && a.error.is_some_and(|e| e.starts_with(CREATE_FAILED))
        });
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
        let agent = self.transition(id, &[Running], Stopping, "stop").await?;
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

    // Background work. Each `run_*` may also be called by reconcile to finish an operation that
    // a crash interrupted, which is why each driver call is idempotent.

    pub(crate) async fn run_create(self: Arc<Self>, id: String) {
        let Ok(agent) = self.store.get_agent(&id).await else {
            return;
        };
        let created = self
            .driver
            .create(&self.spec(&agent), &self.hub.pull_sink(&id))
            .await;
        self.hub.forget_pull(&id);
        if let Err(e) = created {
            return self
                .fail(&id, &[Creating], format!("{CREATE_FAILED}: {e}"))
                .await;
        }
        if self
            .transition(&id, &[Creating], Starting, "start")
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
            .start(&self.spec(&agent), &token, &self.hub.pull_sink(&id))
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

    fn driver_starts_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<SystemTime>>> {
        self.driver_starts.lock().unwrap_or_else(|e| e.into_inner())
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

    /// `error` for a boot whose sandboxd never said hello, unless the agent has left that boot
    /// (it failed, stopped, or was started again) in the meantime.
    async fn fail_boot(&self, id: &str, boot_hash: &str, message: String) {
        match self.store.fail_boot(id, boot_hash, &message).await {
            Ok(agent) => {
                tracing::warn!(agent = id, "{message}");
                self.publish(&agent);
            }
            Err(e) => tracing::debug!(agent = id, "earlier boot's timeout ignored: {e}"),
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

    /// Has the driver put the next boot's token into the sandbox that just stopped, so that
    /// waking it (what a person waits for) skips that step. Each start still gets a token of its
    /// own: this one serves the next start only, ours or one from outside. Done while the agent
    /// is `stopping`, so no start of ours can overlap it. Best effort: when it fails, the start
    /// hands over a token itself.
    async fn stage_next_boot(&self, id: &str) {
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

    fn take_staged_boot(&self, id: &str) -> Option<String> {
        self.staged_boots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }

    pub(crate) async fn run_rebuild(self: Arc<Self>, id: String) {
        let Ok(agent) = self.store.get_agent(&id).await else {
            return;
        };
        self.tunnels.disconnect(&id);
        let rebuilt = self
            .driver
            .rebuild(&self.spec(&agent), &self.hub.pull_sink(&id))
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
        if self
            .transition(&id, &[Rebuilding], Starting, "start")
            .await
            .is_ok()
        {
            self.run_start(id).await;
        }
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
            Ok(()) => {
                self.take_staged_boot(&id);
                self.moved_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                self.driver_starts_lock().remove(&id);
                self.activity.forget(&id);
                self.hub.forget_processes(&id);
                self.hub.publish(AgentEvent::Deleted(id));
            }
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

    /// sandboxd said hello on a valid session: the agent runs.
    pub async fn on_hello(self: &Arc<Self>, id: &str) {
        self.activity.touch(id);
        match self.store.transition(id, &[Starting], Running).await {
            Ok(agent) => self.publish(&agent),
            // Already running: its tunnel dropped and came back.
            Err(StoreError::Conflict { state: Running, .. }) => {
                self.metrics.sandboxd_reconnected();
            }
            Err(e) => {
                tracing::debug!(agent = id, "hello did not change the state: {e}");
                return;
            }
        }
        self.setup_after_hello(id);
    }

    /// The sandbox stopped, or went (`gone`), without the server asking. A running agent now
    /// sleeps. A starting one never came up: that is a failed start, and its `error` says how
    /// the sandbox ended (a sandboxd that exits at boot leaves nothing else to go on).
    async fn stopped_outside(&self, id: &str, gone: bool, at: SystemTime) {
        match self.store.transition(id, &[Running], Sleeping).await {
            Ok(agent) => {
                tracing::info!(agent = id, "the sandbox stopped outside agenthold");
                self.tunnels.disconnect(id);
                self.publish(&agent);
                return;
            }
            Err(StoreError::Conflict {
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
        match self.store.fail(id, &[Starting], &why).await {
            Ok(agent) => {
                tracing::warn!(agent = id, "{why}");
                self.tunnels.disconnect(id);
                self.publish(&agent);
            }
            Err(e) => tracing::debug!(agent = id, "not marked as failed: {e}"),
        }
    }

    /// The sandbox stopped by itself for a reason that makes it a failure (it ran out of
    /// memory): a running agent goes to `error` with `why`.
    pub(crate) async fn failed_outside(&self, id: &str, why: String) {
        match self.store.fail(id, &[Running, Starting], &why).await {
            Ok(agent) => {
                tracing::warn!(agent = id, "{why}");
                self.tunnels.disconnect(id);
                self.publish(&agent);
            }
            Err(e) => tracing::debug!(agent = id, "not marked as failed: {e}"),
        }
    }

    /// A change the driver saw that the server did not make (for example `docker stop`).
    /// Events arrive late and may echo one of our own operations, so each is checked against
    /// what the driver sees now before it changes anything.
    pub async fn on_driver_event(self: &Arc<Self>, event: DriverEvent, at: SystemTime) {
        let id = match &event {
            DriverEvent::Started(id) | DriverEvent::Stopped(id) | DriverEvent::Removed(id) => {
                id.clone()
            }
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
                if let Ok(agent) = self.store.transition(&id, &[Sleeping], Starting).await {
                    tracing::info!(agent = id, "the sandbox was started outside agenthold");
                    self.publish(&agent);
                    tokio::spawn(self.clone().await_hello(id));
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
}
