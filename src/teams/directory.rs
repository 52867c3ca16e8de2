//! The users and tokens, kept in the store and mirrored in memory so that resolving a
//! credential, which every request does, reads no database.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use chrono::{DateTime, Duration, Utc};

use super::principal::{Principal, TokenGrant};
use super::{password, TeamsError};
use crate::model::teams::{ApiToken, Role, Scope, TokenApprovals, User, BUILT_IN_ADMIN};
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
    /// Its commands wait for approval as a stranger's would (`approvals.commands`).
    pub supervised: bool,
    /// What its held commands get; `ask` when `None`.
    pub approvals: Option<TokenApprovals>,
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
    /// Cancelled when a credential ends, by `token:ID` or `user:ID`: what streams with it (an event
    /// stream, a streaming exec, a terminal) stops then. A revoked one stays, cancelled, so
    /// that a request resolved just before the revocation still finds it cancelled.
    ends: Mutex<HashMap<String, CancellationToken>>,
    /// Woken when a token is made, so [`Directory::end_tokens_at_expiry`] sees its expiry.
    tokens_changed: Notify,
}

/// How long the expiry watch sleeps at most, so a wall clock that jumps is caught up with.
const EXPIRY_WATCH_MAX_SLEEP: std::time::Duration = std::time::Duration::from_secs(60);

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
            tokens_changed: Notify::new(),
        })
    }

    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    fn ends(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.ends.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What ends the credential named by `key` from now on. Taken before the credential's user
    /// is read: a change after this cancels it, one before it is already in what is read.
    fn ends_of(&self, key: String) -> CancellationToken {
        self.ends().entry(key).or_default().clone()
    }

    fn end(&self, key: String) {
        self.ends().entry(key).or_default().cancel();
    }

    /// Stops what streams with a credential that lives on with less power (a demoted user, a
    /// changed password): its open streams end, and its next requests get a fresh token.
    fn restart(&self, key: &str) {
        if let Some(t) = self.ends().remove(key) {
            t.cancel();
        }
    }

    /// Runs for the server's life: when a token expires, what streams with it stops then, as
    /// at revocation (a new request with it is refused when its credential is resolved).
    pub async fn end_tokens_at_expiry(&self) {
        let mut ended: HashSet<String> = HashSet::new();
        loop {
            let now = Utc::now();
            let (due, next) = {
                let cache = self.read();
                ended.retain(|id| cache.tokens.values().any(|t| &t.id == id));
                let mut due = Vec::new();
                let mut next: Option<DateTime<Utc>> = None;
                for t in cache.tokens.values() {
                    match t.expires_at {
                        Some(at) if at <= now && !ended.contains(&t.id) => {
                            due.push((t.id.clone(), t.name.clone()));
                        }
                        Some(at) if at <= now => {}
                        Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                        None => {}
                    }
                }
                (due, next)
            };
            for (id, name) in due {
                self.end(format!("token:{id}"));
                tracing::info!(token = %name, id = %id, "token expired: its streams end");
                ended.insert(id);
            }
            let wait = next
                .and_then(|at| (at - now).to_std().ok())
                .map_or(EXPIRY_WATCH_MAX_SLEEP, |d| d.min(EXPIRY_WATCH_MAX_SLEEP));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.tokens_changed.notified() => {}
            }
        }
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
        let ends = self.ends_of(format!("user:{id}"));
        let user = self.user(id)?;
        Some(Principal {
            user_id: user.id,
            user_name: user.name,
            role: user.role,
            token: None,
            ends,
        })
    }

    /// The principal of an API token, if it is one that exists and has not expired.
    pub fn principal_of_token(&self, token: &str, now: DateTime<Utc>) -> Option<Principal> {
        if !token.starts_with(TOKEN_PREFIX) {
            return None;
        }
        let hash = hash_token(token);
        let id = self.read().tokens.get(&hash)?.id.clone();
        let ends = self.ends_of(format!("token:{id}"));
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
                supervised: t.supervised,
                approvals: t.approvals,
            }),
            ends,
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
        let password_changed = password_hash.is_some();
        let store_change = UserChange {
            name: change.name,
            role: change.role,
            password_hash,
        };
        let before = self.read().users.get(id).map(|u| u.role);
        let user = self.store.update_user(id, store_change, Utc::now()).await?;
        let tokens: Vec<String> = {
            let mut cache = self.write();
            cache.users.insert(user.id.clone(), user.clone());
            cache
                .tokens
                .values()
                .filter(|t| t.user_id == id)
                .map(|t| format!("token:{}", t.id))
                .collect()
        };
        if password_changed || before.is_some_and(|r| r != user.role) {
            // What was opened under the old password or role does not outlive it.
            self.restart(&format!("user:{id}"));
            for key in tokens {
                self.restart(&key);
            }
        }
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
        let (supervised, approvals) = check_supervision(by, new.supervised, new.approvals)?;
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
            supervised,
            approvals,
        };
        self.store.add_api_token(token.clone()).await?;
        self.write()
            .tokens
            .insert(token.token_hash.clone(), token.clone());
        self.tokens_changed.notify_one();
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

