//! Per-agent access as kept: the owner and policy (columns of `agents`), the access token's
//! hash, and `agent_members`. The owner, policy and members are mirrored in memory, because
//! every request on an agent and every event the stream sends checks them; each write here
//! updates the mirror after its transaction commits.
//!
//! A destroyed agent's facts stay in the mirror (until the server restarts): its `deleted`
//! event still reaches exactly those who saw it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::watch;

use super::{now_text, Result, Store, StoreError};
use crate::model::teams::{AgentAccess, AgentFacts, Member, MemberRole, BUILT_IN_ADMIN};

#[derive(Clone)]
pub(super) struct FactsMirror {
    facts: Arc<RwLock<HashMap<String, AgentFacts>>>,
    /// Counts writes, so that whoever holds a standing on an agent (an open stream) can check
    /// it again when anything about access changed.
    changes: Arc<watch::Sender<u64>>,
}

impl FactsMirror {
    pub(super) fn load(c: &Connection) -> Result<FactsMirror> {
        let mut facts = HashMap::new();
        let mut stmt = c.prepare("SELECT id, owner_id, access FROM agents")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (id, owner_id, access) in rows {
            let access = AgentAccess::parse(&access)
                .ok_or_else(|| StoreError::Corrupt(format!("agent {id} has access {access:?}")))?;
            facts.insert(
                id,
                AgentFacts {
                    owner_id,
                    access,
                    members: BTreeMap::new(),
                },
            );
        }
        let mut stmt = c.prepare("SELECT agent_id, user_id, role FROM agent_members")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (agent, user, role) in rows {
            let role = MemberRole::parse(&role).ok_or_else(|| {
                StoreError::Corrupt(format!("member {user} of agent {agent} has role {role:?}"))
            })?;
            if let Some(f) = facts.get_mut(&agent) {
                f.members.insert(user, role);
            }
        }
        Ok(FactsMirror {
            facts: Arc::new(RwLock::new(facts)),
            changes: Arc::new(watch::Sender::new(0)),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, AgentFacts>) -> T) -> T {
        let out = f(&mut self.facts.write().unwrap_or_else(PoisonError::into_inner));
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        out
    }

    fn get(&self, id: &str) -> Option<AgentFacts> {
        self.facts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }
}

impl Store {
    /// The owner, policy and members of agent `id`; `None` for one this server never knew.
    pub fn agent_facts(&self, id: &str) -> Option<AgentFacts> {
        self.facts.get(id)
    }

    /// Changes whenever an agent's owner, policy or members may have changed.
    pub fn access_changes(&self) -> watch::Receiver<u64> {
        self.facts.changes.subscribe()
    }

    /// After an agent was recorded or its policy changed.
    pub(super) fn note_agent(&self, id: &str, owner_id: &str, access: AgentAccess) {
        self.facts.with(|m| {
            let f = m.entry(id.to_string()).or_insert_with(|| AgentFacts {
                owner_id: owner_id.to_string(),
                access,
                members: BTreeMap::new(),
            });
            f.owner_id = owner_id.to_string();
            f.access = access;
        });
    }

    /// After user `id` was deleted: their agents are `admin`'s, their memberships gone.
    pub(super) fn note_user_gone(&self, id: &str) {
        self.facts.with(|m| {
            for f in m.values_mut() {
                if f.owner_id == id {
                    f.owner_id = BUILT_IN_ADMIN.to_string();
                }
                f.members.remove(id);
            }
        });
    }

    /// The agent's members, by name.
    pub async fn members(&self, agent_id: &str) -> Result<Vec<Member>> {
        let agent_id = agent_id.to_string();
        self.call(move |c| read_members(c, &agent_id)).await
    }

    /// Makes user `user_id` a member of the agent with `role` (a member already has it now).
    pub async fn set_member(
        &self,
        agent_id: &str,
        user_id: &str,
        role: MemberRole,
    ) -> Result<Member> {
        let (agent, user) = (agent_id.to_string(), user_id.to_string());
        let member = self
            .call(move |c| {
                let tx = c.transaction()?;
                exists(&tx, "agents", &agent)?
                    .then_some(())
                    .ok_or_else(|| StoreError::NotFound(agent.clone()))?;
                exists(&tx, "users", &user)?
                    .then_some(())
                    .ok_or_else(|| StoreError::UserNotFound(user.clone()))?;
                tx.execute(
                    "INSERT INTO agent_members (agent_id, user_id, role, created_at)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (agent_id, user_id) DO UPDATE SET role = excluded.role",
                    params![agent, user, role.as_str(), now_text()],
                )?;
                let member = read_members(&tx, &agent)?
                    .into_iter()
                    .find(|m| m.user_id == user)
                    .ok_or_else(|| StoreError::UserNotFound(user.clone()))?;
                tx.commit()?;
                Ok(member)
            })
            .await?;
        self.facts.with(|m| {
            if let Some(f) = m.get_mut(agent_id) {
                f.members.insert(user_id.to_string(), role);
            }
        });
        Ok(member)
    }

    pub async fn remove_member(&self, agent_id: &str, user_id: &str) -> Result<()> {
        let (agent, user) = (agent_id.to_string(), user_id.to_string());
        self.call(move |c| {
            match c.execute(
                "DELETE FROM agent_members WHERE agent_id = ?1 AND user_id = ?2",
                [&agent, &user],
            )? {
                0 => Err(StoreError::MemberNotFound { agent, user }),
                _ => Ok(()),
            }
        })
        .await?;
        self.facts.with(|m| {
            if let Some(f) = m.get_mut(agent_id) {
                f.members.remove(user_id);
            }
        });
        Ok(())
    }

    /// Keeps the hash of the agent's new access token (`None`: no token works).
    pub async fn set_access_token_hash(&self, agent_id: &str, hash: Option<&str>) -> Result<()> {
        self.update_one(
            agent_id,
            "UPDATE agents SET access_token_hash = ?3, updated_at = ?2 WHERE id = ?1",
            hash.map(str::to_string),
        )
        .await
    }

    pub async fn access_token_hash(&self, agent_id: &str) -> Result<Option<String>> {
        self.column(agent_id, "access_token_hash").await
    }
}

fn exists(c: &Connection, table: &'static str, id: &str) -> Result<bool> {
    Ok(c.query_row(
        &format!("SELECT 1 FROM {table} WHERE id = ?1"),
        [id],
        |_| Ok(()),
    )
    .optional()?
    .is_some())
}

fn read_members(c: &Connection, agent_id: &str) -> Result<Vec<Member>> {
    let rows = c
        .prepare(
            "SELECT m.user_id, u.name, m.role, m.created_at FROM agent_members m
             JOIN users u ON u.id = m.user_id WHERE m.agent_id = ?1 ORDER BY u.name",
        )?
        .query_map([agent_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(user_id, user_name, role, at)| {
            let role = MemberRole::parse(&role).ok_or_else(|| {
                StoreError::Corrupt(format!("member {user_id} has role {role:?}"))
            })?;
            let added_at = chrono::DateTime::parse_from_rfc3339(&at)
                .map_err(|_| StoreError::Corrupt(format!("member added at {at:?}")))?
                .with_timezone(&chrono::Utc);
            Ok(Member {
                user_id,
                user_name,
                role,
                added_at,
            })
        })
        .collect()
}
