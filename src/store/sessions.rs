//! Agent sessions, their transcripts and the approval queue (see [`crate::sessions`]). A turn's
//! start, its events with how far the harness's output was read, and its end are each one
//! transaction, so a crash leaves a session that a restarted server can carry on from.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{now_text, Store, StoreError};
use crate::model::sessions::{
    ApprovalKind, ApprovalRecord, EventKind, NewEvent, Outcome, Restore, SessionRecord, StoredEvent,
};

/// Why a session change was refused.
#[derive(Debug, thiserror::Error)]
pub enum SessionStoreError {
    #[error("no session {0:?}")]
    NoSession(String),
    #[error("no approval {0:?}")]
    NoApproval(String),
    /// `sessions.max_per_agent` reached.
    #[error("the agent has {0} sessions already, the most it may have (sessions.max_per_agent)")]
    TooMany(u32),
    #[error("a turn is running in this session")]
    TurnRunning,
    #[error("no turn is running in this session")]
    NoTurn,
    /// The first answer won.
    #[error("approval {0} was already {1}")]
    Decided(String, &'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for SessionStoreError {
    fn from(e: rusqlite::Error) -> Self {
        SessionStoreError::Store(StoreError::Sqlite(e))
    }
}

type SResult<T> = std::result::Result<T, SessionStoreError>;

const SESSION_COLUMNS: &str = "id, agent_id, harness, title, cwd, running, acp_session_id, \
    restore, process_id, created_at, updated_at, turns, output_offset, prompt_rpc, next_rpc, \
    last_seq";

fn session_row(r: &Row) -> rusqlite::Result<SessionRecord> {
    let restore: Option<String> = r.get(7)?;
    Ok(SessionRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        harness: r.get(2)?,
        title: r.get(3)?,
        cwd: r.get(4)?,
        running: r.get(5)?,
        acp_session_id: r.get(6)?,
        restore: restore.as_deref().and_then(Restore::parse),
        process_id: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        turns: r.get::<_, i64>(11)? as u64,
        output_offset: r.get::<_, i64>(12)? as u64,
        prompt_rpc: r.get(13)?,
        next_rpc: r.get(14)?,
        last_seq: r.get::<_, i64>(15)? as u64,
    })
}

const APPROVAL_COLUMNS: &str = "id, agent_id, session_id, tool_call, options, created_at, \
    expires_at, outcome, option_id, decided_by, rpc_id, kind, command, requester";

fn approval_row(r: &Row) -> rusqlite::Result<ApprovalRecord> {
    let tool_call: String = r.get(3)?;
    let options: String = r.get(4)?;
    let outcome: Option<String> = r.get(7)?;
    let rpc_id: String = r.get(10)?;
    let kind: String = r.get(11)?;
    Ok(ApprovalRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        // The table's CHECK keeps it one of the two.
        kind: ApprovalKind::parse(&kind).unwrap_or(ApprovalKind::Command),
        session_id: r.get(2)?,
        command: r.get(12)?,
        requester: r.get(13)?,
        tool_call: serde_json::from_str(&tool_call).unwrap_or(Value::Null),
        options: serde_json::from_str(&options).unwrap_or_default(),
        created_at: r.get(5)?,
        expires_at: r.get(6)?,
        outcome: outcome.as_deref().and_then(Outcome::parse),
        option_id: r.get(8)?,
        decided_by: r.get(9)?,
        rpc_id: serde_json::from_str(&rpc_id).unwrap_or(Value::Null),
    })
}

fn insert_approval(c: &Connection, a: &ApprovalRecord) -> rusqlite::Result<usize> {
    c.execute(
        &format!(
            "INSERT INTO approvals ({APPROVAL_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, NULL, ?8, ?9, ?10, ?11)"
        ),
        params![
            a.id,
            a.agent_id,
            a.session_id,
            a.tool_call.to_string(),
            serde_json::to_string(&a.options).unwrap_or_else(|_| "[]".into()),
            a.created_at,
            a.expires_at,
            a.rpc_id.to_string(),
            a.kind.as_str(),
            a.command,
            a.requester
        ],
    )
}

fn get_session(c: &Connection, id: &str) -> SResult<SessionRecord> {
    c.query_row(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
        [id],
        session_row,
    )
    .optional()?
    .ok_or_else(|| SessionStoreError::NoSession(id.to_string()))
}

fn get_approval(c: &Connection, id: &str) -> SResult<ApprovalRecord> {
    c.query_row(
        &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"),
        [id],
        approval_row,
    )
    .optional()?
    .ok_or_else(|| SessionStoreError::NoApproval(id.to_string()))
}

