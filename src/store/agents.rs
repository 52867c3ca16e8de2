//! Agents and their state machine. Every state change is one guarded UPDATE, so of two racing
//! requests exactly one moves the agent and the other learns the state that beat it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row, TransactionBehavior};

use super::{now_text, unique_violation, Result, Store, StoreError};
use crate::agents::spec::check_disk_change;
use crate::egress::EgressRules;
use crate::model::teams::{AgentAccess, AgentApprovals, CommandApprovals};
use crate::model::{Agent, AgentPatch, AgentState, NewAgent, SetupStatus};

const COLUMNS: &str =
    "id, name, image, cpus, memory_mb, idle_minutes, state, error, needs_rebuild, created_at, \
     disk_mb, egress, preset, env, setup, runtime, ttl_minutes, expires_at, labels, allow_root, \
     command_approvals, owner_id, (SELECT name FROM users WHERE users.id = agents.owner_id), \
     access, secrets, deep_sleep_minutes, warm";

/// A row as SQLite hands it over, before the checks that turn it into an [`Agent`]; kept apart
/// so a bad stored value becomes `Corrupt` with the agent named, not an opaque rusqlite error.
struct Raw {
    id: String,
    name: String,
    image: String,
    cpus: f64,
    memory_mb: i64,
    disk_mb: Option<i64>,
    egress: Option<String>,
    runtime: Option<String>,
    idle_minutes: i64,
    deep_sleep_minutes: Option<i64>,
    warm: bool,
    state: String,
    error: Option<String>,
    needs_rebuild: bool,
    created_at: String,
    preset: Option<String>,
    env: Option<String>,
    setup: Option<String>,
    ttl_minutes: Option<i64>,
    expires_at: Option<String>,
    labels: Option<String>,
    allow_root: bool,
    command_approvals: String,
    owner_id: String,
    owner_name: Option<String>,
    access: String,
    secrets: Option<String>,
}

impl Raw {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Raw> {
        Ok(Raw {
            id: r.get(0)?,
            name: r.get(1)?,
            image: r.get(2)?,
            cpus: r.get(3)?,
            memory_mb: r.get(4)?,
            disk_mb: r.get(10)?,
            egress: r.get(11)?,
            runtime: r.get(15)?,
            idle_minutes: r.get(5)?,
            state: r.get(6)?,
            error: r.get(7)?,
            needs_rebuild: r.get(8)?,
            created_at: r.get(9)?,
            preset: r.get(12)?,
            env: r.get(13)?,
            setup: r.get(14)?,
            ttl_minutes: r.get(16)?,
            expires_at: r.get(17)?,
            labels: r.get(18)?,
            allow_root: r.get(19)?,
            command_approvals: r.get(20)?,
            owner_id: r.get(21)?,
            owner_name: r.get(22)?,
            access: r.get(23)?,
            secrets: r.get(24)?,
            deep_sleep_minutes: r.get(25)?,
            warm: r.get(26)?,
        })
    }

