//! The state machine: every operation moves the state with one guarded update, then does its
//! work in the background and ends in the next state or in `error` with a message.
//!
//! Operations are only accepted from settled states (`running`, `paused`, `sleeping`, `error`), so at most
//! one piece of background work runs per agent; everything else answers 409, but for a start
//! of an agent that is stopping, which waits for the stop to end (see `wake`).
//!
//! Every change of state goes through `moves`, which publishes it (decorated, see
//! [`Lifecycle::decorate`]) to SSE clients and waiters: nothing else holds the store or the driver.
//! `ops` accepts and runs the operations, `boot` hands out and checks boot tokens and takes
//! the hello, `wake` starts an agent for its user, `conn` hands out the typed connection to its
//! sandbox, `outside` takes in what the driver saw happen, `view` is what others read.
//! `pause` freezes and thaws sandboxes (the light sleep); [`pool`] keeps warm pools and
//! claims their entries.
//! [`reconcile`] settles agents with the driver at boot, [`sleeper`] pauses idle ones and stops
//! those paused long enough (and, under memory pressure, those [`pressure`] picks),
//! and [`expiry`] destroys the ones whose lifetime (`ttlMinutes`) is up.

mod boot;
mod conn;
mod egress;
pub mod expiry;
mod moves;
mod ops;
mod outside;
mod pause;
pub mod pool;
pub mod pressure;
pub mod reconcile;
pub mod setup;
pub mod sleeper;
mod view;
mod wake;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::activity::ActivityTracker;
use crate::agents::runtimes::Runtimes;
use crate::config::Config;
use crate::driver::{Driver, DriverError, SandboxSpec};
use crate::events::{AgentEvent, EventHub};
use crate::metrics::Metrics;
use crate::model::{Agent, AgentState};
use crate::store::{Store, StoreError};
use crate::tunnel::registry::{Registry, TunnelError};

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
    /// A setting that breaks its rule; `field` is the request's field.
    #[error("{why}")]
    BadChange { field: &'static str, why: String },
    /// The change is not possible for this agent as it is (a conflict); `field` is the
    /// request's field.
    #[error("{why}")]
    Unfit { field: &'static str, why: String },
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("agent {id}: {source}")]
    Tunnel { id: String, source: TunnelError },
    #[error("the agent went to error while waking: {0}")]
    WakeFailed(String),
    /// A wake (or a start waiting for a stop) took longer than `server.wake_timeout`.
    #[error(
        "agent {id} is still {state} after {}s (server.wake_timeout); try again",
        waited.as_secs()
    )]
    WakeTimeout {
        id: String,
        state: AgentState,
        waited: Duration,
    },
    /// The agent's sandbox refused or failed an operation of the lifecycle's.
    #[error(transparent)]
    Conn(#[from] crate::tunnel::conn::ConnError),
    #[error("store: {0}")]
    Store(StoreError),
    /// Not possible for this agent as it is (a conflict); the message says why.
    #[error("{0}")]
    Refused(String),
    /// The caller's standing on the agent does not allow this change.
    #[error("{0}")]
    Forbidden(String),
}

impl LifecycleError {
    fn from_store(e: StoreError, op: &'static str) -> LifecycleError {
        match e {
            StoreError::NotFound(id) => LifecycleError::NotFound(id),
            StoreError::Conflict { id, state } => LifecycleError::Conflict { id, state, op },
            StoreError::NameTaken(n) => LifecycleError::NameTaken(n),
            StoreError::BadChange { field, why } => LifecycleError::BadChange { field, why },
            StoreError::Unfit { field, why } => LifecycleError::Unfit { field, why },
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
    /// The config in force: a reload replaces it (see [`crate::config::reload`]), so it is
    /// read anew at each use.
    config: watch::Receiver<Arc<Config>>,
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
    runtimes: Runtimes,
    /// Woken when a deadline is set, moved or taken away, so [`expiry::run`] looks again.
    deadlines: tokio::sync::Notify,
    /// The deadline each agent's `expiring` event was announced for (a new one announces anew).
    expiring_announced: std::sync::Mutex<HashMap<String, chrono::DateTime<chrono::Utc>>>,
    /// The secrets: their placeholders for programs, their grants for the egress proxy.
    secrets: Arc<crate::secrets::Secrets>,
    /// The hash of the boot token each agent's connected sandboxd presented (set when its
    /// tunnel is let in): the boot its placeholders are made for.
    boots: std::sync::Mutex<HashMap<String, String>>,
    /// One lock per agent that pausing and thawing it take (see `pause`).
    freeze_locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// When each paused agent was paused, as published (in memory: after a restart the clock
    /// of a paused agent starts again, as its idle clock does).
    paused_since: std::sync::Mutex<HashMap<String, chrono::DateTime<chrono::Utc>>>,
    /// Wakes the warm pool keeper ([`pool::run`]): an entry was claimed or came back.
    pool_wake: tokio::sync::Notify,
}

impl Lifecycle {
    pub fn new(
        store: Store,
        driver: Arc<dyn Driver>,
        config: watch::Receiver<Arc<Config>>,
        metrics: Arc<Metrics>,
        runtimes: Runtimes,
        secrets: Arc<crate::secrets::Secrets>,
    ) -> Lifecycle {
        let max_streams = config.borrow().sandbox.max_streams_per_agent;
        Lifecycle {
            store,
            driver,
            hub: EventHub::default(),
            tunnels: Registry::new(max_streams),
            activity: ActivityTracker::default(),
            config,
            staged_boots: Default::default(),
            moved_at: Default::default(),
            driver_starts: Default::default(),
            metrics,
            setup_followers: Default::default(),
            setup_start: Default::default(),
            runtimes,
            deadlines: Default::default(),
            expiring_announced: Default::default(),
            secrets,
            boots: Default::default(),
            freeze_locks: Default::default(),
            paused_since: Default::default(),
            pool_wake: Default::default(),
        }
    }

    /// The config in force now; hold it for one use (a request, a decision), not for good.
    pub fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
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

    /// Announces `event` to every subscriber (the sessions' changes go out this way too).
    pub fn announce(&self, event: AgentEvent) {
        self.hub.publish(event);
    }

    /// Each agent's recent egress decisions, and what was refused while its commands ran.
    pub fn egress_log(&self) -> &crate::egress::EgressLog {
        self.hub.egress_log()
    }

    /// What the egress proxy refused for agent `id` while its process `info` ran.
    pub fn egress_denied_of(
        &self,
        id: &str,
        info: &agenthold_proto::ProcessInfo,
    ) -> Vec<crate::egress::Denied> {
        let log = self.hub.egress_log();
        if !info.state.is_running() {
            log.process_ended(id, &info.id);
        }
        log.denied_for_process(id, &info.id)
    }

    /// Every agent change from now on, as published.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<AgentEvent> {
        self.hub.subscribe()
    }

    /// The driver's name (`docker`, `fake`).
    pub fn driver_kind(&self) -> &'static str {
        self.driver.kind()
    }

    /// The runtimes agents may ask for, and the default.
    pub fn runtimes(&self) -> &Runtimes {
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

    /// The networks sandboxes' addresses come from (see [`Driver::sandbox_networks`]).
    pub fn sandbox_networks(&self) -> Vec<ipnet::IpNet> {
        self.driver.sandbox_networks()
    }

    /// Lets the driver finish what it does in the background, at server shutdown.
    pub async fn shutdown(&self) {
        self.driver.shutdown().await
    }
}
