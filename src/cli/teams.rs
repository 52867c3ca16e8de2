//! `agenthold users …`, `agenthold tokens …`, and an agent's `access`, `members` and `join`:
//! the server's users and API tokens, and who may use an agent.

use std::io::Read;

use super::client::ApiClient;
use super::output::{json, plain_table, render};
use crate::api::types::{
    AddMember, AgentAccess, AgentMember, CreateToken, CreateUser, JoinAgent, MemberRole, Role,
    Scope, Token, UpdateAgent, User,
};
use crate::model::teams::TokenApprovals;

#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum UsersCommand {
    /// List the users (admins only)
    List,
    /// Make a user: agenthold users add NAME [--admin] [--password-stdin]
    Add {
        name: String,
        /// An admin rather than a member
        #[arg(long)]
        admin: bool,
        /// Read the user's password from the first line of stdin (8 to 1024 characters)
        #[arg(long)]
        password_stdin: bool,
    },
    /// Delete a user (by id or name) with their tokens and sessions
    Remove { user: String },
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum TokensCommand {
    /// Make a token for yourself; it is printed once
    Create {
        name: String,
        /// A scope it gets (repeat): agents:read, agents:write, agents:use, approvals:answer,
        /// admin
        #[arg(long = "scope", required = true, value_parser = parse_scope)]
        scopes: Vec<Scope>,
        /// An agent (id or name) it is limited to (repeat); none: every agent
        #[arg(long = "agent")]
        agents: Vec<String>,
        /// It stops working after this many days (1 to 3650)
        #[arg(long)]
        expires_in_days: Option<u32>,
        /// Its commands wait for approval wherever the agent's approvals setting holds them,
        /// even yours
        #[arg(long)]
        supervised: bool,
        /// What its commands that would wait for approval get: deny, ask (the default) or allow
        #[arg(long, value_name = "MODE", value_parser = parse_token_approvals)]
        approvals: Option<TokenApprovals>,
    },
    /// List your tokens (an admin's: everyone's)
    List,
    /// Revoke a token by id: it stops working at once
    Revoke { id: String },
}

fn parse_token_approvals(s: &str) -> Result<TokenApprovals, String> {
    TokenApprovals::parse(s).ok_or_else(|| format!("{s:?} is not one of deny, ask, allow"))
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    Scope::parse(s).ok_or_else(|| {
        let all: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        format!("{s:?} is not a scope (one of {})", all.join(", "))
    })
}

fn read_password() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin().take(4096).read_to_string(&mut text)?;
    Ok(text.lines().next().unwrap_or_default().to_string())
}

fn find_user(users: Vec<User>, id_or_name: &str) -> anyhow::Result<User> {
    users
        .into_iter()
        .find(|u| u.id == id_or_name || u.name == id_or_name)
        .ok_or_else(|| anyhow::anyhow!("no user with the id or name {id_or_name:?}"))
}

pub(super) async fn users(
    client: &ApiClient,
    json_out: bool,
    cmd: UsersCommand,
) -> anyhow::Result<i32> {
    match cmd {
        UsersCommand::List => {
            let users = client.list_users().await?;
            if json_out {
                println!("{}", json(&users)?);
            } else {
                print!("{}", users_table(&users));
            }
        }
        UsersCommand::Add {
            name,
            admin,
            password_stdin,
        } => {
            let password = if password_stdin {
                Some(read_password()?)
            } else {
                None
            };
            let role = if admin { Role::Admin } else { Role::Member };
            let user = client
                .create_user(&CreateUser {
                    name,
                    role,
                    password,
                })
                .await?;
            if json_out {
                println!("{}", json(&user)?);
            } else {
                println!("{}", user.id);
            }
        }
        UsersCommand::Remove { user } => {
            let user = find_user(client.list_users().await?, &user)?;
            client.delete_user(&user.id).await?;
        }
    }
    Ok(0)
}

pub(super) async fn tokens(
    client: &ApiClient,
    json_out: bool,
    cmd: TokensCommand,
) -> anyhow::Result<i32> {
    match cmd {
        TokensCommand::Create {
            name,
            scopes,
            agents,
            expires_in_days,
            supervised,
            approvals,
        } => {
            let made = client
                .create_token(&CreateToken {
                    name,
                    scopes,
                    agents: (!agents.is_empty()).then_some(agents),
                    expires_in_days,
                    supervised,
                    approvals,
                })
                .await?;
            if json_out {
                println!("{}", json(&made)?);
            } else {
                // The token alone on stdout, to be captured; it is never shown again.
                println!("{}", made.token);
                eprintln!(
                    "agenthold: token {} made; keep it now, it cannot be shown again",
                    made.info.id
                );
            }
        }
        TokensCommand::List => {
            let tokens = client.list_tokens().await?;
            if json_out {
                println!("{}", json(&tokens)?);
            } else {
                print!("{}", tokens_table(&tokens));
            }
        }
        TokensCommand::Revoke { id } => client.revoke_token(&id).await?,
    }
    Ok(0)
}

