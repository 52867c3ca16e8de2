//! The agent as the store keeps it and the lifecycle moves it. The API shows it through its own
//! types ([`crate::api::types::Agent`] and the rest), made from these.

pub mod audit;
pub mod previews;
pub mod secrets;
pub mod sessions;
pub mod teams;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::egress::{EgressChange, EgressRules};

/// Where an agent's sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentState {
    Creating,
    Starting,
    Running,
    /// Frozen (the cgroup freezer): processes, memory and terminal sessions kept, no CPU; any
    /// use thaws it at once. The light sleep between `running` and `sleeping`.
    Paused,
    Stopping,
    Sleeping,
    Rebuilding,
    Destroying,
    Error,
}

impl AgentState {
    pub const ALL: [AgentState; 9] = [
        AgentState::Creating,
        AgentState::Starting,
        AgentState::Running,
        AgentState::Paused,
        AgentState::Stopping,
        AgentState::Sleeping,
        AgentState::Rebuilding,
        AgentState::Destroying,
        AgentState::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Creating => "creating",
            AgentState::Starting => "starting",
            AgentState::Running => "running",
            AgentState::Paused => "paused",
            AgentState::Stopping => "stopping",
            AgentState::Sleeping => "sleeping",
            AgentState::Rebuilding => "rebuilding",
            AgentState::Destroying => "destroying",
            AgentState::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<AgentState> {
        AgentState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// States an operation is under way in; nothing may stay in one after reconcile.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            AgentState::Creating
                | AgentState::Starting
                | AgentState::Stopping
                | AgentState::Rebuilding
                | AgentState::Destroying
        )
    }
}

impl std::fmt::Display for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An agent and its sandbox, as stored (with what the lifecycle fills in when it reads one).
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// Short, lowercase, DNS-safe; part of the container, volume and network names.
    pub id: String,
    pub name: String,
    pub image: String,
    pub cpus: f64,
    pub memory_mb: u64,
    /// The home's size limit in MiB (`df` in the sandbox shows it); null for a home without
    /// one, which shares the host's disk (agents made before disk limits, or on a server
    /// without them).
    pub disk_mb: Option<u64>,
    /// The container runtime the sandbox runs on: `runc` (Docker's own: namespaces on the
    /// host's kernel) or `runsc` (gVisor: a kernel of its own in user space). Agents made
    /// before agents had a runtime of their own run on the server's default, shown here.
    pub runtime: String,
    /// What the sandbox may reach through the egress proxy. Agents made before egress rules
    /// existed follow the server's `sandbox.egress.default`, which the API shows here.
    pub egress: Option<EgressRules>,
    pub idle_minutes: u32,
    /// How long the agent stays paused before it is stopped, in `idle_minute` units; 0 never
    /// pauses it. `None` for agents made before light sleep: the server's default, which the
    /// lifecycle fills in when it reads one.
    pub deep_sleep_minutes: Option<u32>,
    pub state: AgentState,
    /// The last failure's message while `state` is `error`.
    pub error: Option<String>,
    /// The image or resources changed since the container was made; a rebuild applies them.
    pub needs_rebuild: bool,
    pub created_at: DateTime<Utc>,
    /// Filled in by the server from its activity tracker; not stored.
    pub last_activity_at: Option<DateTime<Utc>>,
    /// When the sleeper will pause (or stop) this running agent, or stop this paused one, if
    /// nothing happens; null otherwise.
    pub sleeps_at: Option<DateTime<Utc>>,
    /// The image pull under way for this agent's sandbox (while creating, starting or
    /// rebuilding); null when none is. Filled in by the server; not stored.
    pub pull: Option<PullProgress>,
    /// The preset the agent was made from; null for none.
    pub preset: Option<String>,
    /// Variables every shell, exec, terminal and background process of the agent starts with.
    pub env: BTreeMap<String, String>,
    /// The names of the secrets granted to it: each appears in its sandbox as a variable of that
    /// name holding a placeholder, never the value. Deleting a secret takes it off every agent.
    pub secrets: Vec<String>,
    /// The preset's setup script's last run; null when it has none or it has not run yet.
    pub setup: Option<SetupStatus>,
    /// The agent's lifetime in `sandbox.idle_minute` units, counted from its creation or its
    /// last change of it (a `PATCH` or a keep-alive); null for an agent without one.
    pub ttl_minutes: Option<u32>,
    /// When the agent will be destroyed, whatever its state; null without a TTL. Stored, so a
    /// restart keeps it.
    pub expires_at: Option<DateTime<Utc>>,
    /// The caller's own `key: value` tags, by [`crate::agents::labels`]'s rules.
    pub labels: BTreeMap<String, String>,
    /// The agent may become root in its sandbox: its container keeps the kernel's setuid
    /// (`sudo`), and exec and processes accept `"user": "root"`. Agents made before are not.
    pub allow_root: bool,
    /// Which commands wait for a person's approval.
    pub approvals: teams::AgentApprovals,
    /// The user who made it (agents made before users existed belong to `admin`).
    pub owner_id: String,
    /// The owner's name, read with the agent (it follows a rename).
    pub owner_name: String,
    /// Its sandbox came from the preset's warm pool (claimed, not made for it at its create).
    pub warm: bool,
    pub access: teams::AgentAccess,
}

