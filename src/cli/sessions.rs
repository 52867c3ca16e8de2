//! `agenthold sessions AGENT`: an agent's conversations with its harnesses: list, `--new`,
//! `--delete`.

use super::client::ApiClient;
use super::output::{json, plain_table, render};
use crate::api::types::conversation::{CreateSession, Session, SessionState};

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct SessionsArgs {
    /// Agent id or name
    pub agent: String,
    /// Start a new session and print its id (the harness starts with its first prompt)
    #[arg(long, conflicts_with = "delete")]
    pub new: bool,
    /// With --new: the harness (a name from the server's `harnesses`; default: the agent's
    /// preset's, else the server's)
    #[arg(long, requires = "new", value_name = "NAME")]
    pub harness: Option<String>,
    /// With --new: the absolute directory the harness runs in (default: /home/agent)
    #[arg(long, requires = "new", value_name = "DIR")]
    pub cwd: Option<String>,
    /// With --new: a title (at most 200 characters)
    #[arg(long, requires = "new")]
    pub title: Option<String>,
    /// Delete this session: a running turn is cancelled, the harness ended, the transcript gone
    #[arg(long, value_name = "ID")]
    pub delete: Option<String>,
}

pub(super) async fn run(
    client: &ApiClient,
    json_out: bool,
    args: SessionsArgs,
) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    if args.new {
        let req = CreateSession {
            harness: args.harness,
            cwd: args.cwd,
            title: args.title,
        };
        let session = client.create_session(&agent.id, &req).await?;
        if json_out {
            println!("{}", json(&session)?);
        } else {
            println!("{}", session.id);
        }
        return Ok(0);
    }
    if let Some(sid) = &args.delete {
        client.delete_session(&agent.id, sid).await?;
        return Ok(0);
    }
    let sessions = client.list_sessions(&agent.id).await?;
    if json_out {
        println!("{}", json(&sessions)?);
    } else {
        print!("{}", sessions_table(&sessions));
    }
    Ok(0)
}

pub fn sessions_table(sessions: &[Session]) -> String {
    let mut table = plain_table();
    table.set_header(["ID", "TITLE", "HARNESS", "STATE", "TURNS"]);
    for s in sessions {
        let state = match s.state {
            SessionState::Idle => "idle",
            SessionState::Running => "running",
        };
        let title: String = s
            .title
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        table.add_row([
            s.id.clone(),
            title,
            s.harness.clone(),
            state.to_string(),
            s.turns.to_string(),
        ]);
    }
    render(&table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_id_title_harness_state_and_turns() {
        let s = Session {
            id: "s1".into(),
            agent_id: "a".into(),
            harness: "claude".into(),
            title: "New session".into(),
            cwd: "/home/agent".into(),
            state: SessionState::Running,
            acp_session_id: None,
            restore: None,
            process_id: None,
            created_at: String::new(),
            updated_at: String::new(),
            turns: 3,
            last_seq: 9,
        };
        assert_eq!(
            sessions_table(&[s]),
            "ID  TITLE        HARNESS  STATE    TURNS\n\
             s1  New session  claude   running  3\n"
        );
    }
}
