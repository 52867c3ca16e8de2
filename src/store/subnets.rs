//! The part of the store a sandbox driver may use: each agent's subnet.

use async_trait::async_trait;

use super::{Store, StoreError};

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
