//! `agenthold approvals` and `agenthold approve ID OPTION`: the server's queue of questions for a
//! person (today the harnesses' permission requests).

use std::collections::HashMap;

use anyhow::Context;

use super::chat_view::tool_call_title;
use super::client::ApiClient;
use super::error::ClientError;
use super::output::{json, plain_table, render};
use crate::api::types::conversation::{Approval, ApprovalOption, ApprovalOutcome, ApprovalState};

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ApprovalsArgs {
    /// The resolved ones too (the last 1000), not only those waiting
    #[arg(long)]
    pub all: bool,
    /// Only this agent's (id or name)
    #[arg(long)]
    pub agent: Option<String>,
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ApproveArgs {
    /// The approval's id (`agenthold approvals` lists them)
    pub id: String,
    /// The option to answer with: its id, or its name (any case) when no other option has it
    pub option: String,
}

pub(super) async fn list(
    client: &ApiClient,
    json_out: bool,
    args: ApprovalsArgs,
) -> anyhow::Result<i32> {
    let agent = match &args.agent {
        Some(a) => Some(client.find_agent(a).await?.id),
        None => None,
    };
    let state = (!args.all).then_some(ApprovalState::Pending);
    let approvals = client.list_approvals(state, agent.as_deref()).await?;
    if json_out {
        println!("{}", json(&approvals)?);
        return Ok(0);
    }
    // Agents are shown by name; one that is gone keeps its id.
    let names: HashMap<String, String> = match client.list_agents().await {
        Ok(agents) => agents.into_iter().map(|a| (a.id, a.name)).collect(),
        Err(_) => HashMap::new(),
    };
    print!("{}", approvals_table(&approvals, &names, args.all));
    Ok(0)
}

pub fn approvals_table(
    approvals: &[Approval],
    agent_names: &HashMap<String, String>,
    with_state: bool,
) -> String {
    let mut table = plain_table();
    let mut header = vec!["ID", "AGENT", "ASKS", "OPTIONS"];
    if with_state {
        header.push("STATE");
    }
    table.set_header(header);
    for a in approvals {
        let mut row = vec![
            a.id.clone(),
            agent_names
                .get(&a.agent_id)
                .cloned()
                .unwrap_or_else(|| a.agent_id.clone()),
            one_line(&asks(a), 60),
            options_cell(&a.options),
        ];
        if with_state {
            row.push(state_cell(a));
        }
        table.add_row(row);
    }
    render(&table)
}

/// `a2=Allow once, b7=Reject always`: each option's id (what `approve` takes) and name.
fn options_cell(options: &[ApprovalOption]) -> String {
    options
        .iter()
        .map(|o| format!("{}={}", o.option_id, one_line(&o.name, 40)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn state_cell(a: &Approval) -> String {
    match (a.state, a.outcome) {
        (ApprovalState::Pending, _) | (_, None) => "pending".into(),
        (ApprovalState::Resolved, Some(outcome)) => {
            let word = match outcome {
                ApprovalOutcome::Selected => "selected",
                ApprovalOutcome::Cancelled => "cancelled",
                ApprovalOutcome::Expired => "expired",
            };
            let mut s = word.to_string();
            if let Some(id) = &a.option_id {
                s.push(' ');
                s.push_str(id);
            }
            if let Some(by) = &a.decided_by {
                s.push_str(" by ");
                s.push_str(by);
            }
            s
        }
    }
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('\u{2026}');
        cut
    }
}

/// Which of `options` a person meant by `answer`: the option with that id, else the one option
/// whose name it is (in any case). Never a position: the order of the options says nothing.
pub fn pick_option<'a>(
    options: &'a [ApprovalOption],
    answer: &str,
) -> Result<&'a ApprovalOption, String> {
    let answer = answer.trim();
    if let Some(o) = options.iter().find(|o| o.option_id == answer) {
        return Ok(o);
    }
    let wanted = answer.to_lowercase();
    let named: Vec<&ApprovalOption> = options
        .iter()
        .filter(|o| o.name.trim().to_lowercase() == wanted)
        .collect();
    match named.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "{answer:?} is none of the options: {}",
            options_cell(options)
        )),
        _ => Err(format!(
            "more than one option is named {answer:?}: answer with its id ({})",
            named
                .iter()
                .map(|o| o.option_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The option `--no-approve` answers with: the offered `reject_once`, else `reject_always`.
pub fn refusal(options: &[ApprovalOption]) -> Option<&ApprovalOption> {
    options
        .iter()
        .find(|o| o.kind == "reject_once")
        .or_else(|| options.iter().find(|o| o.kind == "reject_always"))
}

pub(super) async fn approve(
    client: &ApiClient,
    json_out: bool,
    args: ApproveArgs,
) -> anyhow::Result<i32> {
    // Its options, so that a name can be matched; whether it can still be answered is the
    // server's to say (the first answer wins).
    let approval = client.get_approval(&args.id).await.map_err(|e| match e {
        ClientError::Api { status: 404, .. } => {
            anyhow::anyhow!(
                "no approval {:?} (`agenthold approvals` lists them)",
                args.id
            )
        }
        e => e.into(),
    })?;
    let option_id = pick_option(&approval.options, &args.option)
        .map_err(anyhow::Error::msg)?
        .option_id
        .clone();
    let answered = client
        .answer_approval(&args.id, &option_id)
        .await
        .with_context(|| format!("answering {} with {option_id}", args.id))?;
    if json_out {
        println!("{}", json(&answered)?);
    } else {
        let name = answered
            .options
            .iter()
            .find(|o| o.option_id == option_id)
            .map(|o| format!(" ({})", o.name))
            .unwrap_or_default();
        println!("{}: {option_id}{name}", answered.id);
    }
    Ok(0)
}

/// What an approval asks about: a command's line and who asked for it, or the harness's tool
/// call.
fn asks(a: &Approval) -> String {
    match (&a.command, &a.requester) {
        (Some(c), Some(r)) => format!("{r}: {c}"),
        (Some(c), None) => c.clone(),
        _ => tool_call_title(&a.tool_call).unwrap_or_else(|| "-".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::conversation::ApprovalKind;

    fn option(id: &str, name: &str, kind: &str) -> ApprovalOption {
        ApprovalOption {
            option_id: id.into(),
            name: name.into(),
            kind: kind.into(),
        }
    }

    /// The test harness's four, in its order.
    fn options() -> Vec<ApprovalOption> {
        vec![
            option("b7", "Reject always", "reject_always"),
            option("a2", "Allow once", "allow_once"),
            option("c9", "Reject", "reject_once"),
            option("d4", "Always allow", "allow_always"),
        ]
    }

    #[test]
    fn options_are_picked_by_id_or_by_a_unique_name() {
        let opts = options();
        let id = |answer: &str| pick_option(&opts, answer).map(|o| o.option_id.clone());
        assert_eq!(id("a2"), Ok("a2".into()));
        assert_eq!(id(" allow ONCE \n"), Ok("a2".into()));
        assert_eq!(id("reject"), Ok("c9".into()));
        let err = id("2").unwrap_err();
        assert!(
            err.contains("none of the options") && err.contains("a2=Allow once"),
            "{err}"
        );
        let twice = vec![
            option("x", "Yes", "allow_once"),
            option("y", "yes", "allow_always"),
        ];
        let err = pick_option(&twice, "YES")
            .map(|o| o.option_id.clone())
            .unwrap_err();
        assert!(err.contains("x, y"), "{err}");
        // An id wins over a name.
        let odd = vec![
            option("Yes", "No", "reject_once"),
            option("n", "Yes", "allow_once"),
        ];
        assert_eq!(
            pick_option(&odd, "Yes").map(|o| o.option_id.as_str()),
            Ok("Yes")
        );
    }

    #[test]
    fn refusing_prefers_reject_once() {
        assert_eq!(
            refusal(&options()).map(|o| o.option_id.as_str()),
            Some("c9")
        );
        let opts = options();
        let no_once: Vec<_> = opts
            .iter()
            .filter(|o| o.kind != "reject_once")
            .cloned()
            .collect();
        assert_eq!(refusal(&no_once).map(|o| o.option_id.as_str()), Some("b7"));
        assert!(refusal(&[option("a", "Allow", "allow_once")]).is_none());
    }

    #[test]
    fn the_table_names_agents_tool_calls_and_options() {
        let mut a = Approval {
            id: "ap1".into(),
            agent_id: "k3".into(),
            session_id: Some("s1".into()),
            kind: ApprovalKind::Permission,
            command: None,
            requester: None,
            tool_call: serde_json::json!({"toolCallId": "t", "title": "Write\nfile"}),
            options: options()[..2].to_vec(),
            state: ApprovalState::Pending,
            created_at: String::new(),
            expires_at: String::new(),
            outcome: None,
            option_id: None,
            decided_by: None,
        };
        let names = HashMap::from([("k3".to_string(), "builder".to_string())]);
        let out = approvals_table(std::slice::from_ref(&a), &names, false);
        assert_eq!(
            out,
            "ID   AGENT    ASKS        OPTIONS\n\
             ap1  builder  Write file  b7=Reject always, a2=Allow once\n"
        );
        let mut c = a.clone();
        c.kind = ApprovalKind::Command;
        c.session_id = None;
        c.tool_call = serde_json::Value::Null;
        c.command = Some("rm -rf ~".into());
        c.requester = Some("ann (token ci)".into());
        let out = approvals_table(&[c], &names, false);
        assert!(out.contains("ann (token ci): rm -rf ~"), "{out}");
        a.state = ApprovalState::Resolved;
        a.outcome = Some(ApprovalOutcome::Expired);
        a.option_id = Some("b7".into());
        a.decided_by = Some("timeout".into());
        a.agent_id = "gone".into();
        let out = approvals_table(&[a], &names, true);
        assert!(
            out.contains("expired b7 by timeout") && out.contains("gone"),
            "{out}"
        );
    }
}
