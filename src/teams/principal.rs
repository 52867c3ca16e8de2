//! Who a request is, as the auth layer resolved it: the one value every authorization decision
//! reads.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::model::teams::{Role, Scope, TokenApprovals};

/// The caller of a request, put into the request's extensions by the auth layer.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user_id: String,
    pub user_name: String,
    pub role: Role,
    /// The API token the request came with; `None` for the admin token and web sessions,
    /// which carry the user's whole role.
    pub token: Option<TokenGrant>,
    /// Cancelled when the credential this principal was resolved from ends or changes (taken
    /// before the user was read, so a change racing the request still ends what it streams).
    pub ends: CancellationToken,
}

/// What an API token allows, on top of (never beyond) its user's role.
#[derive(Debug, Clone)]
pub struct TokenGrant {
    pub id: String,
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    /// The agents (ids) the token may see; `None` for every agent.
    pub agents: Option<BTreeSet<String>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Its commands wait for approval even where its user's would not.
    pub supervised: bool,
    /// What its commands that would wait for approval get.
    pub approvals: TokenApprovals,
}

impl Principal {
    /// Whether the caller may do what `scope` covers: the role must grant it, and so must the
    /// token when there is one.
    pub fn can(&self, scope: Scope) -> bool {
        self.role.grants(scope)
            && self
                .token
                .as_ref()
                .is_none_or(|t| t.scopes.contains(&scope))
    }

    /// The scopes the caller has in effect.
    pub fn scopes(&self) -> BTreeSet<Scope> {
        Scope::ALL.into_iter().filter(|s| self.can(*s)).collect()
    }

    /// Who acted, as records name it: the user, and the token's name when one was used
    /// (`ann (token ci)`).
    pub fn actor(&self) -> String {
        match &self.token {
            Some(t) => format!("{} (token {})", self.user_name, t.name),
            None => self.user_name.clone(),
        }
    }

    /// Whether the token (if any) lets the caller see agent `id` (its `agents` list); the
    /// agent's own access rule is [`super::access::sees`]'s.
    pub fn sees_agent(&self, id: &str) -> bool {
        self.token
            .as_ref()
            .and_then(|t| t.agents.as_ref())
            .is_none_or(|agents| agents.contains(id))
    }

    pub fn is_admin(&self) -> bool {
        self.can(Scope::Admin)
    }

    /// The caller as the approvals rule sees them, given whether they own the agent at hand.
    pub fn requester(&self, owner: bool) -> super::command_rules::Requester {
        super::command_rules::Requester {
            // The admin scope, not the role: an admin's narrower token has only its standing.
            owner_or_admin: owner || self.is_admin(),
            supervised: self.token.as_ref().is_some_and(|t| t.supervised),
            mode: self
                .token
                .as_ref()
                .map_or(TokenApprovals::Ask, |t| t.approvals),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member_with(token: Option<TokenGrant>) -> Principal {
        Principal {
            user_id: "u1".into(),
            user_name: "ann".into(),
            role: Role::Member,
            token,
            ends: CancellationToken::new(),
        }
    }

    #[test]
    fn a_token_narrows_its_user_and_never_widens() {
        let grant = TokenGrant {
            id: "t1".into(),
            name: "ci".into(),
            scopes: [Scope::AgentsRead, Scope::Admin].into(),
            agents: Some(["a1".to_string()].into()),
            expires_at: None,
            supervised: false,
            approvals: TokenApprovals::Ask,
        };
        let p = member_with(Some(grant));
        assert!(p.can(Scope::AgentsRead));
        assert!(!p.can(Scope::AgentsUse));
        assert!(!p.can(Scope::Admin), "a member's token cannot be admin");
        assert!(p.sees_agent("a1"));
        assert!(!p.sees_agent("a2"));
        let whole = member_with(None);
        assert!(whole.can(Scope::AgentsUse) && whole.sees_agent("a2"));
    }
}
