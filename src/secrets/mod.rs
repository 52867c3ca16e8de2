//! Secrets (issue #34): values an agent's programs may use but never see. The server keeps
//! each sealed ([`vault`]) with the hosts it may be sent to; granted agents see a placeholder
//! in its place, which the egress proxy swaps for the value on the way to those hosts only.
//! This module keeps them and decides their rules; nothing here hands a value to the API.

pub mod spec;
pub mod vault;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use chrono::Utc;

use crate::egress::{Grant, Granted, Rule};
use crate::model::secrets::{SealedSecret, SecretInfo};
use crate::store::{Store, StoreError};
pub use spec::SpecError;
pub use vault::{Vault, VaultError};

/// What a `PUT` gives: the value and how it may be used.
pub struct NewSecret {
    pub value: String,
    pub hosts: Vec<Rule>,
    pub header: Option<String>,
    pub format: Option<String>,
    pub in_body: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error(transparent)]
    Invalid(#[from] SpecError),
    #[error("there is no secret named {0}")]
    NotFound(String),
    #[error(
        "there are already {} secrets, the most one server keeps",
        spec::MAX_SECRETS
    )]
    TooMany,
    #[error(transparent)]
    Vault(#[from] VaultError),
    #[error("the secrets could not be kept: {0}")]
    Store(#[from] StoreError),
}

pub struct Secrets {
    vault: Vault,
    store: Store,
    /// Every secret by name, sealed as in the store, so listing reads no database.
    cache: RwLock<BTreeMap<String, SealedSecret>>,
}

impl Secrets {
    /// The secrets kept in `store`, sealed with the key at `key_path` (made when missing).
    pub async fn open(store: Store, key_path: &Path) -> Result<Secrets, SecretsError> {
        let vault = Vault::open(key_path)?;
        let all = store.list_secrets().await?;
        Ok(Secrets {
            vault,
            store,
            cache: RwLock::new(all.into_iter().map(|s| (s.info.name.clone(), s)).collect()),
        })
    }

    // A panic while holding the lock leaves a map that is whole: safe to go on with.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, SealedSecret>> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, SealedSecret>> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Every secret's description, by name.
    pub fn list(&self) -> Vec<SecretInfo> {
        self.read().values().map(|s| s.info.clone()).collect()
    }

    /// Whether a secret of that name exists.
    pub fn exists(&self, name: &str) -> bool {
        self.read().contains_key(name)
    }

    /// Sets secret `name` (new, or a rotation: the next request uses the new value). True when
    /// it is new.
    pub async fn put(
        &self,
        name: &str,
        new: NewSecret,
    ) -> Result<(SecretInfo, bool), SecretsError> {
        spec::check_name(name)?;
        spec::check_value(&new.value)?;
        spec::check_hosts(&new.hosts)?;
        let header = new
            .header
            .unwrap_or_else(|| spec::DEFAULT_HEADER.to_string());
        spec::check_header(&header)?;
        let format = new
            .format
            .unwrap_or_else(|| spec::DEFAULT_FORMAT.to_string());
        spec::check_format(&format)?;
        let existing = self.read().get(name).map(|s| s.info.created_at);
        if existing.is_none() && self.read().len() >= spec::MAX_SECRETS {
            return Err(SecretsError::TooMany);
        }
        let now = Utc::now();
        let (nonce, sealed) = self.vault.seal(name, &new.value);
        let secret = SealedSecret {
            info: SecretInfo {
                name: name.to_string(),
                hosts: new.hosts,
                header,
                format,
                in_body: new.in_body,
                created_at: existing.unwrap_or(now),
                updated_at: now,
            },
            nonce,
            sealed,
        };
        let created = self.store.put_secret(secret.clone()).await?;
        let info = secret.info.clone();
        self.write().insert(name.to_string(), secret);
        tracing::info!(secret = name, created, "secret set");
        Ok((info, created))
    }

    /// What agent `agent`'s sandbox sees in variable `name` during the boot whose token hashes
    /// to `boot` (see [`Vault::placeholder`]).
    pub fn placeholder(&self, agent: &str, boot: &str, name: &str) -> String {
        self.vault.placeholder(agent, boot, name)
    }

    /// The grants of agent `agent` in boot `boot` for the secrets `names` it is granted, each
    /// value unsealed now (so a rotation counts from the next call). A name with no secret (one
    /// deleted meanwhile) gives none, as does one that does not unseal (logged, without the
    /// value). The only way a value leaves this module: into a [`Grant`] for the proxy.
    pub fn granted(&self, agent: &str, boot: &str, names: &[String]) -> Granted {
        let cache = self.read();
        let grants = names
            .iter()
            .filter_map(|name| {
                let s = cache.get(name)?;
                let value = match self.vault.unseal(name, &s.nonce, &s.sealed) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(agent, secret = %name, "{e}");
                        return None;
                    }
                };
                Some(Grant::new(
                    name.clone(),
                    self.placeholder(agent, boot, name),
                    s.info.hosts.clone(),
                    s.info.header.clone(),
                    s.info.format.clone(),
                    s.info.in_body,
                    value,
                ))
            })
            .collect();
        Granted::new(grants)
    }

    pub async fn delete(&self, name: &str) -> Result<(), SecretsError> {
        if !self.store.remove_secret(name).await? {
            return Err(SecretsError::NotFound(name.to_string()));
        }
        self.write().remove(name);
        tracing::info!(secret = name, "secret deleted");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(value: &str, hosts: &[&str]) -> NewSecret {
        NewSecret {
            value: value.into(),
            hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
            header: None,
            format: None,
            in_body: false,
        }
    }

    #[tokio::test]
    async fn grants_differ_per_agent_and_boot_and_follow_rotation_and_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).await.unwrap();
        let s = Secrets::open(store, &dir.path().join("key")).await.unwrap();
        s.put("GITHUB_TOKEN", new("ghp_first", &["api.github.com"]))
            .await
            .unwrap();
        let names = vec!["GITHUB_TOKEN".to_string(), "NEVER_MADE".to_string()];
        let one = |agent: &str, boot: &str| {
            let g = s.granted(agent, boot, &names);
            let all: Vec<Grant> = g.iter().cloned().collect();
            assert_eq!(all.len(), 1, "no grant for a secret that does not exist");
            all.into_iter().next().unwrap()
        };
        let a = one("agent1", "boot1");
        assert_eq!(a.value(), "ghp_first");
        assert_eq!(
            a.placeholder,
            s.placeholder("agent1", "boot1", "GITHUB_TOKEN")
        );
        assert!(a.allows("api.github.com", 443));
        assert_ne!(
            a.placeholder,
            one("agent2", "boot1").placeholder,
            "per agent"
        );
        assert_ne!(
            a.placeholder,
            one("agent1", "boot2").placeholder,
            "per boot"
        );
        s.put("GITHUB_TOKEN", new("ghp_second", &["api.github.com"]))
            .await
            .unwrap();
        let rotated = one("agent1", "boot1");
        assert_eq!(
            rotated.value(),
            "ghp_second",
            "the next grant has the new value"
        );
        assert_eq!(rotated.placeholder, a.placeholder, "the placeholder stays");
        s.delete("GITHUB_TOKEN").await.unwrap();
        assert!(s.granted("agent1", "boot1", &names).is_empty());
    }

    #[tokio::test]
    async fn secrets_are_kept_sealed_across_a_restart_and_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("agenthold.db");
        let key = dir.path().join("secrets.key");
        let store = Store::open(&db).await.unwrap();
        let s = Secrets::open(store.clone(), &key).await.unwrap();
        let (info, created) = s
            .put("GITHUB_TOKEN", new("ghp_first_value", &["api.github.com"]))
            .await
            .unwrap();
        assert!(created);
        assert_eq!(info.header, "Authorization");
        assert_eq!(info.format, "Bearer {value}");
        let (again, created) = s
            .put("GITHUB_TOKEN", new("ghp_second_value", &["api.github.com"]))
            .await
            .unwrap();
        assert!(!created, "a rotation");
        assert_eq!(again.created_at, info.created_at);
        drop(s);
        drop(store);
        let bytes = std::fs::read(&db).unwrap();
        for v in [&b"ghp_first_value"[..], b"ghp_second_value"] {
            assert!(
                !bytes.windows(v.len()).any(|w| w == v),
                "no value in clear in the database"
            );
        }
        let store = Store::open(&db).await.unwrap();
        let s = Secrets::open(store, &key).await.unwrap();
        let kept = s.read().get("GITHUB_TOKEN").cloned().unwrap();
        assert_eq!(
            s.vault
                .unseal("GITHUB_TOKEN", &kept.nonce, &kept.sealed)
                .unwrap(),
            "ghp_second_value"
        );
        assert_eq!(s.list().len(), 1);
        s.delete("GITHUB_TOKEN").await.unwrap();
        assert!(matches!(
            s.delete("GITHUB_TOKEN").await,
            Err(SecretsError::NotFound(_))
        ));
        assert!(matches!(
            s.put("HTTP_PROXY", new("x", &["a.test"])).await,
            Err(SecretsError::Invalid(e)) if e.field == "name"
        ));
    }
}