    fn into_agent(self) -> Result<Agent> {
        let bad = |what: &str, v: &dyn std::fmt::Display| {
            StoreError::Corrupt(format!("agent {} has an impossible {what}: {v}", self.id))
        };
        let state = AgentState::parse(&self.state).ok_or_else(|| bad("state", &self.state))?;
        let access = AgentAccess::parse(&self.access).ok_or_else(|| bad("access", &self.access))?;
        let memory_mb =
            u64::try_from(self.memory_mb).map_err(|_| bad("memory_mb", &self.memory_mb))?;
        let disk_mb = self
            .disk_mb
            .map(|d| u64::try_from(d).map_err(|_| bad("disk_mb", &d)))
            .transpose()?;
        let egress = self
            .egress
            .as_deref()
            .map(|e| serde_json::from_str(e).map_err(|err| bad("egress", &err)))
            .transpose()?;
        let env = self
            .env
            .as_deref()
            .map(|e| serde_json::from_str(e).map_err(|err| bad("env", &err)))
            .transpose()?
            .unwrap_or_default();
        let secrets = self
            .secrets
            .as_deref()
            .map(|e| serde_json::from_str(e).map_err(|err| bad("secrets", &err)))
            .transpose()?
            .unwrap_or_default();
        let setup = self
            .setup
            .as_deref()
            .map(|e| serde_json::from_str(e).map_err(|err| bad("setup", &err)))
            .transpose()?;
        let labels = self
            .labels
            .as_deref()
            .map(|e| serde_json::from_str(e).map_err(|err| bad("labels", &err)))
            .transpose()?
            .unwrap_or_default();
        let ttl_minutes = self
            .ttl_minutes
            .map(|t| u32::try_from(t).map_err(|_| bad("ttl_minutes", &t)))
            .transpose()?;
        let expires_at = self
            .expires_at
            .as_deref()
            .map(|t| {
                DateTime::parse_from_rfc3339(t)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| bad("expires_at", &t))
            })
            .transpose()?;
        let idle_minutes = u32::try_from(self.idle_minutes)
            .map_err(|_| bad("idle_minutes", &self.idle_minutes))?;
        let deep_sleep_minutes = self
            .deep_sleep_minutes
            .map(|d| u32::try_from(d).map_err(|_| bad("deep_sleep_minutes", &d)))
            .transpose()?;
        let created_at = DateTime::parse_from_rfc3339(&self.created_at)
            .map_err(|_| bad("created_at", &self.created_at))?
            .with_timezone(&Utc);
        let commands = CommandApprovals::parse(&self.command_approvals)
            .ok_or_else(|| bad("command_approvals", &self.command_approvals))?;
        Ok(Agent {
            id: self.id,
            name: self.name,
            image: self.image,
            cpus: self.cpus,
            memory_mb,
            disk_mb,
            egress,
            runtime: self.runtime.unwrap_or_default(),
            idle_minutes,
            deep_sleep_minutes,
            warm: self.warm,
            state,
            error: self.error,
            needs_rebuild: self.needs_rebuild,
            created_at,
            last_activity_at: None,
            sleeps_at: None,
            pull: None,
            preset: self.preset,
            env,
            secrets,
            setup,
            ttl_minutes,
            expires_at,
            labels,
            allow_root: self.allow_root,
            approvals: AgentApprovals { commands },
            // A user's deletion hands their agents to `admin` in the same transaction.
            owner_name: self.owner_name.unwrap_or_else(|| self.owner_id.clone()),
            owner_id: self.owner_id,
            access,
        })
    }
}

fn read_agent(c: &Connection, id: &str) -> Result<Option<Agent>> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM agents WHERE id = ?1"),
        [id],
        Raw::from_row,
    )
    .optional()?
    .map(Raw::into_agent)
    .transpose()
}

pub(super) fn must_read_agent(c: &Connection, id: &str) -> Result<Agent> {
    read_agent(c, id)?.ok_or_else(|| StoreError::NotFound(id.to_string()))
}

/// SQLite integers are signed 64-bit; a larger memory size cannot be stored faithfully.
fn memory_to_sql(mb: u64) -> Result<i64> {
    mb_to_sql("memory_mb", mb)
}

fn mb_to_sql(what: &str, mb: u64) -> Result<i64> {
    i64::try_from(mb).map_err(|_| StoreError::Invalid(format!("{what} {mb} is too large")))
}

fn egress_to_sql(e: &EgressRules) -> Result<String> {
    serde_json::to_string(e).map_err(|err| StoreError::Invalid(format!("egress: {err}")))
}

fn env_to_sql(env: &BTreeMap<String, String>) -> Result<Option<String>> {
    if env.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(env)
        .map(Some)
        .map_err(|err| StoreError::Invalid(format!("env: {err}")))
}

fn secrets_to_sql(names: &[String]) -> Result<Option<String>> {
    if names.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(names)
        .map(Some)
        .map_err(|err| StoreError::Invalid(format!("secrets: {err}")))
}

/// Refuses a grant of a secret that does not exist; checked in the step that keeps the list, so
/// that a secret deleted meanwhile cannot stay granted (its deletion strips it in one step too).
fn check_secrets_exist(c: &Connection, names: &[String]) -> Result<()> {
    for name in names {
        let exists: bool = c.query_row(
            "SELECT EXISTS (SELECT 1 FROM secrets WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )?;
        if !exists {
            return Err(StoreError::Unfit {
                field: "secrets",
                why: format!("secrets: there is no secret named {name} (PUT /api/v1/secrets/{name} makes it)"),
            });
        }
    }
    Ok(())
}

fn labels_to_sql(labels: &BTreeMap<String, String>) -> Result<Option<String>> {
    if labels.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(labels)
        .map(Some)
        .map_err(|err| StoreError::Invalid(format!("labels: {err}")))
}

/// A deadline as stored: RFC 3339 with milliseconds, in UTC.
fn time_to_sql(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn check_cpus(cpus: f64) -> Result<()> {
    if cpus.is_finite() {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!("cpus {cpus} is not a number")))
    }
}

