//! Warm pool entries: sandboxes made ahead of need for an agent id chosen ahead, with no agent
//! row. A claim turns one into an agent in one transaction (the entry's row goes, the agent's
//! comes, with the same id), so a crash leaves a whole entry or a whole agent, never both or
//! neither.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::agents::{insert_row, must_read_agent};
use super::{now_text, Result, Store};
use crate::model::{Agent, AgentState, Limits, NewAgent};

/// Where a pool entry is: its sandbox is being made and started, or its sandboxd said hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    Starting,
    Ready,
}

impl EntryState {
    fn as_str(self) -> &'static str {
        match self {
            EntryState::Starting => "starting",
            EntryState::Ready => "ready",
        }
    }
}

/// One pool entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolEntry {
    /// The agent id its sandbox was made for (and the agent that claims it gets).
    pub id: String,
    pub preset: String,
    /// What its sandbox was made from (see [`crate::driver::SandboxSpec::digest`]).
    pub digest: String,
    /// Its sandbox's limits; `None` for an entry made before they were kept (stale).
    pub limits: Option<Limits>,
    pub state: EntryState,
}

/// The columns [`entry_from_row`] reads, in its order.
const ENTRY_COLUMNS: &str = "id, preset, digest, state, cpus, memory_mb";

fn entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PoolEntry> {
    let state: String = r.get(3)?;
    Ok(PoolEntry {
        id: r.get(0)?,
        preset: r.get(1)?,
        digest: r.get(2)?,
        state: if state == "ready" {
            EntryState::Ready
        } else {
            EntryState::Starting
        },
        limits: limits_from(r.get(4)?, r.get(5)?),
    })
}

fn limits_from(cpus: Option<f64>, memory_mb: Option<i64>) -> Option<Limits> {
    Some(Limits {
        cpus: cpus?,
        memory_mb: u64::try_from(memory_mb?).ok()?,
    })
}

impl Store {
    /// Records a new entry in `starting`, with its sandbox's limits and the hash of the boot
    /// token its sandbox gets.
    pub async fn insert_pool_entry(
        &self,
        id: &str,
        preset: &str,
        digest: &str,
        limits: Limits,
        boot_hash: &str,
    ) -> Result<()> {
        let (id, preset, digest, boot_hash) = (
            id.to_string(),
            preset.to_string(),
            digest.to_string(),
            boot_hash.to_string(),
        );
        let memory_mb = i64::try_from(limits.memory_mb).unwrap_or(i64::MAX);
        self.call(move |c| {
            c.execute(
                "INSERT INTO pool_entries
                     (id, preset, digest, state, boot_token_hash, created_at, cpus, memory_mb)
                 VALUES (?1, ?2, ?3, 'starting', ?4, ?5, ?6, ?7)",
                params![
                    id,
                    preset,
                    digest,
                    boot_hash,
                    now_text(),
                    limits.cpus,
                    memory_mb
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Every entry, oldest first.
    pub async fn list_pool_entries(&self) -> Result<Vec<PoolEntry>> {
        self.call(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {ENTRY_COLUMNS} FROM pool_entries ORDER BY created_at, id"
            ))?;
            let rows = stmt
                .query_map([], entry_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await
    }

    /// The entry with this id, if there is one.
    pub async fn pool_entry(&self, id: &str) -> Result<Option<PoolEntry>> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {ENTRY_COLUMNS} FROM pool_entries WHERE id = ?1"),
                [&id],
                entry_from_row,
            )
            .optional()?)
        })
        .await
    }

    /// The hash of the boot token entry `id`'s sandbox was started with.
    pub async fn pool_boot_token_hash(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT boot_token_hash FROM pool_entries WHERE id = ?1",
                [&id],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()?
            .flatten())
        })
        .await
    }

    /// Moves entry `id` to `state`; `false` when there is no such entry (claimed or removed).
    pub async fn set_pool_entry_state(&self, id: &str, state: EntryState) -> Result<bool> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(c.execute(
                "UPDATE pool_entries SET state = ?2 WHERE id = ?1",
                params![id, state.as_str()],
            )? > 0)
        })
        .await
    }

    /// Records what entry `id`'s sandbox was made from, once it is made (see
    /// [`crate::driver::SandboxSpec::digest`]); `false` when there is no such entry.
    pub async fn set_pool_entry_digest(&self, id: &str, digest: &str) -> Result<bool> {
        let (id, digest) = (id.to_string(), digest.to_string());
        self.call(move |c| {
            Ok(c.execute(
                "UPDATE pool_entries SET digest = ?2 WHERE id = ?1",
                params![id, digest],
            )? > 0)
        })
        .await
    }

    /// Forgets entry `id`; `false` when it was already gone (claimed, say).
    pub async fn delete_pool_entry(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            let found = tx.execute("DELETE FROM pool_entries WHERE id = ?1", [&id])? > 0;
            // Its network's subnet is free again (a claimed entry's is its agent's: kept).
            if found {
                tx.execute("DELETE FROM subnets WHERE id = ?1", [&id])?;
            }
            tx.commit()?;
            Ok(found)
        })
        .await
    }

    /// Claims a ready entry of `preset` made from `digest` for `new`: the entry's row goes and
    /// the agent's comes, in `starting` with the entry's id and boot token, in one transaction.
    /// Returns the agent and the limits its sandbox has (the entry's); when they are not the
    /// agent's, the agent is stored `needs_rebuild` until the caller has resized the sandbox
    /// (so a crash in between leaves an agent that says so). `None` when no such entry is
    /// ready (the create is then a cold one). `new.id` is ignored.
    pub async fn claim_pool_entry(
        &self,
        preset: &str,
        digest: &str,
        mut new: NewAgent,
    ) -> Result<Option<(Agent, Option<Limits>)>> {
        let (preset, digest) = (preset.to_string(), digest.to_string());
        let claimed = self
            .call(move |c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let found = tx
                    .query_row(
                        "SELECT id, boot_token_hash, cpus, memory_mb FROM pool_entries
                         WHERE preset = ?1 AND digest = ?2 AND state = 'ready'
                         ORDER BY created_at, id LIMIT 1",
                        params![preset, digest],
                        |r| {
                            Ok((
                                r.get::<_, String>(0)?,
                                r.get::<_, Option<String>>(1)?,
                                limits_from(r.get(2)?, r.get(3)?),
                            ))
                        },
                    )
                    .optional()?;
                let Some((id, boot_hash, limits)) = found else {
                    return Ok(None);
                };
                tx.execute("DELETE FROM pool_entries WHERE id = ?1", [&id])?;
                new.id = id;
                insert_row(&tx, &new, AgentState::Starting, true)?;
                tx.execute(
                    "UPDATE agents SET boot_token_hash = ?2, needs_rebuild = ?3 WHERE id = ?1",
                    params![new.id, boot_hash, limits != Some(new.limits())],
                )?;
                let agent = must_read_agent(&tx, &new.id)?;
                tx.commit()?;
                Ok(Some((agent, limits)))
            })
            .await?;
        if let Some((a, _)) = &claimed {
            self.note_agent(&a.id, &a.owner_id, a.access);
        }
        Ok(claimed)
    }
}
