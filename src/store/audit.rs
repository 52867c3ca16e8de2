//! The audit log's table: appended to, read newest first by filters, pruned by age.

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::types::Value;
use rusqlite::{params, Connection, Row};

use super::{Result, Store, StoreError};
use crate::model::audit::{Action, AuditEntry, AuditQuery, Entry, Visible};

/// Times as the table keeps them (fixed width, so text order is time order).
fn text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn insert(c: &Connection, e: &Entry, at: &str) -> Result<i64> {
    c.prepare_cached(
        "INSERT INTO audit (at, user_id, user_name, token_name, action, agent_id, agent_name,
                            detail, address, status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        at,
        e.user_id,
        e.user_name,
        e.token_name,
        e.action.as_str(),
        e.agent_id,
        e.agent_name,
        e.detail,
        e.address.to_string(),
        e.status,
    ])?;
    Ok(c.last_insert_rowid())
}

fn entry(r: &Row<'_>) -> rusqlite::Result<(AuditEntry, String, String)> {
    let at: String = r.get(1)?;
    let action: String = r.get(5)?;
    Ok((
        AuditEntry {
            id: r.get(0)?,
            at: DateTime::<Utc>::MIN_UTC,
            user_id: r.get(2)?,
            user_name: r.get(3)?,
            token_name: r.get(4)?,
            action: Action::SignIn,
            agent_id: r.get(6)?,
            agent_name: r.get(7)?,
            detail: r.get(8)?,
            address: r.get(9)?,
            status: r.get(10)?,
        },
        at,
        action,
    ))
}

/// The row's time and action, which SQL keeps as text, read back.
fn finish((mut e, at, action): (AuditEntry, String, String)) -> Result<AuditEntry> {
    e.at = DateTime::parse_from_rfc3339(&at)
        .map_err(|_| StoreError::Corrupt(format!("audit entry {} has the time {at:?}", e.id)))?
        .with_timezone(&Utc);
    e.action = Action::parse(&action).ok_or_else(|| {
        StoreError::Corrupt(format!("audit entry {} has the action {action:?}", e.id))
    })?;
    Ok(e)
}

impl Store {
    /// Appends `entry`, stamped now; the entry as kept. The time is taken under the
    /// connection's lock, so times grow with ids (but for a clock stepped back), which the
    /// time filters of [`Store::audit_entries`] rely on.
    pub async fn add_audit_entry(&self, entry: &Entry) -> Result<AuditEntry> {
        let entry = entry.clone();
        self.call(move |c| {
            let at = Utc::now();
            let at_text = text(at);
            let id = insert(c, &entry, &at_text)?;
            Ok(AuditEntry {
                id,
                at: DateTime::parse_from_rfc3339(&at_text).map_or(at, |t| t.with_timezone(&Utc)),
                user_id: entry.user_id,
                user_name: entry.user_name,
                token_name: entry.token_name,
                action: entry.action,
                agent_id: entry.agent_id,
                agent_name: entry.agent_name,
                detail: entry.detail,
                address: entry.address.to_string(),
                status: entry.status,
            })
        })
        .await
    }

    /// Appends many entries in one transaction, at the times given, which must grow with the
    /// order (the bench fills a log this way, tests stage one).
    pub async fn add_audit_entries(&self, entries: Vec<(Entry, DateTime<Utc>)>) -> Result<()> {
        self.call(move |c| {
            let tx = c.transaction()?;
            for (e, at) in &entries {
                insert(&tx, e, &text(*at))?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The entries `q` asks for, newest first.
    pub async fn audit_entries(&self, q: AuditQuery) -> Result<Vec<AuditEntry>> {
        let mut sql = String::from(
            "SELECT id, at, user_id, user_name, token_name, action, agent_id, agent_name,
                    detail, address, status
             FROM audit WHERE 1",
        );
        let mut args: Vec<Value> = Vec::new();
        let mut add = |clause: &str, v: Value| {
            args.push(v);
            sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
        };
        match q.visible {
            Visible::All => {}
            Visible::Mine(user_id) => {
                add(
                    " AND (user_id = ? OR agent_id IN (SELECT id FROM agents WHERE owner_id = ?))",
                    Value::Text(user_id),
                );
            }
            Visible::MineOf(user_id, agents) => {
                add(
                    " AND (user_id = ? OR agent_id IN (SELECT id FROM agents WHERE owner_id = ?))",
                    Value::Text(user_id),
                );
                let list = serde_json::to_string(&agents)
                    .map_err(|e| StoreError::Invalid(format!("agents: {e}")))?;
                add(
                    " AND agent_id IN (SELECT value FROM json_each(?))",
                    Value::Text(list),
                );
            }
            Visible::Nothing => return Ok(Vec::new()),
        }
        if let Some(a) = q.agent {
            add(" AND (agent_id = ? OR agent_name = ?)", Value::Text(a));
        }
        if let Some(u) = q.user {
            add(" AND (user_id = ? OR user_name = ?)", Value::Text(u));
        }
        if let Some(a) = q.action {
            add(" AND action = ?", Value::Text(a.as_str().into()));
        }
        // A time bound becomes an id bound too, found in the time index: the rows are then
        // read in id order from the bound, not gathered from the window and sorted.
        if let Some(t) = q.since {
            add(
                " AND id >= coalesce((SELECT id FROM audit WHERE at >= ? ORDER BY at, id LIMIT 1), \
                 9223372036854775807) AND at >= ?",
                Value::Text(text(t)),
            );
        }
        if let Some(t) = q.until {
            add(
                " AND id <= coalesce((SELECT id FROM audit WHERE at <= ? \
                 ORDER BY at DESC, id DESC LIMIT 1), 0) AND at <= ?",
                Value::Text(text(t)),
            );
        }
        if let Some(b) = q.before {
            add(" AND id < ?", Value::Integer(b));
        }
        add(" ORDER BY id DESC LIMIT ?", Value::Integer(q.limit.into()));
        self.call(move |c| {
            let rows = c
                .prepare(&sql)?
                .query_map(rusqlite::params_from_iter(args), entry)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter().map(finish).collect()
        })
        .await
    }

    /// Deletes the entries from before `cutoff`; how many.
    pub async fn prune_audit(&self, cutoff: DateTime<Utc>) -> Result<u64> {
        self.call(move |c| {
            let n = c.execute("DELETE FROM audit WHERE at < ?1", [text(cutoff)])?;
            Ok(n as u64)
        })
        .await
    }
}
