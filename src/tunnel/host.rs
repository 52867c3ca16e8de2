//! What the tunnel needs of the rest of the server, declared here so that the tunnel does not
//! depend on the lifecycle that owns it (the lifecycle implements it).

use std::sync::Arc;
use std::time::Duration;

use agenthold_proto::ProcessInfo;

use super::registry::Registry;
use crate::activity::ActivityTracker;
use crate::metrics::Metrics;
use crate::model::AgentState;

/// Why a sandbox's tunnel connection is refused (see [`TunnelHost::authorize_boot`]).
#[derive(Debug, thiserror::Error)]
pub enum BootRefusal {
    /// One answer for an unknown agent and a wrong token, so that ids cannot be probed.
    #[error("invalid boot token")]
    InvalidToken,
    #[error("agent is {0}; only a starting or running agent may connect")]
    NotStarted(AgentState),
}

/// The server a sandbox's tunnel serves: who may connect, where sessions are kept, and where
/// what sandboxd reports goes.
#[async_trait::async_trait]
pub trait TunnelHost: Send + Sync + 'static {
    /// Whether a sandbox that dials the tunnel as agent `id` with boot `token` may connect.
    async fn authorize_boot(&self, id: &str, token: &str) -> Result<(), BootRefusal>;
    /// sandboxd said hello on a valid session of agent `id`.
    async fn on_hello(self: Arc<Self>, id: &str);
    /// The sandboxes' tunnels, by agent.
    fn tunnels(&self) -> &Registry;
    /// Where sandboxd's activity reports go.
    fn activity(&self) -> &ActivityTracker;
    /// sandboxd reported agent `id`'s process `info`.
    fn process_reported(&self, id: &str, info: ProcessInfo);
    fn metrics(&self) -> &Metrics;
    /// How often a session is pinged, and how long each ping may take.
    fn ping_interval(&self) -> Duration;
    /// Whether agent `id`'s sandbox is paused (frozen): its session is kept, unpinged, however
    /// long the pause.
    fn is_paused(&self, id: &str) -> bool;
}
