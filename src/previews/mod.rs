//! Previews: a browser opens what an agent serves inside its sandbox, on an origin of its own
//! (`{port}-{agent}.{domain}`), through the tunnel and never the sandbox's network.
//!
//! This module holds the rules: which previews exist (one per agent and port, at most
//! `server.previews.max_per_agent`), who may open one ([`grant`]), the hosts they answer on
//! ([`host`]); [`gateway`] serves them on `server.previews.listen`.

pub mod gateway;
pub mod grant;
pub mod host;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agenthold_proto::ListeningPort;
use chrono::{SecondsFormat, Utc};
use rand::RngCore;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::lifecycle::{Lifecycle, LifecycleError};
use crate::model::previews::{Access, PreviewRecord};
use crate::model::AgentState;
use crate::store::previews::PreviewStoreError;
use crate::store::{hash_token, new_token, Store, StoreError};
use crate::tunnel::conn::ConnError;
use grant::Grants;

/// Where the key that signs preview cookies is kept (made at the first start).
const KEY_SETTING: &str = "preview_cookie_key";

#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    Store(#[from] PreviewStoreError),
    #[error(transparent)]
    Conn(#[from] ConnError),
}

impl From<StoreError> for PreviewError {
    fn from(e: StoreError) -> Self {
        PreviewError::Store(PreviewStoreError::Store(e))
    }
}

/// A new preview's settings.
pub struct NewPreview {
    pub port: u16,
    pub access: Access,
    pub expires_in_minutes: Option<u32>,
}

/// A preview as people see it: the record, its URL, and (once, at creation) its token.
pub struct PreviewView {
    pub record: PreviewRecord,
    pub url: String,
    pub token: Option<String>,
}

pub struct Previews {
    store: Store,
    lc: Arc<Lifecycle>,
    grants: Grants,
    /// The port the preview listener is bound to (`server.previews.listen` may ask for 0).
    listening: u16,
    /// The port the API is bound to, for the sign-in hand-off without `server.public_url`.
    api_port: u16,
    /// The connections open through each preview, ended when it is deleted.
    closers: Mutex<HashMap<String, CancellationToken>>,
    /// Agents a preview request is waking, so a page that reloads does not start another wake.
    waking: Mutex<HashSet<String>>,
    /// Each agent's share of its tunnel's streams for preview connections.
    streams: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Streams of an agent's tunnel (`sandbox.max_streams_per_agent`) that previews leave to the
/// API: however many connections its previews hold, exec, files and terminals still get in.
const STREAMS_LEFT_TO_THE_API: usize = 32;

impl Previews {
    /// The previews of `lc`'s agents, with the cookie key kept in the store (made now if this
    /// is the first start).
    pub async fn new(
        store: Store,
        lc: Arc<Lifecycle>,
        listening: u16,
        api_port: u16,
    ) -> Result<Arc<Previews>, StoreError> {
        let key = match store.get_setting(KEY_SETTING).await? {
            Some(hex_key) => hex::decode(hex_key).unwrap_or_default(),
            None => Vec::new(),
        };
        let key = if key.len() == 32 {
            key
        } else {
            let mut key = vec![0u8; 32];
            rand::rng().fill_bytes(&mut key);
            store.set_setting(KEY_SETTING, &hex::encode(&key)).await?;
            key
        };
        Ok(Arc::new(Previews {
            store,
            lc,
            grants: Grants::new(key),
            listening,
            api_port,
            closers: Mutex::new(HashMap::new()),
            waking: Mutex::new(HashSet::new()),
            streams: Mutex::new(HashMap::new()),
        }))
    }

    /// The origin of agent `name`'s `port`.
    pub fn origin(&self, name: &str, port: u16) -> String {
        host::origin(
            &self.lc.config().server.previews,
            self.listening,
            name,
            port,
        )
    }

    /// The API's origin, where a private preview's host sends a browser to sign in:
    /// `server.public_url`, else the previews' domain at the API's port.
    pub fn api_origin(&self) -> String {
        let config = self.lc.config();
        match &config.server.public_url {
            Some(o) => o.to_string(),
            None => format!("http://{}:{}", config.server.previews.domain, self.api_port),
        }
    }

    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lc
    }

