//! Each sandbox network's subnet, and the part of the store a sandbox driver may use: just that.
//! Kept apart from the agents' rows because the subnet is the driver's record, not the
//! lifecycle's (the driver reads and writes it, and moves nothing), and because a warm pool
//! entry's network needs one before any agent row exists. Rows go with their agent's or
//! entry's row; a claim keeps the id, and so the subnet.

use async_trait::async_trait;

use rusqlite::{params, OptionalExtension};

use super::{unique_violation, Result, Store, StoreError};

impl Store {
    /// Records the subnet of the network made for `id` (an agent, or a warm pool entry: the
    /// agent it becomes); `None` releases it. `NotFound` when `id` is neither, `SubnetTaken`
    /// if another holds the subnet, so the driver can pick another.
    pub async fn set_subnet(&self, id: &str, subnet: Option<&str>) -> Result<()> {
        let id = id.to_string();
        let Some(subnet) = subnet.map(str::to_string) else {
            return self
                .call(move |c| {
                    c.execute("DELETE FROM subnets WHERE id = ?1", [&id])?;
                    Ok(())
                })
                .await;
        };
        let wanted = subnet.clone();
        self.call(move |c| {
            // `WHERE` also keeps SQLite from reading `ON CONFLICT` as part of the SELECT.
            let changed = c.execute(
                "INSERT INTO subnets (id, subnet)
                 SELECT ?1, ?2
                 WHERE EXISTS (SELECT 1 FROM agents WHERE id = ?1)
                    OR EXISTS (SELECT 1 FROM pool_entries WHERE id = ?1)
                 ON CONFLICT (id) DO UPDATE SET subnet = excluded.subnet",
                params![id, subnet],
            )?;
            match changed {
                0 => Err(StoreError::NotFound(id)),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| match e {
            StoreError::Sqlite(e) if unique_violation(&e) == Some("subnets.subnet") => {
                StoreError::SubnetTaken(wanted)
            }
            e => e,
        })
    }

    /// The subnet recorded for `id`, if any.
    pub async fn subnet(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(
                c.query_row("SELECT subnet FROM subnets WHERE id = ?1", [&id], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })
        .await
    }

    /// Each agent or pool entry that holds a subnet, with it.
    pub async fn subnet_holders(&self) -> Result<Vec<(String, String)>> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT id, subnet FROM subnets")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?;
            Ok(rows)
        })
        .await
    }

    /// Every subnet held, sorted.
    pub async fn subnets_in_use(&self) -> Result<Vec<String>> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT subnet FROM subnets ORDER BY subnet")?;
            let subnets = stmt
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(subnets)
        })
        .await
    }
}

/// Where the Docker driver records each agent network's subnet, so that no two agents share one
/// (the store's unique index has the last word). It is all the driver keeps in the database, so
/// it gets this and not the [`Store`]: the lifecycle alone moves agents.
#[async_trait]
pub trait SubnetBook: Send + Sync {
    /// The subnet recorded for agent `id`.
    async fn subnet(&self, id: &str) -> Result<Option<String>, StoreError>;
    /// Records it (`None` releases it); `SubnetTaken` if another agent holds it.
    async fn set_subnet(&self, id: &str, subnet: Option<&str>) -> Result<(), StoreError>;
    /// Every subnet some agent holds, sorted.
    async fn subnets_in_use(&self) -> Result<Vec<String>, StoreError>;
    /// Each agent that holds a subnet, with it.
    async fn holders(&self) -> Result<Vec<(String, String)>, StoreError>;
}

#[async_trait]
impl SubnetBook for Store {
    async fn subnet(&self, id: &str) -> Result<Option<String>, StoreError> {
        Store::subnet(self, id).await
    }

    async fn set_subnet(&self, id: &str, subnet: Option<&str>) -> Result<(), StoreError> {
        Store::set_subnet(self, id, subnet).await
    }

    async fn subnets_in_use(&self) -> Result<Vec<String>, StoreError> {
        Store::subnets_in_use(self).await
    }

    async fn holders(&self) -> Result<Vec<(String, String)>, StoreError> {
        Store::subnet_holders(self).await
    }
}
