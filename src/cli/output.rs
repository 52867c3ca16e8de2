//! How agents are shown: tables for people, JSON for programs.

use chrono::{DateTime, Utc};
use comfy_table::{presets, Table};

use crate::api::types::{Agent, AgentState, PoolInfo, PresetInfo};

/// Longest error message shown in a table cell; `show` prints it whole.
const ERROR_CELL: usize = 60;

pub fn agents_table(agents: &[Agent], now: DateTime<Utc>) -> String {
    let mut table = plain_table();
    table.set_header([
        "ID",
        "NAME",
        "STATE",
        "IMAGE",
        "CPUS",
        "MEMORY",
        "SLEEPS/ERROR",
    ]);
    for a in agents {
        table.add_row([
            a.id.clone(),
            a.name.clone(),
            state_cell(a),
            a.image.clone(),
            cpus(a.cpus),
            memory(a.memory_mb),
            sleeps_or_error(a, now),
        ]);
    }
    render(&table)
}

/// `agenthold egress AGENT --log`: one line per decision, oldest first.
pub fn egress_log_table(entries: &[crate::api::types::EgressLogEntry]) -> String {
    if entries.is_empty() {
        return "no egress decisions since the server started\n".to_string();
    }
    let mut table = plain_table();
    table.set_header([
        "TIME",
        "DESTINATION",
        "DECISION",
        "RULE",
        "BYTES UP/DOWN",
        "SECRET",
    ]);
    for e in entries {
        // The sandbox named the destination: no control characters reach the terminal.
        let host: String = e
            .host
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let bytes = match (e.bytes_up, e.bytes_down) {
            (Some(up), Some(down)) => format!("{up}/{down}"),
            _ if e.allowed => "open".to_string(),
            _ => "-".to_string(),
        };
        table.add_row([
            e.at.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string(),
            format!("{host}:{}", e.port),
            if e.allowed { "allowed" } else { "refused" }.to_string(),
            e.rule.clone().unwrap_or_else(|| "-".into()),
            bytes,
            e.secret.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    render(&table)
}

/// `agenthold presets`: one line each, the default marked.
pub fn presets_table(presets: &[PresetInfo]) -> String {
    let mut table = plain_table();
    table.set_header([
        "NAME",
        "IMAGE",
        "CPUS",
        "MEMORY",
        "DISK",
        "SETUP",
        "DESCRIPTION",
    ]);
    for p in presets {
        let name = if p.default {
            format!("{} (default)", p.name)
        } else {
            p.name.clone()
        };
        table.add_row([
            name,
            p.image.clone(),
            cpus(p.cpus),
            memory(p.memory_mb),
            p.disk_mb.map_or_else(|| "no limit".into(), memory),
            if p.setup.is_some() { "yes" } else { "-" }.to_string(),
            p.description.clone().unwrap_or_default(),
        ]);
    }
    render(&table)
}

/// `agenthold pool`: one line per preset with a warm pool.
pub fn pool_table(pools: &[PoolInfo]) -> String {
    if pools.is_empty() {
        return "no warm pools (give a preset warm: N)".to_string();
    }
    let mut table = plain_table();
    table.set_header(["PRESET", "TARGET", "READY", "STARTING"]);
    for p in pools {
        table.add_row([
            p.preset.clone(),
            p.target.to_string(),
            p.ready.to_string(),
            p.starting.to_string(),
        ]);
    }
    render(&table)
}

/// `text` on stdout, with one newline at its end.
pub fn print(text: &str) {
    if text.ends_with('\n') {
        print!("{text}");
    } else {
        println!("{text}");
    }
}

/// The long form for `agents show`: one field a line.
pub fn agent_details(a: &Agent, now: DateTime<Utc>) -> String {
    let mut table = plain_table();
    let time = |t: Option<DateTime<Utc>>| {
        t.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_else(|| "-".into())
    };
    let mut rows = vec![
        ("ID", a.id.clone()),
        ("Name", a.name.clone()),
        ("State", state_cell(a)),
        ("Image", a.image.clone()),
        ("Runtime", a.runtime.clone()),
        (
            "Root",
            if a.allow_root { "allowed (sudo)" } else { "no" }.into(),
        ),
        ("CPUs", cpus(a.cpus)),
        ("Memory", memory(a.memory_mb)),
        ("Disk", a.disk_mb.map_or_else(|| "no limit".into(), memory)),
        ("Idle minutes", a.idle_minutes.to_string()),
        ("Deep sleep minutes", a.deep_sleep_minutes.to_string()),
        ("Preset", a.preset.clone().unwrap_or_else(|| "-".into())),
        ("Created", time(Some(a.created_at))),
        ("Last activity", time(a.last_activity_at)),
    ];
    if let Some(at) = a.sleeps_at {
        rows.push((
            "Sleeps",
            format!("{} ({})", time(Some(at)), relative(at, now)),
        ));
    }
    if let Some(err) = &a.error {
        rows.push(("Error", err.clone()));
    }
    if !a.env.is_empty() {
        let env: Vec<String> = a.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        rows.push(("Env", env.join(" ")));
    }
    if let Some(s) = &a.setup {
        let state = serde_json::to_value(s.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let code = s
            .exit_code
            .map(|c| format!(" (exit {c})"))
            .unwrap_or_default();
        rows.push(("Setup", format!("{state}{code}")));
    }
    for (k, v) in rows {
        table.add_row([format!("{k}:"), v]);
    }
    render(&table)
}

pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value)?)
}

pub(super) fn plain_table() -> Table {
    let mut table = Table::new();
    // Columns separated by spaces and nothing else, so the output greps and cuts like `ps`.
    table.load_preset(presets::NOTHING);
    table.force_no_tty();
    table
}

pub(super) fn render(table: &Table) -> String {
    let mut out = String::new();
    for line in table.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            continue; // the NOTHING preset still draws the header separator, as spaces
        }
        // The preset's left border is a space column too.
        out.push_str(line.strip_prefix(' ').unwrap_or(line));
        out.push('\n');
    }
    out
}

