//! `agenthold audit`: the audit log, newest first, narrowed by filters.

use super::client::ApiClient;
use super::output::{json, plain_table, render};
use crate::api::types::AuditEntry;

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct AuditArgs {
    /// An agent's id or name
    #[arg(long)]
    pub agent: Option<String>,
    /// A user's id or name
    #[arg(long)]
    pub user: Option<String>,
    /// An action: agent.create, exec, fs.write, sign_in, … (docs/api.md lists them)
    #[arg(long)]
    pub action: Option<String>,
    /// Entries at or after: an RFC 3339 time or a duration ago (24h, 7d)
    #[arg(long)]
    pub since: Option<String>,
    /// Entries at or before: an RFC 3339 time or a duration ago
    #[arg(long)]
    pub until: Option<String>,
    /// Entries older than this id (the last id of the page before)
    #[arg(long)]
    pub before: Option<i64>,
    /// How many entries (1 to 1000; default 100)
    #[arg(long)]
    pub limit: Option<u32>,
}

impl AuditArgs {
    /// The query string's pairs; the server checks the values.
    pub fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let strings = [
            ("agent", &self.agent),
            ("user", &self.user),
            ("action", &self.action),
            ("since", &self.since),
            ("until", &self.until),
        ];
        for (k, v) in strings {
            if let Some(v) = v {
                q.push((k, v.clone()));
            }
        }
        if let Some(b) = self.before {
            q.push(("before", b.to_string()));
        }
        if let Some(l) = self.limit {
            q.push(("limit", l.to_string()));
        }
        q
    }
}

pub(super) async fn run(
    client: &ApiClient,
    json_out: bool,
    args: AuditArgs,
) -> anyhow::Result<i32> {
    let entries = client.audit(&args.query()).await?;
    if json_out {
        println!("{}", json(&entries)?);
    } else {
        print!("{}", audit_table(&entries));
    }
    Ok(0)
}

pub fn audit_table(entries: &[AuditEntry]) -> String {
    let mut table = plain_table();
    table.set_header(vec![
        "ID", "AT", "WHO", "ACTION", "AGENT", "DETAIL", "ADDRESS", "STATUS",
    ]);
    for e in entries {
        // One line each: a multi-file write's paths, a prompt's line breaks.
        let detail = e.detail.as_deref().unwrap_or("").replace('\n', " ");
        table.add_row(vec![
            e.id.to_string(),
            e.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            e.actor(),
            e.action.as_str().to_string(),
            e.agent_name
                .clone()
                .or_else(|| e.agent_id.clone())
                .unwrap_or_default(),
            detail,
            e.address.clone(),
            e.status.to_string(),
        ]);
    }
    render(&table)
}
