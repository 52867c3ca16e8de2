//! Users and their API tokens. A user's password is kept as an Argon2id PHC string, a token as
//! its SHA-256 (see [`super::tokens`]); neither is ever kept in the clear.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row};

use super::{Result, Store, StoreError};
use crate::model::teams::{ApiToken, Role, Scope, TokenApprovals, User, BUILT_IN_ADMIN};

const USER_COLUMNS: &str = "id, name, role, password_hash IS NOT NULL, created_at, updated_at";
const TOKEN_COLUMNS: &str =
    "id, user_id, name, token_hash, scopes, agents, created_at, expires_at, supervised, approvals";

/// A change to a user; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct UserChange {
    pub name: Option<String>,
    pub role: Option<Role>,
    /// A new password's PHC string.
    pub password_hash: Option<String>,
}

pub(super) fn time_to_sql(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(super) fn time_from_sql(column: &str, t: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(t)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| StoreError::Corrupt(format!("{column} {t:?} is not a time")))
}

fn user_from_row(r: &Row) -> rusqlite::Result<(String, String, String, bool, String, String)> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn into_user(raw: (String, String, String, bool, String, String)) -> Result<User> {
    let (id, name, role, has_password, created_at, updated_at) = raw;
    let role = Role::parse(&role)
        .ok_or_else(|| StoreError::Corrupt(format!("user {id} has role {role:?}")))?;
    Ok(User {
        id,
        name,
        role,
        has_password,
        created_at: time_from_sql("created_at", &created_at)?,
        updated_at: time_from_sql("updated_at", &updated_at)?,
    })
}

type RawToken = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    bool,
    String,
);

fn token_from_row(r: &Row) -> rusqlite::Result<RawToken> {
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
        r.get(9)?,
    ))
}

fn into_token(raw: RawToken) -> Result<ApiToken> {
    let (
        id,
        user_id,
        name,
        token_hash,
        scopes,
        agents,
        created_at,
        expires_at,
        supervised,
        approvals,
    ) = raw;
    let corrupt = |what: &str| StoreError::Corrupt(format!("token {id}'s {what} is not readable"));
    let scopes: Vec<String> = serde_json::from_str(&scopes).map_err(|_| corrupt("scopes"))?;
    let scopes = scopes
        .iter()
        .map(|s| Scope::parse(s).ok_or_else(|| corrupt("scopes")))
        .collect::<Result<BTreeSet<Scope>>>()?;
    let agents = agents
        .map(|a| serde_json::from_str::<BTreeSet<String>>(&a).map_err(|_| corrupt("agents")))
        .transpose()?;
    let approvals = TokenApprovals::parse(&approvals).ok_or_else(|| corrupt("approvals"))?;
    Ok(ApiToken {
        created_at: time_from_sql("created_at", &created_at)?,
        expires_at: expires_at
            .map(|t| time_from_sql("expires_at", &t))
            .transpose()?,
        id,
        user_id,
        name,
        token_hash,
        scopes,
        agents,
        supervised,
        approvals,
    })
}

fn read_user(c: &Connection, id: &str) -> Result<Option<User>> {
    c.query_row(
        &format!("SELECT {USER_COLUMNS} FROM users WHERE id = ?1"),
        [id],
        user_from_row,
    )
    .optional()?
    .map(into_user)
    .transpose()
}

fn admins(c: &Connection) -> Result<i64> {
    Ok(
        c.query_row("SELECT COUNT(*) FROM users WHERE role = 'admin'", [], |r| {
            r.get(0)
        })?,
    )
}

fn name_taken(e: rusqlite::Error, name: &str) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            StoreError::UserNameTaken(name.to_string())
        }
        other => other.into(),
    }
}

