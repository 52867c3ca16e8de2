//! Warm pools: per preset, `warm` sandboxes made and started ahead of need (all presets
//! together within `sandbox.warm_max`), each for an agent id chosen ahead, so its Docker names
//! and labels already name the agent that claims it. An entry has no agent row: nothing reaches
//! it through the API, and the egress proxy finds no rules for it (so it gets no egress at all).
//! A create whose sandbox would be the same as an entry's claims it ([`Lifecycle::claim`]); the
//! keeper ([`run`]) makes entries one at a time, refills after a claim, and removes stale ones
//! (a preset changed by a reload) and those whose sandboxd went away.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Lifecycle, LifecycleError, START_TIMEOUT};
use crate::agents::spec::{self, AgentRequest, Allowed};
use crate::config::Config;
use crate::driver::{DriverError, PullSink, SandboxSpec};
use crate::model::{new_agent_id, Agent, NewAgent};
use crate::store::pool::{EntryState, PoolEntry};
use crate::store::{hash_token, new_token};

/// How often the keeper looks even when nothing woke it (a sandboxd that went away).
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// How long the keeper waits after an entry failed before it tries that again: a broken image
/// must not keep the engine busy.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// One preset's pool, as `GET /api/v1/pool` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    pub preset: String,
    /// The preset's `warm`.
    pub target: u32,
    pub ready: u32,
    pub starting: u32,
}

/// What a preset's pool is to hold.
struct Wanted {
    /// The preset's `warm`.
    warm: u32,
    /// The sandbox a create from the preset that asks for nothing else gets.
    spec: SandboxSpec,
    /// Its [`Lifecycle::pool_digest`] now; `None` when the engine could not say what its
    /// image is (its entries are then neither judged stale nor made, until it can).
    digest: Option<String>,
}

/// What an entry made from `spec`, by a driver whose [`crate::driver::Driver::made_with`] is
/// `made_with`, from the image whose engine id is `image`, is made from, as one string (see
/// [`Lifecycle::pool_digest`]).
fn entry_digest(made_with: &str, spec: &SandboxSpec, image: Option<&str>) -> String {
    format!(
        "{} madeWith={made_with} imageId={}",
        spec.digest(),
        image.unwrap_or("none")
    )
}

/// The sandbox each preset with `warm` above 0 gives a create that asks for nothing else, by
/// preset name, with its digest now; a preset whose settings no longer resolve (a runtime the
/// engine lost) has none.
async fn wanted(lc: &Lifecycle, config: &Config) -> BTreeMap<String, Wanted> {
    let allowed = Allowed {
        defaults: config.sandbox.agent_defaults(),
        presets: &config.presets,
        runtimes: lc.runtimes(),
        no_disk_limits: lc.disk_limits_unavailable(),
    };
    let mut out = BTreeMap::new();
    for (name, preset) in config.presets.iter().filter(|(_, p)| p.warm > 0) {
        let request = AgentRequest {
            // Any valid name: only the sandbox's settings are read.
            name: "pool".to_string(),
            preset: Some(name.clone()),
            ..Default::default()
        };
        match spec::resolve(request, &allowed) {
            Ok(new) => {
                let spec = SandboxSpec::of_new(&new);
                let digest = match lc.pool_digest(&spec).await {
                    Ok(d) => Some(d),
                    Err(e) => {
                        tracing::warn!(preset = name, "its warm pool is left as it is: {e}");
                        None
                    }
                };
                let warm = preset.warm;
                out.insert(name.clone(), Wanted { warm, spec, digest });
            }
            Err(e) => tracing::warn!(preset = name, "its warm pool is not kept: {e}"),
        }
    }
    out
}

