//! Secrets: their descriptions and sealed values (see [`crate::secrets::vault`]); no value is
//! ever written here in clear.

use rusqlite::Row;

use super::users::{time_from_sql, time_to_sql};
use super::{Result, Store, StoreError};
use crate::egress::Rule;
use crate::model::secrets::{SealedSecret, SecretInfo};

const COLUMNS: &str = "name, nonce, sealed, hosts, header, format, in_body, created_at, updated_at";

type Raw = (
    String,
    Vec<u8>,
    Vec<u8>,
    String,
    String,
    String,
    bool,
    String,
    String,
);

fn raw(r: &Row) -> rusqlite::Result<Raw> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

fn from_raw(r: Raw) -> Result<SealedSecret> {
    let (name, nonce, sealed, hosts, header, format, in_body, created, updated) = r;
    let hosts: Vec<Rule> = serde_json::from_str(&hosts)
        .map_err(|e| StoreError::Corrupt(format!("secret {name}'s hosts: {e}")))?;
    Ok(SealedSecret {
        info: SecretInfo {
            hosts,
            header,
            format,
            in_body,
            created_at: time_from_sql("secrets.created_at", &created)?,
            updated_at: time_from_sql("secrets.updated_at", &updated)?,
            name,
        },
        nonce,
        sealed,
    })
}

impl Store {
    pub async fn list_secrets(&self) -> Result<Vec<SealedSecret>> {
        self.call(|c| {
            let raws = c
                .prepare(&format!("SELECT {COLUMNS} FROM secrets ORDER BY name"))?
                .query_map([], raw)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raws.into_iter().map(from_raw).collect()
        })
        .await
    }

    /// Adds secret `s.info.name`, or replaces its value and description (keeping when it was
    /// made). True when it is new.
    pub async fn put_secret(&self, s: SealedSecret) -> Result<bool> {
        self.call(move |c| {
            let hosts = serde_json::to_string(&s.info.hosts)
                .map_err(|e| StoreError::Invalid(format!("hosts: {e}")))?;
            let tx = c.transaction()?;
            let existed: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM secrets WHERE name = ?1)",
                [&s.info.name],
                |r| r.get(0),
            )?;
            tx.execute(
                "INSERT INTO secrets (name, nonce, sealed, hosts, header, format, in_body, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (name) DO UPDATE SET nonce = ?2, sealed = ?3, hosts = ?4, header = ?5,
                     format = ?6, in_body = ?7, updated_at = ?9",
                rusqlite::params![
                    s.info.name,
                    s.nonce,
                    s.sealed,
                    hosts,
                    s.info.header,
                    s.info.format,
                    s.info.in_body,
                    time_to_sql(s.info.created_at),
                    time_to_sql(s.info.updated_at),
                ],
            )?;
            tx.commit()?;
            Ok(!existed)
        })
        .await
    }

    /// Deletes a secret and takes its name off every agent granted it, in one step (so that a
    /// secret made again under that name is granted to nobody); false when there was none.
    pub async fn remove_secret(&self, name: &str) -> Result<bool> {
        let name = name.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            if tx.execute("DELETE FROM secrets WHERE name = ?1", [&name])? == 0 {
                return Ok(false);
            }
            let granted = tx
                .prepare("SELECT id, secrets FROM agents WHERE secrets IS NOT NULL")?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for (id, list) in granted {
                let mut names: Vec<String> = serde_json::from_str(&list)
                    .map_err(|e| StoreError::Corrupt(format!("agent {id}'s secrets: {e}")))?;
                let before = names.len();
                names.retain(|n| *n != name);
                if names.len() == before {
                    continue;
                }
                let kept = (!names.is_empty())
                    .then(|| serde_json::to_string(&names))
                    .transpose()
                    .map_err(|e| StoreError::Invalid(format!("secrets: {e}")))?;
                tx.execute(
                    "UPDATE agents SET secrets = ?2, updated_at = ?3 WHERE id = ?1",
                    rusqlite::params![id, kept, super::now_text()],
                )?;
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }
}