pub fn users_table(users: &[User]) -> String {
    let mut table = plain_table();
    table.set_header(vec!["ID", "NAME", "ROLE", "PASSWORD"]);
    for u in users {
        table.add_row(vec![
            u.id.clone(),
            u.name.clone(),
            u.role.as_str().to_string(),
            if u.has_password { "yes" } else { "no" }.to_string(),
        ]);
    }
    render(&table)
}

pub fn tokens_table(tokens: &[Token]) -> String {
    let mut table = plain_table();
    table.set_header(vec!["ID", "NAME", "USER", "SCOPES", "AGENTS", "EXPIRES"]);
    for t in tokens {
        let scopes: Vec<&str> = t.scopes.iter().map(|s| s.as_str()).collect();
        table.add_row(vec![
            t.id.clone(),
            t.name.clone(),
            t.user_id.clone(),
            scopes.join(","),
            t.agents
                .as_ref()
                .map_or_else(|| "all".to_string(), |a| a.join(",")),
            t.expires_at
                .map_or_else(|| "never".to_string(), |e| e.to_rfc3339()),
        ]);
    }
    render(&table)
}

/// `agenthold access AGENT [POLICY] [--new-token]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct AccessArgs {
    /// The agent's id or name
    pub agent: String,
    /// private, protected or public; absent: print the agent's policy
    #[arg(value_parser = parse_access)]
    pub access: Option<AgentAccess>,
    /// Make a new access token for the (protected) agent and print it; the old one stops working
    #[arg(long)]
    pub new_token: bool,
}

/// `agenthold members AGENT [add USER [--role operator] | remove USER]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct MembersArgs {
    /// The agent's id or name
    pub agent: String,
    #[command(subcommand)]
    pub action: Option<MembersAction>,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum MembersAction {
    /// Add a member (a user's id or name), or give a member another role
    Add {
        user: String,
        /// user (read and use) or operator (also start, stop, rebuild and settings)
        #[arg(long, default_value = "user", value_parser = parse_role)]
        role: MemberRole,
    },
    /// Remove a member
    Remove { user: String },
}

/// `agenthold join AGENT TOKEN`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct JoinArgs {
    /// The agent's id (a protected agent is in no list of yours until you join)
    pub agent: String,
    /// The agent's access token, from its owner (not named `token`: that is the API token's)
    #[arg(value_name = "TOKEN")]
    pub access_token: String,
}

fn parse_access(s: &str) -> Result<AgentAccess, String> {
    AgentAccess::parse(s)
        .ok_or_else(|| format!("{s:?} is not an access policy (private, protected or public)"))
}

fn parse_role(s: &str) -> Result<MemberRole, String> {
    MemberRole::parse(s).ok_or_else(|| format!("{s:?} is not a role (user or operator)"))
}

pub(super) async fn access(
    client: &ApiClient,
    json_out: bool,
    args: AccessArgs,
) -> anyhow::Result<i32> {
    let mut agent = client.find_agent(&args.agent).await?;
    if let Some(access) = args.access {
        let change = UpdateAgent {
            access: Some(access),
            ..UpdateAgent::default()
        };
        agent = client.update_agent(&agent.id, &change).await?;
    }
    if args.new_token {
        let made = client.rotate_access_token(&agent.id).await?;
        if json_out {
            println!("{}", json(&made)?);
        } else {
            // The token alone on stdout, to be captured; it is never shown again.
            println!("{}", made.access_token);
            eprintln!(
                "agenthold: give it with the agent's id {}: agenthold join {} TOKEN",
                agent.id, agent.id
            );
        }
    } else if json_out {
        println!("{}", json(&agent)?);
    } else {
        println!("{}", agent.access.as_str());
    }
    Ok(0)
}

pub(super) async fn members(
    client: &ApiClient,
    json_out: bool,
    args: MembersArgs,
) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    match args.action {
        None => {
            let members = client.list_members(&agent.id).await?;
            if json_out {
                println!("{}", json(&members)?);
            } else {
                print!("{}", members_table(&members));
            }
        }
        Some(MembersAction::Add { user, role }) => {
            let member = client
                .add_member(&agent.id, &AddMember { user, role })
                .await?;
            if json_out {
                println!("{}", json(&member)?);
            }
        }
        Some(MembersAction::Remove { user }) => client.remove_member(&agent.id, &user).await?,
    }
    Ok(0)
}

pub(super) async fn join(
    client: &ApiClient,
    json_out: bool,
    args: JoinArgs,
) -> anyhow::Result<i32> {
    // A protected agent is found by id: it is in no list of the caller's yet. One the caller
    // sees already may be named.
    let id = match client.find_agent(&args.agent).await {
        Ok(a) => a.id,
        Err(_) => args.agent,
    };
    let agent = client
        .join_agent(
            &id,
            &JoinAgent {
                access_token: args.access_token,
            },
        )
        .await?;
    if json_out {
        println!("{}", json(&agent)?);
    } else {
        println!("{}", agent.id);
    }
    Ok(0)
}

pub fn members_table(members: &[AgentMember]) -> String {
    let mut table = plain_table();
    table.set_header(vec!["USER", "NAME", "ROLE", "ADDED"]);
    for m in members {
        table.add_row(vec![
            m.user_id.clone(),
            m.user_name.clone(),
            m.role.as_str().to_string(),
            m.added_at.to_rfc3339(),
        ]);
    }
    render(&table)
}