impl Lifecycle {
    /// Claims a ready pool entry for `new` when one of its preset was made from the sandbox
    /// `new` asks for but its CPUs and memory (a create that changes the image, runtime, disk or
    /// `allowRoot` is a cold one): the entry becomes agent `new` with the entry's id, is given
    /// the agent's CPUs and memory, and runs at once, its preset's setup following as after a
    /// cold start. `None`: no entry fits.
    pub(super) async fn claim(
        self: &Arc<Self>,
        new: &NewAgent,
    ) -> Result<Option<Agent>, LifecycleError> {
        let Some(preset) = &new.preset else {
            return Ok(None);
        };
        // A preset that keeps no pool has nothing to claim: its creates spend no engine call
        // on the digest (the keeper removes what entries it had left).
        if self
            .config()
            .presets
            .get(preset)
            .is_none_or(|p| p.warm == 0)
        {
            return Ok(None);
        }
        let digest = match self.pool_digest(&SandboxSpec::of_new(new)).await {
            Ok(digest) => digest,
            Err(e) => {
                // No entry is known to be what a cold create would make now: make it cold.
                tracing::warn!(preset, "no warm pool entry claimed: {e}");
                return Ok(None);
            }
        };
        let claimed = self
            .store
            .claim_pool_entry(preset, &digest, new.clone())
            .await
            .map_err(|e| LifecycleError::from_store(e, "be created"))?;
        let Some((agent, had)) = claimed else {
            return Ok(None);
        };
        let id = agent.id.clone();
        tracing::info!(agent = id, preset, "claimed a warm pool entry");
        let wanted = new.limits();
        if had != Some(wanted) {
            // Stored `needs_rebuild` by the claim: cleared once the sandbox has the agent's
            // limits (unless a change since asks for a rebuild all the same), else it runs with
            // the entry's until a rebuild.
            match self.driver.resize(&id, wanted).await {
                Ok(()) => {
                    if let Err(e) = self.store.clear_needs_rebuild_if_made_as(&id, new).await {
                        tracing::warn!(agent = id, "clearing needs_rebuild failed: {e}");
                    }
                }
                Err(e) => tracing::warn!(
                    agent = id,
                    "giving a claimed entry the agent's limits failed (a rebuild will): {e}"
                ),
            }
        }
        self.pool_wake.notify_one();
        self.activity.touch(&id);
        // As it is now, resized.
        self.publish(&self.get(&id).await.unwrap_or(agent));
        if self.tunnels.is_connected(&id) {
            // Its sandboxd said hello as the entry: that hello makes the agent run now.
            self.on_hello(&id).await;
        } else {
            // Dropped since: it dials again with the same token, which is the agent's now.
            tokio::spawn(self.clone().await_hello(id.clone()));
        }
        self.deadlines_changed();
        Ok(Some(self.get(&id).await?))
    }

    /// What an entry made now from `spec` is made from, as one string: the spec's digest, what
    /// the driver puts into every sandbox, and the image its name stands for now, so that
    /// an image made anew under the same name (a `docker build -t` again) makes the entries of
    /// the old one stale, and no create claims one. An error: the engine could not say.
    async fn pool_digest(&self, spec: &SandboxSpec) -> Result<String, DriverError> {
        let image = self.driver.image_id(&spec.image).await?;
        Ok(entry_digest(
            &self.driver.made_with(),
            spec,
            image.as_deref(),
        ))
    }

    /// Each preset's pool with `warm` above 0, or with entries left, by preset name.
    pub async fn pool_status(&self) -> Result<Vec<PoolStatus>, LifecycleError> {
        let entries = self
            .store
            .list_pool_entries()
            .await
            .map_err(|e| LifecycleError::from_store(e, "be counted"))?;
        let config = self.config();
        let mut by_preset: BTreeMap<String, PoolStatus> = config
            .presets
            .iter()
            .filter(|(_, p)| p.warm > 0)
            .map(|(name, p)| {
                let status = PoolStatus {
                    preset: name.clone(),
                    target: p.warm,
                    ready: 0,
                    starting: 0,
                };
                (name.clone(), status)
            })
            .collect();
        for e in entries {
            let status = by_preset
                .entry(e.preset.clone())
                .or_insert_with(|| PoolStatus {
                    preset: e.preset.clone(),
                    target: 0,
                    ready: 0,
                    starting: 0,
                });
            match e.state {
                EntryState::Ready => status.ready += 1,
                EntryState::Starting => status.starting += 1,
            }
        }
        Ok(by_preset.into_values().collect())
    }

