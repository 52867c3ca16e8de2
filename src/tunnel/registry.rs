//! The live tunnel session of each agent: at most one, replaced by a newer valid one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandboxd::mux::{MuxHandle, MuxStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Live {
    conn_id: u64,
    handle: MuxHandle,
    cancel: CancellationToken,
}

/// Agent id → the session its sandboxd holds.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<HashMap<String, Live>>>,
    /// Bumped at every change, so waiters can re-check.
    version: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: Arc::default(),
            version: watch::channel(0).0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("the sandbox did not connect within {0:?}")]
    Timeout(Duration),
    #[error("the sandbox is not connected")]
    NotConnected,
    #[error("the tunnel to the sandbox failed: {0}")]
    Mux(#[from] sandboxd::mux::MuxError),
}

impl Registry {
    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `handle` the agent's session, ending the one it replaces.
    pub fn insert(&self, id: &str, conn_id: u64, handle: MuxHandle, cancel: CancellationToken) {
        let old = self.lock().insert(
            id.to_string(),
            Live {
                conn_id,
                handle,
                cancel,
            },
        );
        if let Some(old) = old {
            tracing::info!(agent = id, "a new tunnel session replaces the old one");
            old.cancel.cancel();
        }
        self.bump();
    }

    /// Removes the session `conn_id` if it is still the agent's current one.
    pub fn remove_conn(&self, id: &str, conn_id: u64) {
        let mut map = self.lock();
        if map.get(id).is_some_and(|l| l.conn_id == conn_id) {
            map.remove(id);
            drop(map);
            self.bump();
        }
    }

    /// Ends and forgets the agent's session, whichever it is (the sandbox stopped).
    pub fn disconnect(&self, id: &str) {
        let old = self.lock().remove(id);
        if let Some(old) = old {
            old.cancel.cancel();
            self.bump();
        }
    }

    pub fn is_connected(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    pub fn get(&self, id: &str) -> Option<MuxHandle> {
        let map = self.lock();
        map.get(id)
            .filter(|l| !l.handle.is_closed())
            .map(|l| l.handle.clone())
    }

    pub fn connected_count(&self) -> usize {
        self.lock().len()
    }

    /// Waits until the agent has a session, at most `timeout`.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<MuxHandle, TunnelError> {
        let mut rx = self.version.subscribe();
        let wait = async {
            loop {
                if let Some(h) = self.get(id) {
                    return Ok(h);
                }
                if rx.changed().await.is_err() {
                    return Err(TunnelError::NotConnected);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| TunnelError::Timeout(timeout))?
    }

    /// Opens a stream to the agent's sandbox.
    pub async fn open(&self, id: &str) -> Result<MuxStream, TunnelError> {
        let handle = self.get(id).ok_or(TunnelError::NotConnected)?;
        Ok(handle.open().await?)
    }
}