fn state_cell(a: &Agent) -> String {
    if a.needs_rebuild && a.state != AgentState::Rebuilding {
        format!("{} (needs rebuild)", a.state)
    } else {
        a.state.to_string()
    }
}

fn cpus(n: f64) -> String {
    // `2`, `0.5`: whole numbers without a trailing `.0`.
    let s = format!("{n:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn memory(mb: u64) -> String {
    if mb >= 1024 && mb.is_multiple_of(1024) {
        format!("{}Gi", mb / 1024)
    } else {
        format!("{mb}Mi")
    }
}

fn sleeps_or_error(a: &Agent, now: DateTime<Utc>) -> String {
    if a.state == AgentState::Error {
        let msg = a.error.as_deref().unwrap_or("failed");
        return one_line(msg, ERROR_CELL);
    }
    match a.sleeps_at {
        Some(at) => relative(at, now),
        None => "-".into(),
    }
}

fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (at - now).num_seconds();
    if secs <= 0 {
        return "due now".into();
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("in {h}h{m:02}m")
    } else if m > 0 {
        format!("in {m}m")
    } else {
        format!("in {s}s")
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, h, m, s)
            .single()
            .unwrap_or(DateTime::UNIX_EPOCH)
    }

    fn agent(id: &str, name: &str, state: AgentState) -> Agent {
        Agent {
            id: id.into(),
            name: name.into(),
            image: "debian:bookworm-slim".into(),
            cpus: 2.0,
            memory_mb: 4096,
            disk_mb: Some(10240),
            runtime: "runc".into(),
            egress: None,
            idle_minutes: 15,
            deep_sleep_minutes: 60,
            state,
            error: None,
            needs_rebuild: false,
            created_at: at(7, 0, 0),
            last_activity_at: None,
            sleeps_at: None,
            pull: None,
            preset: None,
            env: Default::default(),
            secrets: Vec::new(),
            setup: None,
            ttl_minutes: None,
            expires_at: None,
            labels: Default::default(),
            allow_root: false,
            approvals: Default::default(),
            owner: crate::api::types::AgentOwner {
                id: "admin".into(),
                name: "admin".into(),
            },
            access: Default::default(),
            warm: false,
        }
    }

    #[test]
    fn the_list_table_has_the_documented_columns() {
        let mut running = agent("k3f9x2m1q8ab", "builder", AgentState::Running);
        running.sleeps_at = Some(at(7, 25, 0));
        let mut broken = agent("p0q1r2s3t4u5", "web", AgentState::Error);
        broken.cpus = 0.5;
        broken.memory_mb = 1500;
        broken.error = Some("image not found:\nbusybox".into());
        let mut stale = agent("z9", "x", AgentState::Sleeping);
        stale.needs_rebuild = true;
        let out = agents_table(&[running, broken, stale], at(7, 10, 30));
        let expected = "\
ID            NAME     STATE                     IMAGE                 CPUS  MEMORY  SLEEPS/ERROR
k3f9x2m1q8ab  builder  running                   debian:bookworm-slim  2     4Gi     in 14m
p0q1r2s3t4u5  web      error                     debian:bookworm-slim  0.5   1500Mi  image not found: busybox
z9            x        sleeping (needs rebuild)  debian:bookworm-slim  2     4Gi     -
";
        assert_eq!(out, expected, "\n{out}");
    }

    #[test]
    fn an_empty_list_is_just_the_header() {
        let out = agents_table(&[], at(0, 0, 0));
        assert_eq!(out.lines().count(), 1);
        assert!(out.starts_with("ID"));
    }

    #[test]
    fn details_show_every_field_and_long_errors_whole() {
        let mut a = agent("k3", "builder", AgentState::Error);
        let long = "x".repeat(100);
        a.error = Some(long.clone());
        let out = agent_details(&a, at(7, 0, 0));
        assert!(out.contains("Name:") && out.contains("builder"), "{out}");
        assert!(out.contains(&long));
        assert!(out.contains("2026-11-29T07:00:00Z"));
        assert!(agents_table(&[a], at(7, 0, 0)).contains('\u{2026}'));
    }

    #[test]
    fn small_formatters() {
        assert_eq!(cpus(1.0), "1");
        assert_eq!(cpus(0.25), "0.25");
        assert_eq!(cpus(1.5), "1.5");
        assert_eq!(memory(512), "512Mi");
        assert_eq!(memory(2048), "2Gi");
        assert_eq!(relative(at(8, 5, 0), at(7, 0, 0)), "in 1h05m");
        assert_eq!(relative(at(7, 0, 40), at(7, 0, 0)), "in 40s");
        assert_eq!(relative(at(6, 0, 0), at(7, 0, 0)), "due now");
    }
}