/// Appends `events` after the session's last one; returns the new last sequence number.
/// Beyond `max_bytes` of transcript the oldest events are dropped, and a `gap` notice
/// appended says how many.
fn append(
    c: &Connection,
    session: &str,
    events: &[NewEvent],
    max_bytes: u64,
) -> rusqlite::Result<u64> {
    let (mut seq, mut bytes): (i64, i64) = c.query_row(
        "SELECT last_seq, transcript_bytes FROM sessions WHERE id = ?1",
        [session],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let at = now_text();
    let mut insert = c.prepare_cached(
        "INSERT INTO session_events (session_id, seq, kind, data, at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for e in events {
        seq += 1;
        bytes += e.size() as i64;
        insert.execute(params![session, seq, e.kind.as_str(), e.data.get(), at])?;
    }
    if bytes as u64 > max_bytes {
        // Down to three quarters, so that a full transcript is trimmed now and then rather
        // than at every event.
        let target = (max_bytes / 4 * 3) as i64;
        let mut dropped = 0u64;
        let mut rows = c.prepare_cached(
            "SELECT seq, length(CAST(data AS BLOB)) + 32 FROM session_events WHERE session_id = ?1 \
             ORDER BY seq",
        )?;
        let mut upto = 0i64;
        let mut q = rows.query([session])?;
        while let Some(r) = q.next()? {
            if bytes <= target {
                break;
            }
            let (s, size): (i64, i64) = (r.get(0)?, r.get(1)?);
            bytes -= size;
            upto = s;
            dropped += 1;
        }
        drop(q);
        c.execute(
            "DELETE FROM session_events WHERE session_id = ?1 AND seq <= ?2",
            params![session, upto],
        )?;
        let notice = NewEvent::notice(
            crate::model::sessions::NoticeKind::Gap,
            format!(
                "{dropped} older events (up to {upto}) were dropped to keep the transcript \
                 within sessions.transcript_max_mb"
            ),
        );
        seq += 1;
        bytes += notice.size() as i64;
        insert.execute(params![
            session,
            seq,
            notice.kind.as_str(),
            notice.data.get(),
            at
        ])?;
    }
    c.execute(
        "UPDATE sessions SET last_seq = ?2, transcript_bytes = ?3 WHERE id = ?1",
        params![session, seq, bytes],
    )?;
    Ok(seq as u64)
}

impl Store {
    /// Makes a session, unless the agent has `max` already.
    pub async fn add_session(&self, s: SessionRecord, max: u32) -> SResult<SessionRecord> {
        self.call_s(move |c| {
            let tx = c.transaction()?;
            let count: i64 = tx.query_row(
                "SELECT count(*) FROM sessions WHERE agent_id = ?1",
                [&s.agent_id],
                |r| r.get(0),
            )?;
            if count >= max as i64 {
                return Err(SessionStoreError::TooMany(max));
            }
            let now = now_text();
            tx.execute(
                "INSERT INTO sessions (id, agent_id, harness, title, cwd, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                params![s.id, s.agent_id, s.harness, s.title, s.cwd, now],
            )?;
            let made = get_session(&tx, &s.id)?;
            tx.commit()?;
            Ok(made)
        })
        .await
    }

    pub async fn session(&self, id: &str) -> SResult<SessionRecord> {
        let id = id.to_string();
        self.call_s(move |c| get_session(c, &id)).await
    }

    /// The agent's sessions, oldest first.
    pub async fn sessions_of(&self, agent: &str) -> SResult<Vec<SessionRecord>> {
        let agent = agent.to_string();
        self.call_s(move |c| {
            let mut q = c.prepare(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE agent_id = ?1 ORDER BY created_at, id"
            ))?;
            let out = q
                .query_map([agent], session_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(out)
        })
        .await
    }

    /// Sessions with a turn running (a restarted server carries them on).
    pub async fn running_sessions(&self) -> SResult<Vec<SessionRecord>> {
        self.call_s(move |c| {
            let mut q = c.prepare(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE running = 1"
            ))?;
            let out = q
                .query_map([], session_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(out)
        })
        .await
    }

    pub async fn rename_session(&self, id: &str, title: String) -> SResult<SessionRecord> {
        let id = id.to_string();
        self.call_s(move |c| {
            let n = c.execute(
                "UPDATE sessions SET title = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, title, now_text()],
            )?;
            if n == 0 {
                return Err(SessionStoreError::NoSession(id));
            }
            get_session(c, &id)
        })
        .await
    }

    pub async fn delete_session(&self, id: &str) -> SResult<()> {
        let id = id.to_string();
        self.call_s(
            move |c| match c.execute("DELETE FROM sessions WHERE id = ?1", [&id])? {
                0 => Err(SessionStoreError::NoSession(id)),
                _ => Ok(()),
            },
        )
        .await
    }

    /// Starts a turn in an idle session: its number goes up and `events` (the prompt and the
    /// turn's start) are appended. Refused while a turn runs.
    pub async fn start_turn(
        &self,
        id: &str,
        events: impl FnOnce(u64) -> Vec<NewEvent> + Send + 'static,
        max_bytes: u64,
    ) -> SResult<(SessionRecord, u64)> {
        let id = id.to_string();
        self.call_s(move |c| {
            let tx = c.transaction()?;
            let s = get_session(&tx, &id)?;
            if s.running {
                return Err(SessionStoreError::TurnRunning);
            }
            let turn = s.turns + 1;
            tx.execute(
                "UPDATE sessions SET running = 1, turns = ?2, prompt_rpc = NULL, updated_at = ?3 \
                 WHERE id = ?1",
                params![id, turn as i64, now_text()],
            )?;
            append(&tx, &id, &events(turn), max_bytes)?;
            let s = get_session(&tx, &id)?;
            tx.commit()?;
            Ok((s, turn))
        })
        .await
    }

    /// Ends the running turn with `events`; `false` when no turn ran (it had ended already).
    pub async fn end_turn(
        &self,
        id: &str,
        events: Vec<NewEvent>,
        max_bytes: u64,
    ) -> SResult<Option<SessionRecord>> {
        let id = id.to_string();
        self.call_s(move |c| {
            let tx = c.transaction()?;
            let s = get_session(&tx, &id)?;
            if !s.running {
                return Ok(None);
            }
            tx.execute(
                "UPDATE sessions SET running = 0, prompt_rpc = NULL, updated_at = ?2 WHERE id = ?1",
                params![id, now_text()],
            )?;
            append(&tx, &id, &events, max_bytes)?;
            let s = get_session(&tx, &id)?;
            tx.commit()?;
            Ok(Some(s))
        })
        .await
    }

    /// Appends events, and records how far the harness's output was read with them (when
    /// given); returns the last sequence number.
    pub async fn append_events(
        &self,
        id: &str,
        events: Vec<NewEvent>,
        output_offset: Option<u64>,
        max_bytes: u64,
    ) -> SResult<u64> {
        let id = id.to_string();
        self.call_s(move |c| {
            let tx = c.transaction()?;
            let seq = append(&tx, &id, &events, max_bytes)?;
            if let Some(off) = output_offset {
                tx.execute(
                    "UPDATE sessions SET output_offset = ?2 WHERE id = ?1",
                    params![id, off as i64],
                )?;
            }
            tx.commit()?;
            Ok(seq)
        })
        .await
    }

    /// Records the harness's process (its output read from `offset` on), the ACP session and
    /// how it was reopened; `None` leaves a field as it is.
    pub async fn set_session_harness(
        &self,
        id: &str,
        process: Option<(String, u64)>,
        acp: Option<(String, Option<Restore>)>,
    ) -> SResult<SessionRecord> {
        let id = id.to_string();
        self.call_s(move |c| {
            let tx = c.transaction()?;
            if let Some((pid, offset)) = process {
                tx.execute(
                    "UPDATE sessions SET process_id = ?2, output_offset = ?3 WHERE id = ?1",
                    params![id, pid, offset as i64],
                )?;
            }
            if let Some((acp_id, restore)) = acp {
                tx.execute(
                    "UPDATE sessions SET acp_session_id = ?2, restore = ?3, updated_at = ?4 \
                     WHERE id = ?1",
                    params![id, acp_id, restore.map(Restore::as_str), now_text()],
                )?;
            }
            let s = get_session(&tx, &id)?;
            tx.commit()?;
            Ok(s)
        })
        .await
    }

    /// Takes the next JSON-RPC id for a request to the harness (ids stay unique across
    /// server restarts); with `prompt`, records it as the running turn's `session/prompt`.
    pub async fn next_rpc_id(&self, id: &str, prompt: bool) -> SResult<i64> {
        let id = id.to_string();
        self.call_s(move |c| {
            let tx = c.transaction()?;
            let s = get_session(&tx, &id)?;
            tx.execute(
                "UPDATE sessions SET next_rpc = next_rpc + 1 WHERE id = ?1",
                [&id],
            )?;
            if prompt {
                tx.execute(
                    "UPDATE sessions SET prompt_rpc = ?2 WHERE id = ?1",
                    params![id, s.next_rpc],
                )?;
            }
            tx.commit()?;
            Ok(s.next_rpc)
        })
        .await
    }

    /// Events after `after`, at most `limit`, oldest first.
    pub async fn session_events(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> SResult<Vec<StoredEvent>> {
        let id = id.to_string();
        self.call_s(move |c| {
            let mut q = c.prepare_cached(
                "SELECT seq, kind, data, at FROM session_events WHERE session_id = ?1 AND seq > ?2 \
                 ORDER BY seq LIMIT ?3",
            )?;
            let rows = q.query_map(params![id, after as i64, limit], |r| {
                let kind: String = r.get(1)?;
                let data: String = r.get(2)?;
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    kind,
                    data,
                    r.get::<_, String>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, kind, data, at) = row?;
                let (Some(kind), Ok(data)) = (EventKind::parse(&kind), RawValue::from_string(data))
                else {
                    continue;
                };
                out.push(StoredEvent {
                    seq,
                    kind,
                    data,
                    at,
                });
            }
            Ok(out)
        })
        .await
    }

    /// Records a new approval and its `permission` event, with how far the harness's output
    /// was read (past the request).
    pub async fn add_approval(
        &self,
        a: ApprovalRecord,
        output_offset: u64,
        max_bytes: u64,
    ) -> SResult<u64> {
        let sid = a
            .session_id
            .clone()
            .ok_or_else(|| SessionStoreError::NoSession(String::new()))?;
        self.call_s(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "UPDATE sessions SET output_offset = ?2 WHERE id = ?1",
                params![sid, output_offset as i64],
            )?;
            insert_approval(&tx, &a)?;
            let event = NewEvent::of(EventKind::Permission, &a.data());
            let seq = append(&tx, &sid, &[event], max_bytes)?;
            tx.commit()?;
            Ok(seq)
        })
        .await
    }

    /// Records a new command approval (of no session, so with no transcript event).
    pub async fn add_command_approval(&self, a: ApprovalRecord) -> SResult<()> {
        self.call_s(move |c| {
            insert_approval(c, &a)?;
            Ok(())
        })
        .await
    }

    pub async fn approval(&self, id: &str) -> SResult<ApprovalRecord> {
        let id = id.to_string();
        self.call_s(move |c| get_approval(c, &id)).await
    }

    /// Approvals, oldest first: pending ones, resolved ones (the last 1000), or both; of one
    /// agent or session when given.
    pub async fn approvals(
        &self,
        pending: Option<bool>,
        agent: Option<String>,
        session: Option<String>,
    ) -> SResult<Vec<ApprovalRecord>> {
        self.call_s(move |c| {
            let mut sql = format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 IS NULL OR session_id = ?2)"
            );
            match pending {
                Some(true) => sql.push_str(" AND outcome IS NULL"),
                Some(false) => sql.push_str(" AND outcome IS NOT NULL"),
                None => {}
            }
            sql.push_str(" ORDER BY created_at DESC, id");
            // Resolved ones are history: the last 1000. Pending ones are all listed.
            if pending == Some(false) {
                sql.push_str(" LIMIT 1000");
            }
            let mut q = c.prepare(&sql)?;
            let mut out = q
                .query_map(params![agent, session], approval_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            out.reverse();
            Ok(out)
        })
        .await
    }

    /// Resolves a pending approval, with its `permission_resolved` event when it is a
    /// session's (and that event's sequence number); the first decision wins, a later one gets
    /// [`SessionStoreError::Decided`].
    pub async fn resolve_approval(
        &self,
        id: &str,
        outcome: Outcome,
        option_id: Option<String>,
        by: String,
        max_bytes: u64,
    ) -> SResult<(ApprovalRecord, Option<u64>)> {
        let id = id.to_string();
        self.call_s(move |c| {
            let tx = c.transaction()?;
            let a = get_approval(&tx, &id)?;
            if let Some(o) = a.outcome {
                return Err(SessionStoreError::Decided(id, o.as_str()));
            }
            tx.execute(
                "UPDATE approvals SET outcome = ?2, option_id = ?3, decided_by = ?4 WHERE id = ?1",
                params![id, outcome.as_str(), option_id, by],
            )?;
            let event = NewEvent::of(
                EventKind::PermissionResolved,
                &crate::model::sessions::ResolvedData {
                    id: id.clone(),
                    outcome,
                    option_id,
                    by,
                },
            );
            let seq = match &a.session_id {
                Some(sid) => Some(append(&tx, sid, &[event], max_bytes)?),
                None => None,
            };
            let a = get_approval(&tx, &id)?;
            tx.commit()?;
            Ok((a, seq))
        })
        .await
    }

    async fn call_s<T, F>(&self, f: F) -> SResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> SResult<T> + Send + 'static,
    {
        self.call(move |c| Ok(f(c))).await?
    }
}
