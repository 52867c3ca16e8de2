//! The fan-out of agent changes to SSE clients and waiters.

use tokio::sync::broadcast;

use crate::model::Agent;

#[derive(Debug, Clone)]
pub enum AgentEvent {
    Changed(Box<Agent>),
    Deleted(String),
}

impl AgentEvent {
    pub fn agent_id(&self) -> &str {
        match self {
            AgentEvent::Changed(a) => &a.id,
            AgentEvent::Deleted(id) => id,
        }
    }
}

/// A broadcast of [`AgentEvent`]s; a slow subscriber loses old events and is told so.
#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<AgentEvent>,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub {
            tx: broadcast::channel(1024).0,
        }
    }
}

impl EventHub {
    pub fn publish(&self, event: AgentEvent) {
        // No subscriber is not an error.
        let _ = self.tx.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<AgentEvent> {
        self.tx.subscribe()
    }
}
