//! Web UI sign-ins that outlive a restart. Only the hash of a session's cookie is kept, with the
//! admin token it was opened with, the user it belongs to (none for one opened with the admin
//! token) and when it ends (Unix seconds).

use super::{Result, Store};

impl Store {
    /// Records a session, dropping any that have ended on the way (sessions are few, and this
    /// keeps the table from growing on a server that never restarts).
    pub async fn add_web_session(
        &self,
        token_hash: &str,
        admin_hash: &str,
        user_id: Option<String>,
        expires_at: i64,
        now: i64,
    ) -> Result<()> {
        let (token_hash, admin_hash) = (token_hash.to_string(), admin_hash.to_string());
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute("DELETE FROM web_sessions WHERE expires_at <= ?1", [now])?;
            tx.execute(
                "INSERT INTO web_sessions (token_hash, admin_hash, user_id, expires_at)
                 VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![token_hash, admin_hash, user_id, expires_at],
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

    /// Forgets every session of user `user_id`.
    pub async fn remove_web_sessions_of_user(&self, user_id: &str) -> Result<()> {
        let user_id = user_id.to_string();
        self.call(move |c| {
            c.execute("DELETE FROM web_sessions WHERE user_id = ?1", [&user_id])?;
            Ok(())
        })
        .await
    }

    /// The sessions that have not ended by `now`, as (hash, end, user id), leaving out those
    /// opened with an admin token other than `admin_hash`. Every other session is deleted: it
    /// can never be used again.
    pub async fn live_web_sessions(
        &self,
        admin_hash: &str,
        now: i64,
    ) -> Result<Vec<(String, i64, Option<String>)>> {
        let admin_hash = admin_hash.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                "DELETE FROM web_sessions
                 WHERE (user_id IS NULL AND admin_hash != ?1) OR expires_at <= ?2",
                rusqlite::params![admin_hash, now],
            )?;
            let live = tx
                .prepare("SELECT token_hash, expires_at, user_id FROM web_sessions")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<Vec<(String, i64, Option<String>)>>>()?;
            tx.commit()?;
            Ok(live)
        })
        .await
    }
}
