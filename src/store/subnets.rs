//! Each agent network's subnet, and the part of the store a sandbox driver may use: just that.
//! Kept apart from the agents' rows because the subnet is the driver's record, not the
//! lifecycle's: the driver reads and writes it, and moves nothing.

use async_trait::async_trait;

use super::{unique_violation, Result, Store, StoreError};

impl Store {
    /// Records the agent network's subnet (`None` releases it). `SubnetTaken` if another agent
    /// holds it, so the driver can pick another.
    pub async fn set_subnet(&self, id: &str, subnet: Option<&str>) -> Result<()> {
        let wanted = subnet.map(str::to_string);
        self.update_one(
            id,
            "UPDATE agents SET subnet = ?3, updated_at = ?2 WHERE id = ?1",
            wanted.clone(),
        )
        .await
        .map_err(|e| match (e, wanted) {
            (StoreError::Sqlite(e), Some(s)) if unique_violation(&e) == Some("agents.subnet") => {
                StoreError::SubnetTaken(s)
            }
            (e, _) => e,
        })
    }

    pub async fn subnet(&self, id: &str) -> Result<Option<String>> {
        self.column(id, "subnet").await
    }

    /// Each agent that holds a subnet, with it.
    pub async fn subnet_holders(&self) -> Result<Vec<(String, String)>> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT id, subnet FROM agents WHERE subnet IS NOT NULL")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?;
            Ok(rows)
        })
        .await
    }

    /// Every subnet some agent holds, sorted.
    pub async fn subnets_in_use(&self) -> Result<Vec<String>> {
        self.call(|c| {
            let mut stmt =
                c.prepare("SELECT subnet FROM agents WHERE subnet IS NOT NULL ORDER BY subnet")?;
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