impl Store {
    /// Every user, oldest first.
    pub async fn list_users(&self) -> Result<Vec<User>> {
        self.call(|c| {
            let raws = c
                .prepare(&format!(
                    "SELECT {USER_COLUMNS} FROM users ORDER BY created_at, id"
                ))?
                .query_map([], user_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raws.into_iter().map(into_user).collect()
        })
        .await
    }

    /// The user named `name` and their password's PHC string, for signing in.
    pub async fn user_for_sign_in(&self, name: &str) -> Result<Option<(User, Option<String>)>> {
        let name = name.to_string();
        self.call(move |c| {
            let found = c
                .query_row(
                    &format!("SELECT {USER_COLUMNS}, password_hash FROM users WHERE name = ?1"),
                    [&name],
                    |r| Ok((user_from_row(r)?, r.get::<_, Option<String>>(6)?)),
                )
                .optional()?;
            found
                .map(|(raw, hash)| Ok((into_user(raw)?, hash)))
                .transpose()
        })
        .await
    }

    pub async fn add_user(&self, user: User, password_hash: Option<String>) -> Result<()> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO users (id, name, role, password_hash, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    user.id,
                    user.name,
                    user.role.as_str(),
                    password_hash,
                    time_to_sql(user.created_at),
                    time_to_sql(user.updated_at),
                ],
            )
            .map_err(|e| name_taken(e, &user.name))?;
            Ok(())
        })
        .await
    }

    /// Changes a user, refusing (in the same transaction) to demote the last admin.
    pub async fn update_user(
        &self,
        id: &str,
        change: UserChange,
        now: DateTime<Utc>,
    ) -> Result<User> {
        let id = id.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            let user = read_user(&tx, &id)?.ok_or_else(|| StoreError::UserNotFound(id.clone()))?;
            if user.role == Role::Admin && change.role == Some(Role::Member) && admins(&tx)? <= 1 {
                return Err(StoreError::LastAdmin);
            }
            if let Some(name) = &change.name {
                tx.execute("UPDATE users SET name = ?2 WHERE id = ?1", [&id, name])
                    .map_err(|e| name_taken(e, name))?;
            }
            if let Some(role) = change.role {
                tx.execute(
                    "UPDATE users SET role = ?2 WHERE id = ?1",
                    [&id, role.as_str()],
                )?;
            }
            if let Some(hash) = &change.password_hash {
                tx.execute(
                    "UPDATE users SET password_hash = ?2 WHERE id = ?1",
                    [&id, hash],
                )?;
            }
            tx.execute(
                "UPDATE users SET updated_at = ?2 WHERE id = ?1",
                [&id, &time_to_sql(now)],
            )?;
            let user = read_user(&tx, &id)?.ok_or_else(|| StoreError::UserNotFound(id.clone()))?;
            tx.commit()?;
            Ok(user)
        })
        .await
    }

    /// Deletes a user with their tokens and web sessions, refusing to delete the last admin.
    pub async fn delete_user(&self, id: &str) -> Result<()> {
        let (id, deleted) = (id.to_string(), id.to_string());
        self.call(move |c| {
            let tx = c.transaction()?;
            let user = read_user(&tx, &id)?.ok_or_else(|| StoreError::UserNotFound(id.clone()))?;
            if user.role == Role::Admin && admins(&tx)? <= 1 {
                return Err(StoreError::LastAdmin);
            }
            // Their agents go to the built-in admin, who cannot be deleted; their memberships
            // go with them (the foreign key).
            tx.execute(
                "UPDATE agents SET owner_id = ?2 WHERE owner_id = ?1",
                [&id, BUILT_IN_ADMIN],
            )?;
            tx.execute("DELETE FROM users WHERE id = ?1", [&id])?;
            tx.commit()?;
            Ok(())
        })
        .await?;
        self.note_user_gone(&deleted);
        Ok(())
    }

    /// Every API token, oldest first.
    pub async fn list_api_tokens(&self) -> Result<Vec<ApiToken>> {
        self.call(|c| {
            let raws = c
                .prepare(&format!(
                    "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"
                ))?
                .query_map([], token_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raws.into_iter().map(into_token).collect()
        })
        .await
    }

    pub async fn add_api_token(&self, token: ApiToken) -> Result<()> {
        self.call(move |c| {
            let scopes: Vec<&str> = token.scopes.iter().map(|s| s.as_str()).collect();
            let scopes = serde_json::to_string(&scopes)
                .map_err(|e| StoreError::Invalid(format!("scopes: {e}")))?;
            let agents = token
                .agents
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Invalid(format!("agents: {e}")))?;
            c.execute(
                &format!(
                    "INSERT INTO api_tokens ({TOKEN_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                ),
                rusqlite::params![
                    token.id,
                    token.user_id,
                    token.name,
                    token.token_hash,
                    scopes,
                    agents,
                    time_to_sql(token.created_at),
                    token.expires_at.map(time_to_sql),
                    token.supervised,
                    token.approvals.as_str(),
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Deletes a token; true if there was one.
    pub async fn remove_api_token(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        self.call(move |c| Ok(c.execute("DELETE FROM api_tokens WHERE id = ?1", [&id])? > 0))
            .await
    }
}
