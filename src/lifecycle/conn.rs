//! The typed connection to an agent's sandbox ([`SandboxConn`]), for whoever uses one: woken
//! for, or only while its sandboxd is connected.

use std::sync::Arc;

use super::{Lifecycle, LifecycleError};
use crate::launch::ProcessLimits;
use crate::tunnel::conn::SandboxConn;
use crate::tunnel::registry::Link;

impl Lifecycle {
    /// Wakes the agent (see [`Lifecycle::wake`]) and connects to its sandbox.
    pub async fn wake_conn(self: &Arc<Self>, id: &str) -> Result<SandboxConn, LifecycleError> {
        let link = self.wake(id, || {}).await?;
        Ok(self.conn_over(id, link))
    }

    /// The agent's sandbox if its sandboxd is connected now; never wakes it.
    pub fn conn(&self, id: &str) -> Option<SandboxConn> {
        self.tunnels.get(id).map(|link| self.conn_over(id, link))
    }

    /// The agent's sandbox if its sandboxd is connected now, else why not: what `needs` (a
    /// plural, "file operations") cannot have, without waking it.
    pub async fn running_conn(
        &self,
        id: &str,
        needs: &'static str,
    ) -> Result<SandboxConn, LifecycleError> {
        if let Some(conn) = self.conn(id) {
            return Ok(conn);
        }
        let agent = self.get(id).await?;
        Err(LifecycleError::NotRunning {
            name: agent.name,
            state: agent.state,
            needs,
        })
    }

    fn conn_over(&self, id: &str, link: Link) -> SandboxConn {
        SandboxConn::new(
            id,
            link,
            self.activity.clone(),
            ProcessLimits::of(&self.config().sandbox),
        )
    }
}
