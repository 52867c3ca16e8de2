//! The agent as the API shows it: [`Agent`], its [`AgentState`] and its setup's [`SetupStatus`],
//! each made from the store's own type by a `From` that names every field, so that a field
//! added to the store reaches the API only when it is added here too.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{EgressRules, PullProgress};
use crate::model;
use crate::model::teams::AgentApprovals;

/// Where an agent's sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    Creating,
    Starting,
    Running,
    Paused,
    Stopping,
    Sleeping,
    Rebuilding,
    Destroying,
    Error,
}

impl From<model::AgentState> for AgentState {
    fn from(s: model::AgentState) -> Self {
        match s {
            model::AgentState::Creating => AgentState::Creating,
            model::AgentState::Starting => AgentState::Starting,
            model::AgentState::Running => AgentState::Running,
            model::AgentState::Paused => AgentState::Paused,
            model::AgentState::Stopping => AgentState::Stopping,
            model::AgentState::Sleeping => AgentState::Sleeping,
            model::AgentState::Rebuilding => AgentState::Rebuilding,
            model::AgentState::Destroying => AgentState::Destroying,
            model::AgentState::Error => AgentState::Error,
        }
    }
}

// The other way too, for the CLI and `agenthold bench`, which read states from the API and ask
// the store's type what they mean: one list of names, one of the transient states.
impl From<AgentState> for model::AgentState {
    fn from(s: AgentState) -> Self {
        match s {
            AgentState::Creating => model::AgentState::Creating,
            AgentState::Starting => model::AgentState::Starting,
            AgentState::Running => model::AgentState::Running,
            AgentState::Paused => model::AgentState::Paused,
            AgentState::Stopping => model::AgentState::Stopping,
            AgentState::Sleeping => model::AgentState::Sleeping,
            AgentState::Rebuilding => model::AgentState::Rebuilding,
            AgentState::Destroying => model::AgentState::Destroying,
            AgentState::Error => model::AgentState::Error,
        }
    }
}

impl AgentState {
    /// Whether an operation is under way (see [`model::AgentState::is_transient`]).
    pub fn is_transient(self) -> bool {
        model::AgentState::from(self).is_transient()
    }
}

impl std::fmt::Display for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(model::AgentState::from(*self).as_str())
    }
}

// The description says "as stored" because the OpenAPI document has always said so; the
// document is the contract, so the words stay until the API's version changes.
/// An agent and its sandbox, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    /// Short, lowercase, DNS-safe; part of the container, volume and network names.
    #[schema(example = "k3f9x2m1q8ab")]
    pub id: String,
    #[schema(example = "builder")]
    pub name: String,
    #[schema(example = "debian:bookworm-slim")]
    pub image: String,
    #[schema(example = 2)]
    pub cpus: f64,
    #[schema(example = 4096)]
    pub memory_mb: u64,
    /// The home's size limit in MiB (`df` in the sandbox shows it); null for a home without
    /// one, which shares the host's disk (agents made before disk limits, or on a server
    /// without them).
    pub disk_mb: Option<u64>,
    /// The container runtime the sandbox runs on: `runc` (Docker's own: namespaces on the
    /// host's kernel) or `runsc` (gVisor: a kernel of its own in user space). Agents made
    /// before agents had a runtime of their own run on the server's default, shown here.
    #[serde(default)]
    #[schema(required = true, example = "runc")]
    pub runtime: String,
    /// What the sandbox may reach through the egress proxy. Agents made before egress rules
    /// existed follow the server's `sandbox.egress.default`, which the API shows here.
    pub egress: Option<EgressRules>,
    #[schema(example = 15)]
    pub idle_minutes: u32,
    /// Minutes an idle agent stays `paused` before it is stopped; 0: it is never paused, but
    /// stopped straight away. Agents made before light sleep follow
    /// `sandbox.default_deep_sleep_minutes`, shown here.
    #[serde(default)]
    #[schema(example = 60)]
    pub deep_sleep_minutes: u32,
    pub state: AgentState,
    /// The last failure's message while `state` is `error`.
    pub error: Option<String>,
    /// The image or resources changed since the container was made; a rebuild applies them.
    pub needs_rebuild: bool,
    pub created_at: DateTime<Utc>,
    /// Filled in by the server from its activity tracker; not stored.
    pub last_activity_at: Option<DateTime<Utc>>,
    /// When the sleeper will put this agent to sleep if nothing happens: while running, when it
    /// pauses it (or stops it, with `deepSleepMinutes` 0); while paused, when it stops it. Null
    /// otherwise, and for an agent that never sleeps.
    pub sleeps_at: Option<DateTime<Utc>>,
    /// The image pull under way for this agent's sandbox (while creating, starting or
    /// rebuilding); null when none is. Filled in by the server; not stored.
    #[serde(default)]
    pub pull: Option<PullProgress>,
    /// The preset the agent was made from; null for none.
    #[serde(default)]
    #[schema(example = "dev")]
    pub preset: Option<String>,
    /// Variables every shell, exec, terminal and background process of the agent starts with.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The names of the secrets granted to the agent (never values): each is a variable in its
    /// sandbox holding a placeholder. Deleting a secret takes its name off every agent.
    #[serde(default)]
    #[schema(example = json!(["ANTHROPIC_API_KEY"]))]
    pub secrets: Vec<String>,
    /// The preset's setup script's last run; null when it has none or it has not run yet.
    #[serde(default)]
    pub setup: Option<SetupStatus>,
    /// The agent's lifetime, in minutes from its creation or its last change of `ttlMinutes`
    /// (a `PATCH` or a keep-alive); null for an agent without one.
    #[serde(default)]
    #[schema(required = true, example = 60)]
    pub ttl_minutes: Option<u32>,
    /// When the agent will be destroyed, whatever its state (an `expiring` event comes a
    /// minute before); null without a TTL. `POST /api/v1/agents/{id}/keep-alive` moves it.
    #[serde(default)]
    #[schema(required = true)]
    pub expires_at: Option<DateTime<Utc>>,
    /// The caller's `key: value` labels; `GET /api/v1/agents?label=key=value` finds agents by
    /// them.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The agent may become root in its sandbox (`sudo`, `"user": "root"` on exec and
    /// processes). A change by `PATCH` reaches `sudo` at the next rebuild (`needsRebuild`).
    #[serde(default)]
    pub allow_root: bool,
    /// Which commands (exec, background processes, terminal opens) of anyone but the agent's
    /// owner and admins, or of a supervised token, wait for a person's approval.
    #[serde(default)]
    pub approvals: AgentApprovals,
    /// The user who made it; agents made before users existed belong to `admin`, and a
    /// deleted user's agents to `admin`.
    pub owner: AgentOwner,
    /// Who besides the owner, admins and members may see and use it (see `docs/api.md`,
    /// "Teams and access").
    pub access: crate::model::teams::AgentAccess,
    /// Its sandbox came from its preset's warm pool: the create claimed a sandbox started
    /// ahead of need instead of making one (otherwise the agent is the same as a cold one's).
    #[serde(default)]
    pub warm: bool,
}

