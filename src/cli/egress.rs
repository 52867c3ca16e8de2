//! `agenthold egress AGENT`: what an agent may reach, shown or changed.

use std::io::Write;

use super::client::ApiClient;
use super::output;
use crate::api::types::{EgressChange, EgressRules, UpdateAgent};
use crate::egress::Rule;

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct EgressArgs {
    /// Agent id or name
    pub agent: String,
    /// Add a destination the sandbox may reach (pypi.org, *.pythonhosted.org, 203.0.113.0/24,
    /// *; optionally :PORT); repeat for more
    #[arg(long, value_name = "RULE")]
    pub allow: Vec<Rule>,
    /// Add a destination the sandbox may not reach even when allowed; repeat for more
    #[arg(long, value_name = "RULE")]
    pub deny: Vec<Rule>,
    /// Remove a rule from both lists; repeat for more
    #[arg(long, value_name = "RULE")]
    pub remove: Vec<Rule>,
    /// Show the agent's recent egress decisions (the last 200 since the server started)
    /// instead of its rules
    #[arg(long, conflicts_with_all = ["allow", "deny", "remove"])]
    pub log: bool,
}

impl EgressArgs {
    fn changes(&self) -> bool {
        !(self.allow.is_empty() && self.deny.is_empty() && self.remove.is_empty())
    }
}

/// The rules after the changes `args` asks for: removals first, then additions (each once).
pub fn apply(mut rules: EgressRules, args: &EgressArgs) -> EgressRules {
    rules.allow.retain(|r| !args.remove.contains(r));
    rules.deny.retain(|r| !args.remove.contains(r));
    for (list, add) in [
        (&mut rules.allow, &args.allow),
        (&mut rules.deny, &args.deny),
    ] {
        for rule in add {
            if !list.contains(rule) {
                list.push(rule.clone());
            }
        }
    }
    rules
}

pub(super) async fn run(client: &ApiClient, json: bool, args: EgressArgs) -> anyhow::Result<i32> {
    let mut agent = client.find_agent(&args.agent).await?;
    if args.log {
        let entries = client.egress_log(&agent.id).await?;
        let text = if json {
            output::json(&entries)?
        } else {
            output::egress_log_table(&entries)
        };
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        return Ok(0);
    }
    if args.changes() {
        let rules = apply(agent.egress.clone().unwrap_or_default(), &args);
        let req = UpdateAgent {
            egress: Some(EgressChange::both(rules)),
            ..UpdateAgent::default()
        };
        agent = client.update_agent(&agent.id, &req).await?;
    }
    let rules = agent.egress.unwrap_or_default();
    let text = if json {
        output::json(&rules)?
    } else {
        show(&rules)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(0)
}

fn show(rules: &EgressRules) -> String {
    let list = |rules: &[Rule]| {
        if rules.is_empty() {
            "  (none)\n".to_string()
        } else {
            rules.iter().map(|r| format!("  {r}\n")).collect()
        }
    };
    let mut text = format!("allow:\n{}deny:\n{}", list(&rules.allow), list(&rules.deny));
    if rules.allow.is_empty() {
        text.push_str("nothing is allowed: the sandbox reaches no destination outside\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter().map(|r| r.parse().unwrap()).collect()
    }

    #[test]
    fn changes_remove_first_then_add_each_rule_once() {
        let before = EgressRules {
            allow: rules(&["pypi.org", "github.com"]),
            deny: rules(&["evil.example"]),
        };
        let args = EgressArgs {
            agent: "a".into(),
            allow: rules(&["pypi.org", "*.pythonhosted.org"]),
            deny: vec![],
            remove: rules(&["github.com", "evil.example"]),
            log: false,
        };
        let after = apply(before, &args);
        assert_eq!(after.allow, rules(&["pypi.org", "*.pythonhosted.org"]));
        assert!(after.deny.is_empty());
        assert!(show(&after).contains("  *.pythonhosted.org\n"));
        assert!(show(&EgressRules::default()).contains("nothing is allowed"));
    }

    #[test]
    fn the_log_is_a_table_of_decisions() {
        use crate::api::types::EgressLogEntry;
        let at = chrono::Utc::now();
        let entry = |host: &str, allowed, bytes: Option<(u64, u64)>| EgressLogEntry {
            at,
            host: host.into(),
            port: 443,
            allowed,
            rule: allowed.then(|| host.to_string()),
            reason: None,
            bytes_up: bytes.map(|b| b.0),
            bytes_down: bytes.map(|b| b.1),
            secret: None,
        };
        let text = output::egress_log_table(&[
            entry("pypi.org", true, Some((10, 2000))),
            entry("github.com", true, None),
            entry("evil\u{1b}.example", false, None),
            EgressLogEntry {
                secret: Some("GITHUB_TOKEN".into()),
                ..entry("api.github.com", true, None)
            },
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("TIME"), "{text}");
        assert!(
            lines[1].contains("pypi.org:443") && lines[1].contains("10/2000"),
            "{text}"
        );
        assert!(
            lines[2].contains("allowed") && lines[2].contains("open"),
            "{text}"
        );
        assert!(
            lines[3].contains("evil?.example:443") && lines[3].contains("refused"),
            "{text}"
        );
        assert!(lines[4].contains("GITHUB_TOKEN"), "{text}");
        assert!(output::egress_log_table(&[]).contains("no egress decisions"));
    }
}