/// Where a setup script's run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetupState {
    Running,
    Done,
    Failed,
}

/// The setup script's last run: a background process with the tag `setup`, whose output
/// `GET /api/v1/agents/{id}/processes/setup/output` gives. Kept in the store as JSON (the
/// `setup` column), which is what its `serde` form is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupStatus {
    pub state: SetupState,
    /// The script's exit status once it has ended; null while it runs or when it could not be
    /// started.
    pub exit_code: Option<i32>,
    /// The background process's id; null when it could not be started.
    pub process_id: Option<String>,
    /// Why it could not be started, or how it ended when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a new agent is made of, after defaults and validation.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAgent {
    pub id: String,
    pub name: String,
    pub image: String,
    pub cpus: f64,
    pub memory_mb: u64,
    pub disk_mb: Option<u64>,
    pub egress: EgressRules,
    pub idle_minutes: u32,
    /// The request's, else the preset's, else `sandbox.default_deep_sleep_minutes`.
    pub deep_sleep_minutes: u32,
    pub preset: Option<String>,
    pub env: BTreeMap<String, String>,
    /// The granted secrets' names (checked: each exists when the agent is stored).
    pub secrets: Vec<String>,
    pub runtime: String,
    /// The lifetime asked for (request, else preset); `None` for none.
    pub ttl_minutes: Option<u32>,
    /// The deadline `ttl_minutes` gives, counted from now: filled in by the lifecycle.
    pub expires_at: Option<DateTime<Utc>>,
    pub labels: BTreeMap<String, String>,
    /// The request's, else the preset's, else false.
    pub allow_root: bool,
    /// The request's, else the preset's, else none held.
    pub approvals: teams::AgentApprovals,
    /// The creating user's id.
    pub owner_id: String,
    pub access: teams::AgentAccess,
}

impl NewAgent {
    /// The CPU and memory limits its sandbox gets.
    pub fn limits(&self) -> Limits {
        Limits {
            cpus: self.cpus,
            memory_mb: self.memory_mb,
        }
    }
}

/// A change to an agent's settings; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentPatch {
    pub name: Option<String>,
    pub image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    /// A larger home (it never shrinks); applied at the agent's next start.
    pub disk_mb: Option<u64>,
    pub idle_minutes: Option<u32>,
    pub deep_sleep_minutes: Option<u32>,
    /// New egress rules (each list it names replaces the agent's; one it leaves out stays):
    /// they apply to the next connection, and open ones they no longer allow are closed.
    pub egress: Option<EgressChange>,
    /// What an agent without rules of its own follows (`sandbox.egress.default`), which a
    /// change of one list keeps the other of: filled in by the lifecycle.
    pub egress_default: EgressRules,
    /// A new `env` (the whole map); processes started from now on get it.
    pub env: Option<BTreeMap<String, String>>,
    /// A new list of granted secrets (the whole list); processes started from now on get
    /// their placeholders, and the proxy swaps only these from its next request on.
    pub secrets: Option<Vec<String>>,
    /// Another container runtime; applied by a rebuild.
    pub runtime: Option<String>,
    /// A new lifetime counted from now (`Some(Some(n))`), or none (`Some(None)`).
    pub ttl_minutes: Option<Option<u32>>,
    /// The deadline a new `ttl_minutes` gives, counted from now: filled in by the lifecycle.
    pub expires_at: Option<DateTime<Utc>>,
    /// A new set of labels (the whole map).
    pub labels: Option<BTreeMap<String, String>>,
    /// Root allowed or not from now on; the container's side of it (`sudo`) is applied by a
    /// rebuild.
    pub allow_root: Option<bool>,
    /// New approval settings, in force for the next command.
    pub approvals: Option<teams::AgentApprovals>,
    /// Who may see and use it; only the owner and admins may change it (see
    /// [`AgentPatch::act`]).
    pub access: Option<teams::AgentAccess>,
}