    fn view(&self, record: PreviewRecord, name: &str, token: Option<String>) -> PreviewView {
        let url = host::url(
            &self.lc.config().server.previews,
            self.listening,
            name,
            record.port,
        );
        PreviewView { record, url, token }
    }

    /// Makes a preview of the agent's `port`.
    pub async fn create(
        &self,
        agent_id: &str,
        new: NewPreview,
    ) -> Result<PreviewView, PreviewError> {
        let agent = self.lc.get(agent_id).await?;
        if agent.state == AgentState::Destroying {
            return Err(LifecycleError::Conflict {
                id: agent.id,
                state: agent.state,
                op: "get a preview",
            }
            .into());
        }
        let token = (new.access == Access::Token).then(new_token);
        let now = Utc::now();
        let record = PreviewRecord {
            id: crate::model::new_agent_id(),
            agent_id: agent.id.clone(),
            port: new.port,
            access: new.access,
            token_hash: token.as_deref().map(hash_token),
            created_at: stamp(now),
            expires_at: new
                .expires_in_minutes
                .map(|m| stamp(now + chrono::Duration::minutes(i64::from(m)))),
            deleted_at: None,
        };
        let max = self.lc.config().server.previews.max_per_agent;
        self.store.create_preview(record.clone(), max).await?;
        tracing::info!(
            agent = agent.id,
            port = new.port,
            access = new.access.as_str(),
            "preview made"
        );
        Ok(self.view(record, &agent.name, token))
    }

    /// The agent's live previews, by port.
    pub async fn list(&self, agent_id: &str) -> Result<Vec<PreviewView>, PreviewError> {
        let agent = self.lc.get(agent_id).await?;
        let records = self.store.list_previews(&agent.id).await?;
        Ok(records
            .into_iter()
            .map(|r| self.view(r, &agent.name, None))
            .collect())
    }

    /// Deletes a preview: its URL answers `410` from now on, and the connections open through
    /// it end at once.
    pub async fn delete(&self, agent_id: &str, id: &str) -> Result<(), PreviewError> {
        self.lc.get(agent_id).await?;
        self.store.delete_preview(agent_id, id).await?;
        if let Some(closer) = self.closers().remove(id) {
            closer.cancel();
        }
        Ok(())
    }

    /// What listens in the agent's sandbox; nothing while it sleeps (a listing never wakes
    /// it, nor keeps it awake).
    pub async fn ports(&self, agent_id: &str) -> Result<Vec<ListeningPort>, PreviewError> {
        self.lc.get(agent_id).await?;
        match self.lc.conn(agent_id) {
            Some(conn) => Ok(conn.list_ports().await?),
            None => Ok(Vec::new()),
        }
    }

    fn closers(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.closers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends when preview `id` is deleted.
    pub fn closer(&self, id: &str) -> CancellationToken {
        self.closers().entry(id.to_string()).or_default().clone()
    }

    /// A place for one more preview connection to agent `id`, held as long as the connection;
    /// `None` when its previews hold their whole share of the agent's streams.
    pub fn stream_permit(&self, id: &str) -> Option<OwnedSemaphorePermit> {
        let share = self
            .lc
            .config()
            .sandbox
            .max_streams_per_agent
            .saturating_sub(STREAMS_LEFT_TO_THE_API)
            .max(1);
        let semaphore = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(share)))
            .clone();
        semaphore.try_acquire_owned().ok()
    }

    /// Forgets what was kept for preview `id`'s connections, once it answers `410`.
    pub fn forget(&self, id: &str) {
        self.closers().remove(id);
    }

    /// Starts waking agent `id` for a preview unless a preview request already is; the wake
    /// goes on after the request that started it has its answer.
    pub fn wake_in_background(self: &Arc<Self>, id: &str) {
        if !self
            .waking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string())
        {
            return;
        }
        let me = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            if let Err(e) = me.lc.wake(&id, || {}).await {
                tracing::info!(agent = id, "a preview's wake failed: {e}");
            }
            me.waking
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        });
    }

    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// A time as the store writes it (microseconds, `Z`), so stored times compare as text.
fn stamp(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}
