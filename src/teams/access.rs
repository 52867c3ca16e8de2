//! Who may do what on an agent: from the caller, the agent's owner, access policy and members,
//! and what the request does there. One pure function, [`decide`], that the API's access layer,
//! the lists and the event stream all ask; no handler decides by itself.

use crate::model::teams::{AgentAccess, AgentFacts, MemberRole};
use crate::model::AgentPatch;

use super::Principal;

/// The caller's standing on one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// An admin (a credential with the `admin` scope): everything on every agent.
    Admin,
    Owner,
    Member(MemberRole),
    /// Signed in, but none of the above.
    Outsider,
}

/// What a request does on an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// See it: its record, egress log, members.
    Read,
    /// Work inside it: terminals, exec, processes, files, code, sessions, previews,
    /// keep-alive.
    Use,
    /// Start, stop, rebuild, rerun setup, change settings.
    Operate,
    /// Destroy it, change its access policy, its members or its access token.
    Govern,
    /// Present its access token to become a member.
    Join,
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// The agent does not exist for the caller: `404`, as for one that does not exist at all.
    NotFound,
    /// The caller sees the agent but may not do this: `403`.
    Forbidden,
}

/// The caller's standing on an agent with `facts`. The admin token, an admin's web session
/// and an admin's token with the `admin` scope are admins; an admin's token without it has the
/// standing its user's ownership and memberships give.
/// A supervised token (an agent's own, whose commands wait for a person) is at most an operator:
/// it may not change who may use the agent, nor which commands wait, nor destroy it.
pub fn standing(p: &Principal, facts: &AgentFacts) -> Standing {
    let supervised = p.token.as_ref().is_some_and(|t| t.supervised);
    if (p.is_admin() || p.user_id == facts.owner_id) && supervised {
        Standing::Member(MemberRole::Operator)
    } else if p.is_admin() {
        Standing::Admin
    } else if p.user_id == facts.owner_id {
        Standing::Owner
    } else {
        facts
            .members
            .get(&p.user_id)
            .map_or(Standing::Outsider, |r| Standing::Member(*r))
    }
}

/// Whether one of `standing` may do `act` on an agent whose policy is `access`.
pub fn decide(standing: Standing, access: AgentAccess, act: Act) -> Decision {
    use Decision::{Allow, Forbidden, NotFound};
    match (standing, act) {
        (Standing::Admin | Standing::Owner, _) => Allow,
        (Standing::Member(_), Act::Read | Act::Use | Act::Join) => Allow,
        (Standing::Member(MemberRole::Operator), Act::Operate) => Allow,
        (Standing::Member(_), _) => Forbidden,
        (Standing::Outsider, _) => match (access, act) {
            (AgentAccess::Public, Act::Read | Act::Use) => Allow,
            (AgentAccess::Public, _) => Forbidden,
            (AgentAccess::Protected, Act::Join) => Allow,
            (AgentAccess::Protected | AgentAccess::Private, _) => NotFound,
        },
    }
}

/// Whether the agent exists for `p` at all: it is in the caller's lists and event stream.
/// `None` facts (an agent the server does not know) exist for admins only.
pub fn sees(p: &Principal, id: &str, facts: Option<&AgentFacts>) -> bool {
    if !p.sees_agent(id) {
        return false;
    }
    match facts {
        Some(f) => decide(standing(p, f), f.access, Act::Read) == Decision::Allow,
        None => p.is_admin(),
    }
}

impl AgentPatch {
    /// What kind of change this is: one of `access` or of which commands wait for approval is
    /// the owner's (or an admin's); any other, an operator's.
    pub fn act(&self) -> Act {
        if self.access.is_some() || self.approvals.is_some() {
            Act::Govern
        } else {
            Act::Operate
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::teams::{Role, Scope};
    use crate::teams::TokenGrant;
    use AgentAccess::*;
    use Decision::*;

    const ACTS: [Act; 5] = [Act::Read, Act::Use, Act::Operate, Act::Govern, Act::Join];

    /// The whole table, written out: standing × policy × act.
    #[test]
    fn the_table() {
        let user = Standing::Member(MemberRole::User);
        let op = Standing::Member(MemberRole::Operator);
        for access in [Private, Protected, Public] {
            for act in ACTS {
                assert_eq!(decide(Standing::Admin, access, act), Allow);
                assert_eq!(decide(Standing::Owner, access, act), Allow);
                let member_user = match act {
                    Act::Read | Act::Use | Act::Join => Allow,
                    Act::Operate | Act::Govern => Forbidden,
                };
                assert_eq!(decide(user, access, act), member_user, "{access:?} {act:?}");
                let operator = match act {
                    Act::Govern => Forbidden,
                    _ => Allow,
                };
                assert_eq!(decide(op, access, act), operator, "{access:?} {act:?}");
                let outsider = match (access, act) {
                    (Public, Act::Read | Act::Use) => Allow,
                    (Public, _) => Forbidden,
                    (Protected, Act::Join) => Allow,
                    _ => NotFound,
                };
                assert_eq!(
                    decide(Standing::Outsider, access, act),
                    outsider,
                    "{access:?} {act:?}"
                );
            }
        }
    }

    fn principal(user: &str, role: Role, scopes: Option<&[Scope]>) -> Principal {
        Principal {
            user_id: user.into(),
            user_name: user.into(),
            role,
            token: scopes.map(|s| TokenGrant {
                id: "t".into(),
                name: "t".into(),
                scopes: s.iter().copied().collect(),
                agents: None,
                expires_at: None,
                supervised: false,
                approvals: crate::model::teams::TokenApprovals::Ask,
            }),
            ends: Default::default(),
        }
    }

    fn facts(access: AgentAccess) -> AgentFacts {
        AgentFacts {
            owner_id: "olga".into(),
            access,
            members: [
                ("uma".to_string(), MemberRole::User),
                ("otto".to_string(), MemberRole::Operator),
            ]
            .into(),
        }
    }

    #[test]
    fn standing_follows_role_ownership_and_membership() {
        let f = facts(Private);
        assert_eq!(
            standing(&principal("root", Role::Admin, None), &f),
            Standing::Admin
        );
        // An admin's token without the admin scope is only what the admin owns and joined.
        let narrow = principal("root", Role::Admin, Some(&[Scope::AgentsRead]));
        assert_eq!(standing(&narrow, &f), Standing::Outsider);
        assert_eq!(
            standing(&principal("olga", Role::Member, None), &f),
            Standing::Owner
        );
        assert_eq!(
            standing(&principal("otto", Role::Member, None), &f),
            Standing::Member(MemberRole::Operator)
        );
        assert_eq!(
            standing(&principal("nina", Role::Member, None), &f),
            Standing::Outsider
        );
    }

    #[test]
    fn sees_hides_private_and_protected_agents_from_outsiders() {
        let nina = principal("nina", Role::Member, None);
        assert!(!sees(&nina, "a", Some(&facts(Private))));
        assert!(!sees(&nina, "a", Some(&facts(Protected))));
        assert!(sees(&nina, "a", Some(&facts(Public))));
        assert!(sees(
            &principal("uma", Role::Member, None),
            "a",
            Some(&facts(Private))
        ));
        assert!(!sees(&nina, "a", None));
        assert!(sees(&principal("root", Role::Admin, None), "a", None));
    }

    #[test]
    fn a_patch_of_access_is_the_owners() {
        let mut p = AgentPatch {
            name: Some("x".into()),
            ..AgentPatch::default()
        };
        assert_eq!(p.act(), Act::Operate);
        p.access = Some(Public);
        assert_eq!(p.act(), Act::Govern);
    }
}
