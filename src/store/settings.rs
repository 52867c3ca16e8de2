//! Small server-wide values that must survive restarts (key → text).

use rusqlite::OptionalExtension;

use super::{Result, Store};

impl Store {
    pub async fn get_setting(&self, key: &str) -> Result<Option<String>> {
        let key = key.to_string();
        self.call(move |c| {
            Ok(
                c.query_row("SELECT value FROM settings WHERE key = ?1", [&key], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })
        .await
    }

    /// Sets `key` to `value`, replacing any earlier value.
    pub async fn set_setting(&self, key: &str, value: &str) -> Result<()> {
        let (key, value) = (key.to_string(), value.to_string());
        self.call(move |c| {
            c.execute(
                "INSERT INTO settings (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [&key, &value],
            )?;
            Ok(())
        })
        .await
    }

    /// Removes `key`; removing a missing key is not an error.
    pub async fn delete_setting(&self, key: &str) -> Result<()> {
        let key = key.to_string();
        self.call(move |c| {
            c.execute("DELETE FROM settings WHERE key = ?1", [&key])?;
            Ok(())
        })
        .await
    }
}
