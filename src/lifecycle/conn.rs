//! The typed connection to an agent's sandbox ([`SandboxConn`]), for whoever uses one: woken
//! for, or only while its sandboxd is connected.

use std::sync::Arc;

use super::{Lifecycle, LifecycleError};
use crate::launch::ProcessLimits;
use agenthold_proto::ProcessInfo;

use crate::tunnel::conn::{ProcessName, SandboxConn};
use crate::tunnel::registry::Link;

impl Lifecycle {
    /// Wakes the agent (see [`Lifecycle::wake`]) and connects to its sandbox.
    pub async fn wake_conn(self: &Arc<Self>, id: &str) -> Result<SandboxConn, LifecycleError> {
        let link = self.wake(id, || {}).await?;
        Ok(self.conn_over(id, link))
    }

    /// The agent's sandbox if its sandboxd is connected now; never wakes it.
    pub fn conn(&self, id: &str) -> Option<SandboxConn> {
        self.link(id).map(|link| self.conn_over(id, link))
    }

    /// The agent's tunnel if its sandboxd is connected and answers now: not while it is
    /// paused (frozen, it would answer nothing until thawed). Never wakes it.
    pub fn link(&self, id: &str) -> Option<Link> {
        if self.paused_at(id).is_some() {
            return None;
        }
        self.tunnels.get(id)
    }

    /// The agent's processes, running and finished, oldest first. From its sandbox when its
    /// sandboxd is connected; else (asleep, starting) as the server last heard of them, the
    /// finished ones within `sandbox.process_retention`: a listing never wakes the agent.
    /// Empty for an agent not heard of since the server started. The row is read first: a warm
    /// pool entry has a session under its future agent's id, and no agent yet.
    pub async fn list_processes(&self, id: &str) -> Result<Vec<ProcessInfo>, LifecycleError> {
        self.get(id).await?;
        if let Some(conn) = self.conn(id) {
            return Ok(conn.list_processes().await?);
        }
        let retention = self.config().sandbox.process_retention.as_millis() as u64;
        let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
        let mut known = self.hub.processes_of(id);
        known.retain(|p| {
            p.state.is_running() || p.ended_at_ms.unwrap_or(now).saturating_add(retention) >= now
        });
        Ok(known)
    }

    /// The agent's code contexts. Kernels end with the sandbox, so an agent whose sandboxd is
    /// not connected (asleep, starting) has none: a listing never wakes it.
    pub async fn list_code_contexts(
        &self,
        id: &str,
    ) -> Result<Vec<agenthold_proto::CodeContext>, LifecycleError> {
        self.get(id).await?;
        if let Some(conn) = self.conn(id) {
            return Ok(conn.list_code_contexts().await?);
        }
        Ok(Vec::new())
    }

    /// Wakes the agent, kills process `name`'s tree if it runs and has sandboxd forget it; the
    /// server forgets it too, so that a listing while the agent sleeps does not show it.
    pub async fn remove_process(
        self: &Arc<Self>,
        id: &str,
        name: &ProcessName,
    ) -> Result<(), LifecycleError> {
        let conn = self.wake_conn(id).await?;
        // A tag names one process only until another takes it: forget the one removed.
        let info = conn.process(name).await?;
        let by_id = ProcessName::parse(info.id.clone())
            .map_err(|_| crate::tunnel::conn::ConnError::MalformedReport)?;
        conn.remove_process(&by_id).await?;
        self.hub.forget_process(id, &info.id);
        Ok(())
    }

    fn conn_over(&self, id: &str, link: Link) -> SandboxConn {
        SandboxConn::new(
            id,
            link,
            self.activity.clone(),
            ProcessLimits::of(&self.config().sandbox),
            self.boot_env(id),
        )
    }

    /// What programs started in agent `id`'s sandbox get now (its connected boot's).
    pub fn boot_env(&self, id: &str) -> crate::launch::BootEnv {
        crate::launch::BootEnv::new(self.secrets.clone(), id, self.boot_of(id))
    }
}