    /// Whether a sandboxd dialling as `id` with a token whose hash is `hash` is entry `id`'s.
    pub(super) async fn is_pool_boot(&self, id: &str, token: &str) -> bool {
        match self.store.pool_boot_token_hash(id).await {
            Ok(Some(hash)) if crate::store::verify_token(token, &hash) => {
                self.boots_lock().insert(id.to_string(), hash);
                true
            }
            _ => false,
        }
    }

    /// Removes entry `id`: its row first, so that a claim racing this either took it (and the
    /// sandbox is the agent's) or finds it gone.
    async fn remove_entry(&self, id: &str, why: &str) {
        match self.store.delete_pool_entry(id).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(entry = id, "removing a warm pool entry failed: {e}");
                return;
            }
        }
        tracing::info!(entry = id, "removing a warm pool entry: {why}");
        self.tunnels.disconnect(id);
        self.boots_lock().remove(id);
        self.activity.forget(id);
        if let Err(e) = self.driver.destroy(id).await {
            // Its sandbox belongs to no agent and no entry now: the next boot's reconcile
            // removes it.
            tracing::warn!(
                entry = id,
                "destroying a warm pool entry's sandbox failed: {e}"
            );
        }
    }

    /// Makes one entry of `preset` from `spec` and waits for its sandboxd's hello; `false`
    /// when that failed (the entry is removed again).
    async fn make_entry(&self, preset: &str, wanted: &Wanted, digest: &str) -> bool {
        let mut spec = wanted.spec.clone();
        spec.id = new_agent_id();
        let token = new_token();
        // The row comes first: a crash after it leaves an entry that reconcile checks, never
        // a sandbox nothing knows of.
        if let Err(e) = self
            .store
            .insert_pool_entry(
                &spec.id,
                preset,
                // Read before the sandbox is made, and replaced by what it was made from once
                // it is (below): a crash between leaves the older, stale at worst.
                digest,
                spec.limits(),
                &hash_token(&token),
            )
            .await
        {
            tracing::warn!(preset, "recording a warm pool entry failed: {e}");
            return false;
        }
        // Made, then started, as a cold create does: a start alone takes a missing home for
        // one removed outside.
        let pull = PullSink::discard();
        let started = match self.driver.create(&spec, &pull).await {
            Ok(()) => {
                self.record_made_from(preset, &spec).await;
                self.driver.start(&spec, &token, &pull).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            tracing::warn!(
                preset,
                entry = spec.id,
                "starting a warm pool entry failed: {e}"
            );
            self.remove_entry(&spec.id, "its start failed").await;
            return false;
        }
        self.await_entry(&spec.id).await
    }

    /// Records the image entry `spec.id`'s sandbox was made from in its digest: the image its
    /// name stood for before the create may have been pulled by it, or made anew meanwhile.
    async fn record_made_from(&self, preset: &str, spec: &SandboxSpec) {
        let image = match self.driver.made_from(&spec.id).await {
            Ok(image) => image,
            Err(e) => {
                tracing::debug!(preset, entry = spec.id, "its image's id is unknown: {e}");
                return;
            }
        };
        let digest = entry_digest(&self.driver.made_with(), spec, image.as_deref());
        if let Err(e) = self.store.set_pool_entry_digest(&spec.id, &digest).await {
            tracing::warn!(
                preset,
                entry = spec.id,
                "recording a warm pool entry failed: {e}"
            );
        }
    }

    /// Waits for entry `id`'s sandboxd to say hello, then counts the entry ready; removes it
    /// if none comes.
    async fn await_entry(&self, id: &str) -> bool {
        if let Err(e) = self.tunnels.wait(id, START_TIMEOUT).await {
            self.remove_entry(id, &format!("sandboxd did not connect: {e}"))
                .await;
            return false;
        }
        match self.store.set_pool_entry_state(id, EntryState::Ready).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(entry = id, "marking a warm pool entry ready failed: {e}");
                false
            }
        }
    }

    /// One look at the pools: removes what is stale or gone, then makes at most one entry,
    /// of the first preset short of its `warm` that has not failed within [`RETRY_AFTER`] (so
    /// that a broken one does not keep the others empty). `true` when it made or tried one
    /// (look again at once).
    async fn keep_pools(&self, failed: &mut BTreeMap<String, tokio::time::Instant>) -> bool {
        let config = self.config();
        let wanted = wanted(self, &config).await;
        let entries = match self.store.list_pool_entries().await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("the pool keeper could not list entries: {e}");
                return false;
            }
        };
        let mut kept: BTreeMap<&str, u32> = BTreeMap::new();
        let mut total = 0u32;
        for entry in &entries {
            let over_max = total >= config.sandbox.warm_max;
            let unfit = self.unfit(entry, &wanted, &kept);
            if let Some(why) = unfit.or(over_max.then_some("the pools are over sandbox.warm_max")) {
                self.remove_entry(&entry.id, why).await;
                continue;
            }
            *kept.entry(entry.preset.as_str()).or_default() += 1;
            total += 1;
        }
        let room = config.sandbox.warm_max.saturating_sub(total);
        if room == 0 {
            return false;
        }
        let now = tokio::time::Instant::now();
        failed.retain(|_, at| now.duration_since(*at) < RETRY_AFTER);
        let short = wanted.iter().find_map(|(name, w)| {
            let is_short = kept.get(name.as_str()).copied().unwrap_or(0) < w.warm;
            let digest = w.digest.as_deref()?;
            (is_short && !failed.contains_key(name)).then_some((name, w, digest))
        });
        let Some((name, w, digest)) = short else {
            return false;
        };
        if !self.make_entry(name, w, digest).await {
            failed.insert(name.clone(), tokio::time::Instant::now());
        }
        true
    }

    /// Why `entry` is to go, if it is: its preset keeps no pool now, or a different one
    /// (stale), it is beyond its preset's `warm`, or its ready sandboxd is gone.
    fn unfit(
        &self,
        entry: &PoolEntry,
        wanted: &BTreeMap<String, Wanted>,
        kept: &BTreeMap<&str, u32>,
    ) -> Option<&'static str> {
        let Some(w) = wanted.get(&entry.preset) else {
            return Some("its preset keeps no warm pool now");
        };
        let changed = w.digest.as_ref().is_some_and(|d| *d != entry.digest);
        if changed || entry.limits != Some(w.spec.limits()) {
            return Some("its preset, its image or how the server makes sandboxes changed (stale)");
        }
        if kept.get(entry.preset.as_str()).copied().unwrap_or(0) >= w.warm {
            return Some("its preset's pool is over its warm");
        }
        if entry.state == EntryState::Ready && !self.tunnels.is_connected(&entry.id) {
            return Some("its sandboxd went away");
        }
        None
    }

    /// At boot: entries whose sandbox still runs wait for their sandboxd to dial in again
    /// (counted `starting` until it does); the others are removed. Returns the ids kept, which
    /// are no orphans.
    pub(super) async fn reconcile_pool(self: &Arc<Self>) -> anyhow::Result<Vec<String>> {
        let mut kept = Vec::new();
        for entry in self.store.list_pool_entries().await? {
            let running =
                self.driver.inspect(&entry.id).await? == crate::driver::SandboxStatus::Running;
            if !running {
                self.remove_entry(&entry.id, "its sandbox is not running after a restart")
                    .await;
                continue;
            }
            self.store
                .set_pool_entry_state(&entry.id, EntryState::Starting)
                .await?;
            let lc = self.clone();
            let id = entry.id.clone();
            tokio::spawn(async move {
                lc.await_entry(&id).await;
                lc.pool_wake.notify_one();
            });
            kept.push(entry.id);
        }
        Ok(kept)
    }
}

/// Keeps the pools at their targets for as long as the server runs: woken by a claim and by a
/// config reload, and every few seconds besides.
pub async fn run(lc: Arc<Lifecycle>) {
    let mut config = lc.config.clone();
    // When each preset's last entry failed to be made.
    let mut failed = BTreeMap::new();
    loop {
        if lc.keep_pools(&mut failed).await {
            continue;
        }
        tokio::select! {
            _ = lc.pool_wake.notified() => {}
            // A reload may have mended a preset that failed: it is tried again at once.
            _ = reloaded(&mut config) => failed.clear(),
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Resolves at the next config reload (never once the config can no longer change).
async fn reloaded(config: &mut tokio::sync::watch::Receiver<Arc<Config>>) {
    if config.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