impl AgentPatch {
    /// The API names of the fields this change sets (what an audit entry tells; never values).
    pub fn fields(&self) -> Vec<&'static str> {
        // Spelled out whole, so a new field cannot be left out of the list.
        let AgentPatch {
            name,
            image,
            cpus,
            memory_mb,
            disk_mb,
            idle_minutes,
            egress,
            egress_default: _,
            env,
            runtime,
            ttl_minutes,
            expires_at: _,
            labels,
            allow_root,
            approvals,
            access,
            secrets,
            deep_sleep_minutes,
        } = self;
        [
            ("name", name.is_some()),
            ("image", image.is_some()),
            ("cpus", cpus.is_some()),
            ("memoryMb", memory_mb.is_some()),
            ("diskMb", disk_mb.is_some()),
            ("idleMinutes", idle_minutes.is_some()),
            ("deepSleepMinutes", deep_sleep_minutes.is_some()),
            ("egress", egress.is_some()),
            ("env", env.is_some()),
            ("runtime", runtime.is_some()),
            ("ttlMinutes", ttl_minutes.is_some()),
            ("labels", labels.is_some()),
            ("allowRoot", allow_root.is_some()),
            ("approvals", approvals.is_some()),
            ("access", access.is_some()),
            ("secrets", secrets.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
    }
}

/// Makes a fresh agent id: 12 characters of `[a-z0-9]`, starting with a letter so it is a
/// valid DNS label and container name on its own.
pub fn new_agent_id() -> String {
    use rand::Rng;
    const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut id = String::with_capacity(12);
    id.push(ALPHA[rng.random_range(0..ALPHA.len())] as char);
    for _ in 0..11 {
        id.push(ALNUM[rng.random_range(0..ALNUM.len())] as char);
    }
    id
}

/// A sandbox's CPU and memory limits: what a running one can be given anew (a claimed warm
/// pool entry gets its agent's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub cpus: f64,
    pub memory_mb: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_names() {
        for st in AgentState::ALL {
            assert_eq!(AgentState::parse(st.as_str()), Some(st));
        }
        assert_eq!(AgentState::parse("frozen"), None);
    }

    #[test]
    fn ids_are_dns_labels() {
        for _ in 0..100 {
            let id = new_agent_id();
            assert_eq!(id.len(), 12);
            assert!(id.chars().next().unwrap().is_ascii_lowercase());
            assert!(id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        }
    }
}

/// Where a pull is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    Pulling,
    Done,
    Failed,
}

/// How far an image pull has got. Byte counts cover the layers whose size the registry has
/// announced so far (Docker learns a layer's size when its download starts); a layer that was
/// already on the machine counts as done without bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullProgress {
    /// The image reference being pulled (with the tag the pull uses).
    pub image: String,
    pub status: PullStatus,
    /// Layers downloaded and unpacked (or already present).
    pub layers_done: u32,
    pub layers_total: u32,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// An estimate for display, 0–100: mostly the share of the (estimated) bytes downloaded,
    /// the rest the share of layers unpacked. It never goes down during a pull and is 100
    /// only when the pull is done.
    pub percent: u8,
    /// Why the pull failed, with `status: failed`.
    pub error: Option<String>,
}
