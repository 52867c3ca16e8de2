//! The users and tokens, kept in the store and mirrored in memory so that resolving a
//! credential, which every request does, reads no database.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio_util::sync::CancellationToken;

use chrono::{DateTime, Duration, Utc};

use super::principal::{Principal, TokenGrant};
use super::{password, TeamsError};
use crate::model::teams::{ApiToken, Role, Scope, User, BUILT_IN_ADMIN};
use crate::store::users::UserChange;
use crate::store::{hash_token, new_token, verify_token, Store, StoreError};

/// Longest token name, in characters.
pub const MAX_TOKEN_NAME: usize = 64;
/// Most agents one token may be limited to.
pub const MAX_TOKEN_AGENTS: usize = 256;
/// Longest lifetime a token may be given, in days.
pub const MAX_TOKEN_DAYS: u32 = 3650;
/// What every API token starts with, so that secret scanners and people can tell one.
pub const TOKEN_PREFIX: &str = "aht_";

pub struct NewUser {
    pub name: String,
    pub role: Role,
    pub password: Option<String>,
}

#[derive(Default)]
pub struct UserUpdate {
    pub name: Option<String>,
    pub role: Option<Role>,
    pub password: Option<String>,
}

pub struct NewToken {
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    /// Agents by id or name; `None` for every agent the creator may see.
    pub agents: Option<Vec<String>>,
    pub expires_in_days: Option<u32>,
}

#[derive(Default)]
struct Cache {
    users: HashMap<String, User>,
    /// By the token's hash.
    tokens: HashMap<String, ApiToken>,
}

pub struct Directory {
    store: Store,
    cache: RwLock<Cache>,
    /// Cancelled when a credential ends, by [`credential_key`]: what streams with it (an event
    /// stream, a streaming exec, a terminal) stops then. A revoked one stays, cancelled, so
    /// that a request resolved just before the revocation still finds it cancelled.
    ends: Mutex<HashMap<String, CancellationToken>>,
}

/// The key of what ends a principal's credential: its token, or for the admin token and web
/// sessions its user.
fn credential_key(p: &Principal) -> String {
    match &p.token {
        Some(t) => format!("token:{}", t.id),
        None => format!("user:{}", p.user_id),
    }
}

fn check_user_name(name: &str) -> Result<(), TeamsError> {
    crate::agents::spec::check_name(name).map_err(|e| TeamsError::invalid("name", e.why))
}