/// A new token's `supervised` and `approvals`: never laxer than the token that makes it (a
/// supervised token makes only supervised ones; an `ask` token no `allow` one). Supervised with
/// `allow` is a batch job's: its held commands run at once where its user could approve them,
/// each audited as approved in advance.
fn check_supervision(
    by: &Principal,
    supervised: bool,
    approvals: Option<TokenApprovals>,
) -> Result<(bool, TokenApprovals), TeamsError> {
    let approvals = approvals.unwrap_or_default();
    if let Some(t) = &by.token {
        if t.supervised && !supervised {
            return Err(TeamsError::Beyond(
                "this token is supervised, so a token it makes must be supervised too".into(),
            ));
        }
        if approvals > t.approvals {
            return Err(TeamsError::Beyond(format!(
                "this token's approvals is {}, so a token it makes cannot have {}",
                t.approvals.as_str(),
                approvals.as_str()
            )));
        }
    }
    Ok((supervised, approvals))
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn directory_with_token(expires_at: DateTime<Utc>) -> (tempfile::TempDir, Directory) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("agenthold.db")).await.unwrap();
        store
            .add_api_token(ApiToken {
                id: "t1".into(),
                user_id: BUILT_IN_ADMIN.into(),
                name: "soon".into(),
                token_hash: hash_token("aht_soon"),
                scopes: [Scope::AgentsRead].into(),
                agents: None,
                created_at: Utc::now(),
                expires_at: Some(expires_at),
                supervised: false,
                approvals: crate::model::teams::TokenApprovals::Ask,
            })
            .await
            .unwrap();
        (dir, Directory::load(store).await.unwrap())
    }

    #[tokio::test]
    async fn a_token_s_streams_end_when_it_expires() {
        let (_dir, d) = directory_with_token(Utc::now() + Duration::milliseconds(300)).await;
        let p = d.principal_of_token("aht_soon", Utc::now()).unwrap();
        let ends = p.ends.clone();
        let admin = d.principal_of_user(BUILT_IN_ADMIN).unwrap();
        let admin_ends = admin.ends.clone();
        tokio::select! {
            () = d.end_tokens_at_expiry() => unreachable!("the watch runs for ever"),
            r = tokio::time::timeout(std::time::Duration::from_secs(10), ends.cancelled()) => {
                r.expect("the token's streams end at its expiry");
            }
        }
        assert!(!admin_ends.is_cancelled(), "other credentials go on");
        assert!(d.principal_of_token("aht_soon", Utc::now()).is_none());
    }

    #[tokio::test]
    async fn a_new_role_or_password_ends_what_streams_and_not_what_comes_next() {
        let (_dir, d) = directory_with_token(Utc::now() + Duration::days(1)).await;
        let ann = d
            .create_user(NewUser {
                name: "ann".into(),
                role: Role::Admin,
                password: None,
            })
            .await
            .unwrap();
        let p = d.principal_of_user(&ann.id).unwrap();
        let before = p.ends.clone();
        let renamed = UserUpdate {
            name: Some("anna".into()),
            ..UserUpdate::default()
        };
        d.update_user(&ann.id, renamed).await.unwrap();
        assert!(!before.is_cancelled(), "a new name changes no power");
        let demoted = UserUpdate {
            role: Some(Role::Member),
            ..UserUpdate::default()
        };
        d.update_user(&ann.id, demoted).await.unwrap();
        assert!(before.is_cancelled(), "a demotion ends the open streams");
        let p = d.principal_of_user(&ann.id).unwrap();
        assert!(
            !p.ends.clone().is_cancelled(),
            "the next request streams as usual"
        );
    }
}
