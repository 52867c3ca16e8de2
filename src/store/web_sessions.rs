//! Web UI sign-ins that outlive a restart. Only the hash of a session's cookie is kept, with the
//! admin token it was opened with and when it ends (Unix seconds).

use super::{Result, Store};

impl Store {
    /// Records a session, dropping any that have ended on the way (sessions are few, and this
    /// keeps the table from growing on a server that never restarts).
    pub async fn add_web_session(
        &self,
        token_hash: &str,
        admin_hash: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<()> {
        let (token_hash, admin_hash) = (token_hash.to_string(), admin_hash.to_string());
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute("DELETE FROM web_sessions WHERE expires_at <= ?1", [now])?;
            tx.execute(
                "INSERT INTO web_sessions (token_hash, admin_hash, expires_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![token_hash, admin_hash, expires_at],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Forgets a session; forgetting one that is not there is not an error.
    pub async fn remove_web_session(&self, token_hash: &str) -> Result<()> {
        let token_hash = token_hash.to_string();
        self.call(move |c| {
            c.execute(
                "DELETE FROM web_sessions WHERE token_hash = ?1",
                [&token_hash],
            )?;
            Ok(())
        })
        .await
    }

    /// The sessions opened with `admin_hash` that have not ended by `now`, as (hash, end).
    /// Every other session is deleted: it can never be used again.
    pub async fn live_web_sessions(
        &self,
        admin_hash: &str,
        now: i64,
    ) -> Result<Vec<(String, i64)>> {
        let admin_hash = admin_hash.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "DELETE FROM web_sessions WHERE admin_hash != ?1 OR expires_at <= ?2",
                rusqlite::params![admin_hash, now],
            )?;
            let live = tx
                .prepare("SELECT token_hash, expires_at FROM web_sessions")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(String, i64)>>>()?;
            tx.commit()?;
            Ok(live)
        })
        .await
    }
}