fn check_token_name(name: &str) -> Result<(), TeamsError> {
    let n = name.chars().count();
    if n == 0 || n > MAX_TOKEN_NAME {
        return Err(TeamsError::invalid(
            "name",
            format!("name must be 1 to {MAX_TOKEN_NAME} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(TeamsError::invalid(
            "name",
            "name must not hold control characters",
        ));
    }
    Ok(())
}

impl Directory {
    pub async fn load(store: Store) -> Result<Directory, StoreError> {
        let users = store.list_users().await?;
        let tokens = store.list_api_tokens().await?;
        Ok(Directory {
            cache: RwLock::new(Cache {
                users: users.into_iter().map(|u| (u.id.clone(), u)).collect(),
                tokens: tokens
                    .into_iter()
                    .map(|t| (t.token_hash.clone(), t))
                    .collect(),
            }),
            store,
            ends: Mutex::new(HashMap::new()),
        })
    }

    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    fn ends(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.ends.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cancelled when `p`'s credential ends: its token is revoked, or its user deleted.
    pub fn credential_ends(&self, p: &Principal) -> CancellationToken {
        self.ends().entry(credential_key(p)).or_default().clone()
    }

    fn end(&self, key: String) {
        self.ends().entry(key).or_default().cancel();
    }

    // A panic while holding the lock leaves maps that are each whole: safe to go on with.
    fn read(&self) -> RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Every user, oldest first.
    pub fn users(&self) -> Vec<User> {
        let mut users: Vec<User> = self.read().users.values().cloned().collect();
        users.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        users
    }

    pub fn user(&self, id: &str) -> Option<User> {
        self.read().users.get(id).cloned()
    }

    pub fn token(&self, id: &str) -> Option<ApiToken> {
        self.read().tokens.values().find(|t| t.id == id).cloned()
    }

    /// The principal of user `id` with the user's whole role (the admin token, a web session).
    pub fn principal_of_user(&self, id: &str) -> Option<Principal> {
        let user = self.user(id)?;
        Some(Principal {
            user_id: user.id,
            user_name: user.name,
            role: user.role,
            token: None,
        })
    }

    /// The principal of an API token, if it is one that exists and has not expired.
    pub fn principal_of_token(&self, token: &str, now: DateTime<Utc>) -> Option<Principal> {
        if !token.starts_with(TOKEN_PREFIX) {
            return None;
        }
        let hash = hash_token(token);
        let cache = self.read();
        // The map finds the entry by the hash, which tells an attacker nothing about the
        // token; the comparison that decides is constant-time all the same.
        let t = cache.tokens.get(&hash)?;
        if !verify_token(token, &t.token_hash) || t.expired(now) {
            return None;
        }
        let user = cache.users.get(&t.user_id)?;
        Some(Principal {
            user_id: user.id.clone(),
            user_name: user.name.clone(),
            role: user.role,
            token: Some(TokenGrant {
                id: t.id.clone(),
                name: t.name.clone(),
                scopes: t.scopes.clone(),
                agents: t.agents.clone(),
                expires_at: t.expires_at,
            }),
        })
    }

    pub async fn create_user(&self, new: NewUser) -> Result<User, TeamsError> {
        check_user_name(&new.name)?;
        let hash = match new.password {
            Some(p) => {
                password::check(&p).map_err(|e| TeamsError::invalid("password", e.to_string()))?;
                Some(password::hash(p).await?)
            }
            None => None,
        };
        let now = Utc::now();
        let user = User {
            id: crate::model::new_agent_id(),
            name: new.name,
            role: new.role,
            has_password: hash.is_some(),
            created_at: now,
            updated_at: now,
        };
        self.store.add_user(user.clone(), hash).await?;
        self.write().users.insert(user.id.clone(), user.clone());
        tracing::info!(user = %user.name, role = user.role.as_str(), "user created");
        Ok(user)
    }

    pub async fn update_user(&self, id: &str, change: UserUpdate) -> Result<User, TeamsError> {
        if id == BUILT_IN_ADMIN {
            if change.name.as_deref().is_some_and(|n| n != BUILT_IN_ADMIN) {
                return Err(TeamsError::BuiltIn("renamed"));
            }
            if change.role == Some(Role::Member) {
                return Err(TeamsError::BuiltIn("made a member"));
            }
        }
        if let Some(name) = &change.name {
            check_user_name(name)?;
        }
        let password_hash = match change.password {
            Some(p) => {
                password::check(&p).map_err(|e| TeamsError::invalid("password", e.to_string()))?;
                Some(password::hash(p).await?)
            }
            None => None,
        };
        let store_change = UserChange {
            name: change.name,
            role: change.role,
            password_hash,
        };
        let user = self.store.update_user(id, store_change, Utc::now()).await?;
        self.write().users.insert(user.id.clone(), user.clone());
        tracing::info!(user = %user.name, role = user.role.as_str(), "user changed");
        Ok(user)
    }

    /// Deletes a user; their tokens and web sessions go with them.
    pub async fn delete_user(&self, id: &str) -> Result<(), TeamsError> {
        if id == BUILT_IN_ADMIN {
            return Err(TeamsError::BuiltIn("deleted"));
        }
        self.store.delete_user(id).await?;
        let gone: Vec<String> = {
            let mut cache = self.write();
            cache.users.remove(id);
            let gone = cache
                .tokens
                .values()
                .filter(|t| t.user_id == id)
                .map(|t| format!("token:{}", t.id))
                .collect();
            cache.tokens.retain(|_, t| t.user_id != id);
            gone
        };
        for key in gone {
            self.end(key);
        }
        self.end(format!("user:{id}"));
        tracing::info!(user = id, "user deleted");
        Ok(())
    }

    /// The user whose name and password these are. An unknown name costs the same time as a
    /// wrong password, so the answer's timing does not tell which names exist.
    pub async fn sign_in(&self, name: &str, password: String) -> Result<Option<User>, TeamsError> {
        let found = if password::check(&password).is_ok() {
            self.store.user_for_sign_in(name).await?
        } else {
            None
        };
        let (user, hash) = match found {
            Some((user, hash)) => (Some(user), hash),
            None => (None, None),
        };
        let ok = password::verify(password, hash).await?;
        Ok(user.filter(|_| ok))
    }

    /// Makes a token for the caller, shown once (the first value); it can do at most what the
    /// caller can, on at most the agents the caller sees, for at most as long.
    /// `known_agents` are every agent as (id, name).
    pub async fn create_token(
        &self,
        by: &Principal,
        new: NewToken,
        known_agents: &[(String, String)],
    ) -> Result<(String, ApiToken), TeamsError> {
        check_token_name(&new.name)?;
        if new.scopes.is_empty() {
            return Err(TeamsError::invalid(
                "scopes",
                "scopes must name at least one scope",
            ));
        }
        if let Some(missing) = new.scopes.iter().find(|s| !by.can(**s)) {
            return Err(TeamsError::Beyond(format!(
                "this credential does not have the scope {missing}, so a token it makes cannot have it"
            )));
        }
        let limited = new.agents.is_some() || by.token.as_ref().is_some_and(|t| t.agents.is_some());
        if limited && new.scopes.contains(&Scope::Admin) {
            // Admin reaches users and tokens, which belong to no agent: through them a token
            // limited to some agents would make itself a credential limited to none.
            return Err(TeamsError::Beyond(
                "a token limited to some agents cannot have the admin scope".into(),
            ));
        }
        let agents = match new.agents {
            Some(list) => Some(resolve_agents(by, &list, known_agents)?),
            None => by.token.as_ref().and_then(|t| t.agents.clone()),
        };
        let now = Utc::now();
        let asked = match new.expires_in_days {
            Some(d) if (1..=MAX_TOKEN_DAYS).contains(&d) => {
                Some(now + Duration::days(i64::from(d)))
            }
            Some(_) => {
                return Err(TeamsError::invalid(
                    "expiresInDays",
                    format!("expiresInDays must be 1 to {MAX_TOKEN_DAYS}"),
                ))
            }
            None => None,
        };
        // A token made with a token ends when that one does, at the latest.
        let limit = by.token.as_ref().and_then(|t| t.expires_at);
        let expires_at = match (asked, limit) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        let secret = format!("{TOKEN_PREFIX}{}", new_token());
        let token = ApiToken {
            id: crate::model::new_agent_id(),
            user_id: by.user_id.clone(),
            name: new.name,
            token_hash: hash_token(&secret),
            scopes: new.scopes,
            agents,
            created_at: now,
            expires_at,
        };
        self.store.add_api_token(token.clone()).await?;
        self.write()
            .tokens
            .insert(token.token_hash.clone(), token.clone());
        tracing::info!(user = %by.user_name, token = %token.name, id = %token.id, "token created");
        Ok((secret, token))
    }

    /// The tokens the caller may see: their own, or every one for an admin.
    pub fn tokens_for(&self, by: &Principal) -> Vec<ApiToken> {
        let mut tokens: Vec<ApiToken> = self
            .read()
            .tokens
            .values()
            .filter(|t| by.is_admin() || t.user_id == by.user_id)
            .cloned()
            .collect();
        tokens.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        tokens
    }

    /// Revokes one of the caller's tokens (an admin's: anyone's). Another user's token is
    /// answered as if it did not exist.
    pub async fn revoke_token(&self, by: &Principal, id: &str) -> Result<ApiToken, TeamsError> {
        let token = self
            .tokens_for(by)
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| TeamsError::TokenNotFound(id.to_string()))?;
        self.store.remove_api_token(id).await?;
        self.write().tokens.remove(&token.token_hash);
        self.end(format!("token:{id}"));
        tracing::info!(user = %by.user_name, token = %token.name, id, "token revoked");
        Ok(token)
    }
}

/// The ids of the agents `list` names (by id or name), which must all be ones `by` sees.
fn resolve_agents(
    by: &Principal,
    list: &[String],
    known: &[(String, String)],
) -> Result<BTreeSet<String>, TeamsError> {
    if list.len() > MAX_TOKEN_AGENTS {
        return Err(TeamsError::invalid(
            "agents",
            format!("agents may name at most {MAX_TOKEN_AGENTS} agents"),
        ));
    }
    list.iter()
        .map(|wanted| {
            known
                .iter()
                .find(|(id, name)| id == wanted || name == wanted)
                .map(|(id, _)| id.clone())
                .filter(|id| by.sees_agent(id))
                .ok_or_else(|| TeamsError::AgentNotFound(wanted.clone()))
        })
        .collect()
}