/// Turns a constraint violation on a write into the error the caller can act on.
fn map_unique(e: rusqlite::Error, id: &str, name: &str) -> StoreError {
    match unique_violation(&e) {
        Some("agents.name") => StoreError::NameTaken(name.to_string()),
        Some("agents.id") => StoreError::IdTaken(id.to_string()),
        _ => StoreError::Sqlite(e),
    }
}

/// What a guarded move does to the `error` column.
enum ErrorColumn {
    /// Clear it, unless the move is into `error` (then keep it).
    ClearUnlessError,
    Set(String),
}

fn guarded_move(
    c: &Connection,
    id: &str,
    from: &[AgentState],
    to: AgentState,
    error: ErrorColumn,
) -> Result<Agent> {
    if !from.is_empty() {
        let error_sql = match error {
            ErrorColumn::ClearUnlessError => "CASE WHEN ?1 = 'error' THEN error ELSE NULL END",
            ErrorColumn::Set(_) => "?4",
        };
        let first_state_param = 5;
        let placeholders: Vec<String> = (0..from.len())
            .map(|i| format!("?{}", first_state_param + i))
            .collect();
        let sql = format!(
            "UPDATE agents SET state = ?1, error = {error_sql}, updated_at = ?2
             WHERE id = ?3 AND state IN ({}) RETURNING {COLUMNS}",
            placeholders.join(", ")
        );
        let message = match error {
            ErrorColumn::Set(m) => Some(m),
            ErrorColumn::ClearUnlessError => None,
        };
        let mut values: Vec<Option<String>> = vec![
            Some(to.as_str().to_string()),
            Some(now_text()),
            Some(id.to_string()),
            message,
        ];
        values.extend(from.iter().map(|s| Some(s.as_str().to_string())));
        let row = c
            .query_row(&sql, params_from_iter(values), Raw::from_row)
            .optional()?;
        if let Some(raw) = row {
            return raw.into_agent();
        }
    }
    // Nothing moved: the agent is gone or in a state `from` does not allow. Under the store's
    // lock this read sees the state that refused the move.
    let current = must_read_agent(c, id)?;
    Err(StoreError::Conflict {
        id: id.to_string(),
        state: current.state,
    })
}

/// Inserts `new`'s row in `state`; `warm` when it takes over a pool entry's sandbox.
pub(super) fn insert_row(
    c: &Connection,
    new: &NewAgent,
    state: AgentState,
    warm: bool,
) -> Result<()> {
    check_cpus(new.cpus)?;
    let memory = memory_to_sql(new.memory_mb)?;
    let disk = new.disk_mb.map(|d| mb_to_sql("disk_mb", d)).transpose()?;
    let egress = egress_to_sql(&new.egress)?;
    let env = env_to_sql(&new.env)?;
    let labels = labels_to_sql(&new.labels)?;
    check_secrets_exist(c, &new.secrets)?;
    let secrets = secrets_to_sql(&new.secrets)?;
    // A lifetime without its deadline (or the other way) is no lifetime.
    let (ttl, expires) = match (new.ttl_minutes, new.expires_at) {
        (Some(t), Some(at)) => (Some(t), Some(time_to_sql(at))),
        _ => (None, None),
    };
    let now = now_text();
    c.execute(
        "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, state,
                                 created_at, updated_at, disk_mb, egress, preset, env, runtime,
                                 ttl_minutes, expires_at, labels, allow_root,
                                 command_approvals, owner_id, access, secrets,
                                 deep_sleep_minutes, warm)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                     ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)",
        params![
            new.id,
            new.name,
            new.image,
            new.cpus,
            memory,
            new.idle_minutes,
            state.as_str(),
            now,
            disk,
            egress,
            new.preset,
            env,
            new.runtime,
            ttl,
            expires,
            labels,
            new.allow_root,
            new.approvals.commands.as_str(),
            new.owner_id,
            new.access.as_str(),
            secrets,
            new.deep_sleep_minutes,
            warm
        ],
    )
    .map_err(|e| map_unique(e, &new.id, &new.name))?;
    Ok(())
}

