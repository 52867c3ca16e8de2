//! Who belongs to an agent: its members, its access token and joining with it. Who may call
//! these is the access layer's business ([`super::access`]); the rules of the changes
//! themselves live here.

use crate::model::teams::{AgentAccess, AgentFacts, Member, MemberRole, User};
use crate::store::{hash_token, new_token, verify_token, StoreError};

use super::{Directory, Principal, TeamsError};

/// What every agent access token starts with, so that people and secret scanners can tell one.
pub const ACCESS_TOKEN_PREFIX: &str = "ahj_";
/// Longest user reference (an id or a name) a member request may give.
const MAX_USER_REF: usize = 128;

impl Directory {
    /// The owner, policy and members of agent `id`, from memory.
    pub fn agent_facts(&self, id: &str) -> Option<AgentFacts> {
        self.store().agent_facts(id)
    }

    /// A user by id, else by name.
    fn find_user(&self, reference: &str) -> Result<User, TeamsError> {
        if reference.is_empty() || reference.chars().count() > MAX_USER_REF {
            return Err(TeamsError::invalid(
                "user",
                format!("user must be a user's id or name, 1 to {MAX_USER_REF} characters"),
            ));
        }
        self.user(reference)
            .or_else(|| self.users().into_iter().find(|u| u.name == reference))
            .ok_or_else(|| TeamsError::UserNotFound(reference.to_string()))
    }

    pub async fn members(&self, agent: &str) -> Result<Vec<Member>, TeamsError> {
        Ok(self.store().members(agent).await?)
    }

    /// Makes `user` (an id or a name) a member of `agent` with `role`, or gives a member
    /// `role`. The owner needs no membership: `400`.
    pub async fn add_member(
        &self,
        agent: &str,
        user: &str,
        role: MemberRole,
    ) -> Result<Member, TeamsError> {
        let user = self.find_user(user)?;
        if self
            .agent_facts(agent)
            .is_some_and(|f| f.owner_id == user.id)
        {
            return Err(TeamsError::invalid(
                "user",
                format!("{} owns agent {agent}: an owner is no member", user.name),
            ));
        }
        Ok(self.store().set_member(agent, &user.id, role).await?)
    }

    pub async fn remove_member(&self, agent: &str, user: &str) -> Result<(), TeamsError> {
        let user = self.find_user(user)?;
        self.store()
            .remove_member(agent, &user.id)
            .await
            .map_err(|e| match e {
                StoreError::MemberNotFound { agent, .. } => TeamsError::NotMember {
                    agent,
                    user: user.name.clone(),
                },
                other => other.into(),
            })
    }

    /// A new access token for the protected `agent`; the one before stops working. Only its
    /// hash is kept: this is the only time it is shown.
    pub async fn rotate_access_token(&self, agent: &str) -> Result<String, TeamsError> {
        self.must_be_protected(agent)?;
        let token = format!("{ACCESS_TOKEN_PREFIX}{}", new_token());
        self.store()
            .set_access_token_hash(agent, Some(&hash_token(&token)))
            .await?;
        Ok(token)
    }

    /// Makes `p`'s user a `user` member of the protected `agent` if `token` is its access
    /// token (compared in constant time). The owner and members stay as they are.
    pub async fn join(&self, agent: &str, p: &Principal, token: &str) -> Result<(), TeamsError> {
        let facts = self.must_be_protected(agent)?;
        let stored = self.store().access_token_hash(agent).await?;
        if !stored.is_some_and(|hash| verify_token(token, &hash)) {
            return Err(TeamsError::WrongAccessToken(agent.to_string()));
        }
        if facts.owner_id == p.user_id || facts.members.contains_key(&p.user_id) {
            return Ok(());
        }
        self.store()
            .set_member(agent, &p.user_id, MemberRole::User)
            .await?;
        tracing::info!(agent, user = p.user_name, "joined with the access token");
        Ok(())
    }

    fn must_be_protected(&self, agent: &str) -> Result<AgentFacts, TeamsError> {
        let facts = self
            .agent_facts(agent)
            .ok_or_else(|| TeamsError::AgentNotFound(agent.to_string()))?;
        if facts.access != AgentAccess::Protected {
            return Err(TeamsError::NotProtected {
                agent: agent.to_string(),
                access: facts.access.as_str(),
            });
        }
        Ok(facts)
    }
}