/// An agent's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentOwner {
    /// The user's id.
    #[schema(example = "admin")]
    pub id: String,
    #[schema(example = "admin")]
    pub name: String,
}

impl From<model::Agent> for Agent {
    fn from(a: model::Agent) -> Self {
        Agent {
            id: a.id,
            name: a.name,
            image: a.image,
            cpus: a.cpus,
            memory_mb: a.memory_mb,
            disk_mb: a.disk_mb,
            runtime: a.runtime,
            egress: a.egress.map(Into::into),
            idle_minutes: a.idle_minutes,
            deep_sleep_minutes: a.deep_sleep_minutes.unwrap_or_default(),
            state: a.state.into(),
            error: a.error,
            needs_rebuild: a.needs_rebuild,
            created_at: a.created_at,
            last_activity_at: a.last_activity_at,
            sleeps_at: a.sleeps_at,
            pull: a.pull.map(Into::into),
            preset: a.preset,
            env: a.env,
            secrets: a.secrets,
            setup: a.setup.map(Into::into),
            ttl_minutes: a.ttl_minutes,
            expires_at: a.expires_at,
            labels: a.labels,
            allow_root: a.allow_root,
            approvals: a.approvals,
            owner: AgentOwner {
                id: a.owner_id,
                name: a.owner_name,
            },
            access: a.access,
            warm: a.warm,
        }
    }
}

/// Where a setup script's run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SetupState {
    Running,
    Done,
    Failed,
}

impl From<model::SetupState> for SetupState {
    fn from(s: model::SetupState) -> Self {
        match s {
            model::SetupState::Running => SetupState::Running,
            model::SetupState::Done => SetupState::Done,
            model::SetupState::Failed => SetupState::Failed,
        }
    }
}

/// The setup script's last run: a background process with the tag `setup`, whose output
/// `GET /api/v1/agents/{id}/processes/setup/output` gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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

impl From<model::SetupStatus> for SetupStatus {
    fn from(s: model::SetupStatus) -> Self {
        SetupStatus {
            state: s.state.into(),
            exit_code: s.exit_code,
            process_id: s.process_id,
            error: s.error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_keep_the_stores_names() {
        for st in model::AgentState::ALL {
            let shown = AgentState::from(st);
            assert_eq!(model::AgentState::from(shown), st);
            assert_eq!(shown.to_string(), st.as_str());
            assert_eq!(serde_json::to_value(shown).unwrap(), st.as_str());
        }
    }
}