impl Store {
    /// Records a new agent in `creating`.
    pub async fn insert_agent(&self, new: NewAgent) -> Result<Agent> {
        self.call(move |c| {
            insert_row(c, &new, AgentState::Creating, false)?;
            must_read_agent(c, &new.id)
        })
        .await
        .inspect(|a| self.note_agent(&a.id, &a.owner_id, a.access))
    }

    pub async fn get_agent(&self, id: &str) -> Result<Agent> {
        let id = id.to_string();
        self.call(move |c| must_read_agent(c, &id)).await
    }

    /// Every agent, oldest first.
    pub async fn list_agents(&self) -> Result<Vec<Agent>> {
        self.call(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {COLUMNS} FROM agents ORDER BY created_at, id"
            ))?;
            let raws = stmt
                .query_map([], Raw::from_row)?
                .collect::<rusqlite::Result<Vec<Raw>>>()?;
            raws.into_iter().map(Raw::into_agent).collect()
        })
        .await
    }

    /// Moves the agent to `to` if it is in one of `from`, clearing `error` (unless `to` is
    /// `Error`). Otherwise `NotFound`, or `Conflict` with the state that refused the move.
    pub async fn transition(&self, id: &str, from: &[AgentState], to: AgentState) -> Result<Agent> {
        let (id, from) = (id.to_string(), from.to_vec());
        self.call(move |c| guarded_move(c, &id, &from, to, ErrorColumn::ClearUnlessError))
            .await
    }

    /// Moves the agent to `error` with `message` if it is in one of `from`; otherwise as
    /// [`Store::transition`].
    pub async fn fail(&self, id: &str, from: &[AgentState], message: &str) -> Result<Agent> {
        let (id, from, message) = (id.to_string(), from.to_vec(), message.to_string());
        self.call(move |c| {
            guarded_move(c, &id, &from, AgentState::Error, ErrorColumn::Set(message))
        })
        .await
    }

    /// Moves the agent from `starting` to `error` with `message`, but only while it is still in
    /// the boot whose token hash is `boot_hash`: a wait for an earlier boot's hello that times
    /// out must not fail a start made since. Otherwise as [`Store::transition`].
    pub async fn fail_boot(&self, id: &str, boot_hash: &str, message: &str) -> Result<Agent> {
        let (id, boot_hash, message) = (id.to_string(), boot_hash.to_string(), message.to_string());
        self.call(move |c| {
            let row = c
                .query_row(
                    &format!(
                        "UPDATE agents SET state = 'error', error = ?1, updated_at = ?2
                         WHERE id = ?3 AND state = 'starting' AND boot_token_hash = ?4
                         RETURNING {COLUMNS}"
                    ),
                    params![message, now_text(), id, boot_hash],
                    Raw::from_row,
                )
                .optional()?;
            match row {
                Some(raw) => raw.into_agent(),
                None => Err(StoreError::Conflict {
                    state: must_read_agent(c, &id)?.state,
                    id,
                }),
            }
        })
        .await
    }

    /// Applies `patch` if the agent is in one of `allowed_states` (pass `&AgentState::ALL` for
    /// any). A changed image, cpus, memory, runtime or `allow_root` sets `needs_rebuild`; name and idle time apply at
    /// once and leave it alone, and a larger disk applies at the next start (or rebuild).
    pub async fn patch_agent(
        &self,
        id: &str,
        patch: AgentPatch,
        allowed_states: &[AgentState],
    ) -> Result<Agent> {
        let (id, allowed) = (id.to_string(), allowed_states.to_vec());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let old = must_read_agent(&tx, &id)?;
            if !allowed.contains(&old.state) {
                return Err(StoreError::Conflict {
                    id,
                    state: old.state,
                });
            }
            let name = patch.name.unwrap_or(old.name.clone());
            let image = patch.image.unwrap_or(old.image.clone());
            let cpus = patch.cpus.unwrap_or(old.cpus);
            let memory_mb = patch.memory_mb.unwrap_or(old.memory_mb);
            let idle_minutes = patch.idle_minutes.unwrap_or(old.idle_minutes);
            let deep_sleep_minutes = patch.deep_sleep_minutes.or(old.deep_sleep_minutes);
            check_cpus(cpus)?;
            check_disk_change(old.disk_mb, patch.disk_mb).map_err(|e| StoreError::Unfit {
                field: e.field,
                why: e.why,
            })?;
            let disk_mb = patch.disk_mb.or(old.disk_mb);
            let egress = match patch.egress {
                Some(change) => {
                    let base = old.egress.clone().unwrap_or(patch.egress_default);
                    Some(egress_to_sql(&change.apply(base))?)
                }
                None => old.egress.as_ref().map(egress_to_sql).transpose()?,
            };
            let env = env_to_sql(patch.env.as_ref().unwrap_or(&old.env))?;
            // An agent made before runtimes were stored has none: asking for one (even the
            // default it runs on) is a change a rebuild applies.
            let runtime = patch.runtime.unwrap_or(old.runtime.clone());
            let labels = labels_to_sql(patch.labels.as_ref().unwrap_or(&old.labels))?;
            if let Some(names) = &patch.secrets {
                check_secrets_exist(&tx, names)?;
            }
            let secrets = secrets_to_sql(patch.secrets.as_ref().unwrap_or(&old.secrets))?;
            let (ttl, expires) = match patch.ttl_minutes {
                None => (old.ttl_minutes, old.expires_at),
                Some(Some(t)) => match patch.expires_at {
                    Some(at) => (Some(t), Some(at)),
                    None => {
                        return Err(StoreError::Invalid(
                            "a lifetime without its deadline".into(),
                        ))
                    }
                },
                Some(None) => (None, None),
            };
            // Whether the container may gain privileges is fixed when it is made.
            let allow_root = patch.allow_root.unwrap_or(old.allow_root);
            let approvals = patch.approvals.unwrap_or(old.approvals);
            let access = patch.access.unwrap_or(old.access);
            if access != old.access {
                // An access token belongs to one time the agent was protected: a change of
                // policy ends it (a protected agent again needs a new one).
                tx.execute(
                    "UPDATE agents SET access = ?2, access_token_hash = NULL WHERE id = ?1",
                    params![id, access.as_str()],
                )?;
            }
            let rebuild = old.needs_rebuild
                || image != old.image
                || cpus != old.cpus
                || memory_mb != old.memory_mb
                || runtime != old.runtime
                || allow_root != old.allow_root;
            tx.execute(
                "UPDATE agents SET name = ?2, image = ?3, cpus = ?4, memory_mb = ?5,
                        idle_minutes = ?6, needs_rebuild = ?7, updated_at = ?8, disk_mb = ?9,
                        egress = ?10, env = ?11, runtime = ?12, ttl_minutes = ?13,
                        expires_at = ?14, labels = ?15, allow_root = ?16,
                        command_approvals = ?17, secrets = ?18, deep_sleep_minutes = ?19
                 WHERE id = ?1",
                params![
                    id,
                    name,
                    image,
                    cpus,
                    memory_to_sql(memory_mb)?,
                    idle_minutes,
                    rebuild,
                    now_text(),
                    disk_mb.map(|d| mb_to_sql("disk_mb", d)).transpose()?,
                    egress,
                    env,
                    (!runtime.is_empty()).then_some(runtime),
                    ttl,
                    expires.map(time_to_sql),
                    labels,
                    allow_root,
                    approvals.commands.as_str(),
                    secrets,
                    deep_sleep_minutes
                ],
            )
            .map_err(|e| map_unique(e, &id, &name))?;
            let agent = must_read_agent(&tx, &id)?;
            tx.commit()?;
            Ok(agent)
        })
        .await
        .inspect(|a| self.note_agent(&a.id, &a.owner_id, a.access))
    }

    /// Gives the agent lifetime `ttl_minutes` ending at `expires_at` (a keep-alive), unless it
    /// is being destroyed: then `Conflict`.
    pub async fn set_ttl(
        &self,
        id: &str,
        ttl_minutes: u32,
        expires_at: DateTime<Utc>,
    ) -> Result<Agent> {
        let id = id.to_string();
        self.call(move |c| {
            let row = c
                .query_row(
                    &format!(
                        "UPDATE agents SET ttl_minutes = ?2, expires_at = ?3, updated_at = ?4
                         WHERE id = ?1 AND state != 'destroying' RETURNING {COLUMNS}"
                    ),
                    params![id, ttl_minutes, time_to_sql(expires_at), now_text()],
                    Raw::from_row,
                )
                .optional()?;
            match row {
                Some(raw) => raw.into_agent(),
                None => Err(StoreError::Conflict {
                    state: must_read_agent(c, &id)?.state,
                    id,
                }),
            }
        })
        .await
    }

    /// Records the setup script's last run (`None` forgets it, so it runs again at the next
    /// start).
    pub async fn set_setup(&self, id: &str, setup: Option<&SetupStatus>) -> Result<()> {
        let json = setup
            .map(serde_json::to_string)
            .transpose()
            .map_err(|err| StoreError::Invalid(format!("setup: {err}")))?;
        self.update_one(
            id,
            "UPDATE agents SET setup = ?3, updated_at = ?2 WHERE id = ?1",
            json,
        )
        .await
    }

    /// Marks the container as matching the agent's settings again when they are still those of
    /// `made` (a claimed warm pool entry just given its limits): a PATCH meanwhile that asked
    /// for a rebuild keeps asking.
    pub async fn clear_needs_rebuild_if_made_as(&self, id: &str, made: &NewAgent) -> Result<()> {
        let id = id.to_string();
        let (image, runtime, cpus, allow_root) = (
            made.image.clone(),
            made.runtime.clone(),
            made.cpus,
            made.allow_root,
        );
        let memory_mb = i64::try_from(made.memory_mb).unwrap_or(i64::MAX);
        let disk_mb = made.disk_mb.map(|d| i64::try_from(d).unwrap_or(i64::MAX));
        self.call(move |c| {
            c.execute(
                "UPDATE agents SET needs_rebuild = 0, updated_at = ?2
                 WHERE id = ?1 AND image = ?3 AND runtime IS ?4 AND cpus = ?5
                   AND memory_mb = ?6 AND disk_mb IS ?7 AND allow_root = ?8",
                params![
                    id,
                    now_text(),
                    image,
                    runtime,
                    cpus,
                    memory_mb,
                    disk_mb,
                    allow_root
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Marks the container as matching the agent's settings again, after a rebuild.
    pub async fn clear_needs_rebuild(&self, id: &str) -> Result<()> {
        self.update_one(
            id,
            "UPDATE agents SET needs_rebuild = 0, updated_at = ?2 WHERE id = ?1",
            None,
        )
        .await
    }

    /// Stores the hash of the current boot's token, or forgets it (`None`) so no token works.
    pub async fn set_boot_token_hash(&self, id: &str, hash: Option<&str>) -> Result<()> {
        self.update_one(
            id,
            "UPDATE agents SET boot_token_hash = ?3, updated_at = ?2 WHERE id = ?1",
            hash.map(str::to_string),
        )
        .await
    }

    pub async fn boot_token_hash(&self, id: &str) -> Result<Option<String>> {
        self.column(id, "boot_token_hash").await
    }

    /// Removes the agent's row for good; `NotFound` if it is already gone.
    pub async fn delete_agent(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            if tx.execute("DELETE FROM agents WHERE id = ?1", [&id])? == 0 {
                return Err(StoreError::NotFound(id));
            }
            // Its network's subnet is free again.
            tx.execute("DELETE FROM subnets WHERE id = ?1", [&id])?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Runs an UPDATE of one agent with `?1` = id, `?2` = now, `?3` = `value`.
    pub(super) async fn update_one(
        &self,
        id: &str,
        sql: &'static str,
        value: Option<String>,
    ) -> Result<()> {
        let id = id.to_string();
        self.call(move |c| {
            let changed = if sql.contains("?3") {
                c.execute(sql, params![id, now_text(), value])?
            } else {
                c.execute(sql, params![id, now_text()])?
            };
            match changed {
                0 => Err(StoreError::NotFound(id)),
                _ => Ok(()),
            }
        })
        .await
    }

    /// One nullable text column of one agent.
    pub(super) async fn column(&self, id: &str, column: &'static str) -> Result<Option<String>> {
        let id = id.to_string();
        self.call(move |c| {
            c.query_row(
                &format!("SELECT {column} FROM agents WHERE id = ?1"),
                [&id],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()?
            .ok_or(StoreError::NotFound(id))
        })
        .await
    }
}
