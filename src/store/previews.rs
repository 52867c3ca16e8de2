//! Previews (see [`crate::previews`]): one row per agent and port, created and deleted in one
//! transaction each, so the `max_per_agent` count and the one-per-port rule hold under races.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{now_text, Store, StoreError};
use crate::model::previews::{Access, PreviewRecord};

/// Why a preview change was refused.
#[derive(Debug, thiserror::Error)]
pub enum PreviewStoreError {
    #[error("no preview {0:?}")]
    NoPreview(String),
    /// `server.previews.max_per_agent` reached.
    #[error(
        "the agent has {0} previews already, the most it may have (server.previews.max_per_agent)"
    )]
    TooMany(u32),
    /// The port has a live preview: its id.
    #[error("port {port} already has a preview ({id}); delete it first")]
    PortTaken { port: u16, id: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for PreviewStoreError {
    fn from(e: rusqlite::Error) -> Self {
        PreviewStoreError::Store(StoreError::Sqlite(e))
    }
}

type PResult<T> = std::result::Result<T, PreviewStoreError>;

const COLUMNS: &str = "id, agent_id, port, access, token_hash, created_at, expires_at, deleted_at";

fn row(r: &Row) -> rusqlite::Result<PreviewRecord> {
    let access: String = r.get(3)?;
    let port: i64 = r.get(2)?;
    Ok(PreviewRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        port: u16::try_from(port).unwrap_or(0),
        // Written from the enum: anything else is a hand edit, read as the strictest.
        access: Access::parse(&access).unwrap_or(Access::Private),
        token_hash: r.get(4)?,
        created_at: r.get(5)?,
        expires_at: r.get(6)?,
        deleted_at: r.get(7)?,
    })
}

/// The agent's live previews at `now`, by port.
fn live(c: &Connection, agent: &str, now: &str) -> rusqlite::Result<Vec<PreviewRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM previews WHERE agent_id = ?1 AND deleted_at IS NULL \
         AND (expires_at IS NULL OR expires_at > ?2) ORDER BY port"
    ))?;
    let rows = stmt.query_map(params![agent, now], row)?;
    rows.collect()
}

impl Store {
    /// Adds `preview`, replacing a tombstone on its port; refused when the port has a live
    /// preview or the agent has `max` already.
    pub async fn create_preview(&self, preview: PreviewRecord, max: u32) -> PResult<()> {
        self.call(move |c| Ok(insert(c, &preview, max)))
            .await
            .map_err(PreviewStoreError::Store)?
    }

    /// The agent's live previews, by port.
    pub async fn list_previews(&self, agent: &str) -> Result<Vec<PreviewRecord>, StoreError> {
        let agent = agent.to_string();
        self.call(move |c| Ok(live(c, &agent, &now_text())?)).await
    }

    /// The preview on the agent's port, live or a tombstone.
    pub async fn preview_on_port(
        &self,
        agent: &str,
        port: u16,
    ) -> Result<Option<PreviewRecord>, StoreError> {
        let agent = agent.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {COLUMNS} FROM previews WHERE agent_id = ?1 AND port = ?2"),
                params![agent, port],
                row,
            )
            .optional()?)
        })
        .await
    }

    /// A preview by id, live or a tombstone.
    pub async fn get_preview(&self, id: &str) -> Result<Option<PreviewRecord>, StoreError> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {COLUMNS} FROM previews WHERE id = ?1"),
                [id],
                row,
            )
            .optional()?)
        })
        .await
    }

    /// Marks the agent's preview `id` deleted; `NoPreview` if it has none such that is live.
    pub async fn delete_preview(&self, agent: &str, id: &str) -> PResult<PreviewRecord> {
        let (agent, id) = (agent.to_string(), id.to_string());
        self.call(move |c| {
            let now = now_text();
            let found = c
                .query_row(
                    &format!("SELECT {COLUMNS} FROM previews WHERE id = ?1 AND agent_id = ?2"),
                    params![id, agent],
                    row,
                )
                .optional()?;
            Ok(match found {
                Some(p) if p.is_live(&now) => {
                    c.execute(
                        "UPDATE previews SET deleted_at = ?2 WHERE id = ?1",
                        params![id, now],
                    )?;
                    Ok(PreviewRecord {
                        deleted_at: Some(now),
                        ..p
                    })
                }
                _ => Err(PreviewStoreError::NoPreview(id)),
            })
        })
        .await
        .map_err(PreviewStoreError::Store)?
    }

    /// The id of the live (not being destroyed) agent named `name`.
    pub async fn agent_id_by_name(&self, name: &str) -> Result<Option<String>, StoreError> {
        let name = name.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT id FROM agents WHERE name = ?1 AND state != 'destroying'",
                [name],
                |r| r.get(0),
            )
            .optional()?)
        })
        .await
    }
}

fn insert(c: &mut Connection, p: &PreviewRecord, max: u32) -> PResult<()> {
    let tx = c.transaction()?;
    let now = now_text();
    let previews = live(&tx, &p.agent_id, &now)?;
    if let Some(taken) = previews.iter().find(|l| l.port == p.port) {
        return Err(PreviewStoreError::PortTaken {
            port: p.port,
            id: taken.id.clone(),
        });
    }
    if previews.len() >= max as usize {
        return Err(PreviewStoreError::TooMany(max));
    }
    tx.execute(
        "DELETE FROM previews WHERE agent_id = ?1 AND port = ?2",
        params![p.agent_id, p.port],
    )?;
    tx.execute(
        &format!("INSERT INTO previews ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)"),
        params![
            p.id,
            p.agent_id,
            p.port,
            p.access.as_str(),
            p.token_hash,
            p.created_at,
            p.expires_at
        ],
    )?;
    tx.commit()?;
    Ok(())
}
