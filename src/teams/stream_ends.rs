//! When a request's streams (an NDJSON body, a WebSocket, a command waiting for approval) must
//! stop: when its credential ends (revoked, expired, its user deleted, demoted or given a new
//! password), or, on an agent's route, when the caller no longer has the standing the route
//! needed there (removed as a member, the agent made private, a role lowered).

use std::fmt;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::access::{decide, standing, Act, Decision, Standing};
use super::{Directory, Principal};
use crate::store::Store;

/// What ends one request's streams. The default never ends (a request no credential admitted).
#[derive(Clone, Default)]
pub struct StreamEnds {
    credential: CancellationToken,
    access: Option<Hold>,
}

/// A standing held on one agent, checked again at each change of access.
#[derive(Clone)]
struct Hold {
    store: Store,
    principal: Principal,
    agent: String,
    act: Act,
    changes: watch::Receiver<u64>,
}

impl fmt::Debug for StreamEnds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamEnds")
            .field("credential", &self.credential)
            .field("agent", &self.access.as_ref().map(|h| &h.agent))
            .finish()
    }
}

impl StreamEnds {
    /// Ends with the credential `principal` was resolved with.
    pub fn of(principal: &Principal) -> StreamEnds {
        StreamEnds {
            credential: principal.ends.clone(),
            access: None,
        }
    }

    /// Ends also when `principal` loses the right to `act` on agent `agent`. Admins and owners
    /// lose it only with their credential (a demotion restarts it), so they need no watch.
    pub fn on_agent(
        mut self,
        directory: &Directory,
        principal: &Principal,
        held: Standing,
        agent: &str,
        act: Act,
    ) -> StreamEnds {
        if matches!(held, Standing::Admin | Standing::Owner) {
            return self;
        }
        let store = directory.store();
        let mut changes = store.access_changes();
        // What changed before now is checked once when the stream first waits (see `lost`).
        changes.mark_unchanged();
        self.access = Some(Hold {
            store: store.clone(),
            principal: principal.clone(),
            agent: agent.to_string(),
            act,
            changes,
        });
        self
    }

    /// Whether the credential has ended (what a new step of a stream checks).
    pub fn credential_ended(&self) -> bool {
        self.credential.is_cancelled()
    }

    /// Resolves when the streams must stop.
    pub async fn ended(&self) {
        let Some(hold) = &self.access else {
            return self.credential.cancelled().await;
        };
        let mut hold = hold.clone();
        tokio::select! {
            () = self.credential.cancelled() => {}
            () = hold.lost() => {
                tracing::info!(agent = %hold.agent, user = %hold.principal.user_name,
                    "a stream ended: its caller no longer has access to the agent");
            }
        }
    }
}

impl Hold {
    async fn lost(&mut self) {
        // Checked first: a change between the decision and the subscription is in the facts.
        while self.still_allowed() {
            if self.changes.changed().await.is_err() {
                // The store is gone with the server: nothing changes any more.
                return std::future::pending().await;
            }
        }
    }

    fn still_allowed(&self) -> bool {
        self.store.agent_facts(&self.agent).is_some_and(|f| {
            self.principal.sees_agent(&self.agent)
                && decide(standing(&self.principal, &f), f.access, self.act) == Decision::Allow
        })
    }
}
