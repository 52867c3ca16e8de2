//! What the egress proxy hears of agent changes: connections that new rules no longer allow
//! close, and so does every connection of an agent that stopped or is gone.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;

use super::Lifecycle;
use crate::egress::{Proxy, Sandboxes};
use crate::events::AgentEvent;
use crate::model::AgentState;

impl Lifecycle {
    /// Closes connections that rules changed since no longer allow, and every connection of
    /// an agent that stopped or is gone. Runs for the server's life.
    pub async fn follow_rule_changes(self: Arc<Self>, proxy: Arc<Proxy>) {
        let conns = proxy.connections();
        let mut rx = self.hub.subscribe();
        loop {
            match rx.recv().await {
                Ok(AgentEvent::Changed(agent)) => {
                    if !matches!(
                        agent.state,
                        AgentState::Running | AgentState::Paused | AgentState::Starting
                    ) {
                        conns.close_all(&agent.id);
                    } else if let Some(rules) = &agent.egress {
                        conns.recheck(&agent.id, rules);
                    }
                }
                Ok(AgentEvent::Deleted(id)) => conns.close_all(&id),
                Ok(_) => {}
                // Some changes went by unseen: check every agent that has connections.
                Err(RecvError::Lagged(_)) => {
                    for id in conns.agents() {
                        match Sandboxes::rules(&*self, &id).await {
                            Some((_, rules)) => {
                                conns.recheck(&id, &rules);
                            }
                            None => conns.close_all(&id),
                        }
                    }
                }
                Err(RecvError::Closed) => break,
            }
        }
    }
}
