//! `--case audit`: `GET /api/v1/audit` with filters over 100,000 entries, put straight into
//! the server's database (the store takes a second writer: WAL, a busy timeout).

use std::time::Instant;

use chrono::{Duration as Age, Utc};

use super::Ctx;
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;
use crate::model::audit::{Action, Entry};
use crate::store::Store;

const TARGET: &[Bound] = &[Bound::AtMost(20.0)];
/// Entries the log holds while it is read.
pub const ENTRIES: usize = 100_000;
/// Entries put in per transaction.
const BATCH: usize = 10_000;

/// Ten users (each doing every action in turn), a hundred agents, one entry every ten seconds up to now.
fn entry(i: usize) -> Entry {
    let actions = Action::ALL;
    // Each user does every action in turn, however many actions there are (with the user taken
    // as `i % 10`, an even number of actions would give a user only every other one).
    let user = (i / actions.len()) % 10;
    Entry {
        user_id: Some(format!("benchuser{user}")),
        user_name: format!("benchuser{user}"),
        token_name: i.is_multiple_of(3).then(|| "ci".to_string()),
        action: actions[i % actions.len()],
        agent_id: Some(format!("benchagent{:03}", i % 100)),
        agent_name: Some(format!("agent-{:03}", i % 100)),
        detail: Some(format!("sh -c 'echo {i}'")),
        address: std::net::IpAddr::from([127, 0, 0, 1]),
        status: 200,
    }
}

pub async fn audit(cx: &mut Ctx<'_>) -> anyhow::Result<Row> {
    let store = Store::open(&cx.tmp.join("data").join("agenthold.db")).await?;
    let now = Utc::now();
    for start in (0..ENTRIES).step_by(BATCH) {
        let batch = (start..start + BATCH)
            .map(|i| (entry(i), now - Age::seconds(10 * (ENTRIES - i) as i64)))
            .collect();
        store.add_audit_entries(batch).await?;
    }
    drop(store);
    let client = cx.client();
    // What a reader asks: the newest page, one agent's, one user's exec, a window of a day,
    // and a page deep in the log.
    let queries: [&[(&str, &str)]; 5] = [
        &[("limit", "100")],
        &[("agent", "benchagent042"), ("limit", "100")],
        &[("user", "benchuser7"), ("action", "exec"), ("limit", "100")],
        &[("since", "48h"), ("until", "24h"), ("limit", "100")],
        &[("before", "20000"), ("limit", "100")],
    ];
    let n = cx.runs * 10;
    let mut times = Vec::new();
    for q in queries {
        let q: Vec<(&str, String)> = q.iter().map(|(k, v)| (*k, v.to_string())).collect();
        client.audit(&q).await?;
        for _ in 0..n {
            let t = Instant::now();
            let page = client.audit(&q).await?;
            times.push(ms(t.elapsed()));
            if page.is_empty() {
                anyhow::bail!("GET /api/v1/audit {q:?} found nothing in {ENTRIES} entries");
            }
        }
    }
    Ok(Row::times("audit: GET 100 of 100k entries, filtered", &times, None).judged(TARGET))
}
