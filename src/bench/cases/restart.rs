//! `--case restart`: a server restart with a fleet of agents, until every running one runs a
//! command again.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::common::{create_all_running, wait_state};
use super::{Ctx, STEP_DEADLINE};
use crate::api::types::AgentState;
use crate::bench::stats::Row;
use crate::bench::target::Bound;
use crate::cli::{AgentAction, ExecBody};

const TARGET: &[Bound] = &[Bound::AtMost(3.0)];

pub async fn restart(cx: &mut Ctx<'_>, running: &[String], total: usize) -> anyhow::Result<Row> {
    let client = cx.client();
    // Make up the rest of the fleet as sleeping agents.
    let have = client.list_agents().await?.len();
    let extra = total.saturating_sub(have);
    for chunk in (0..extra).collect::<Vec<_>>().chunks(10) {
        let names: Vec<String> = chunk.iter().map(|i| format!("fleet-{i}")).collect();
        let ids = create_all_running(&client, &names).await?;
        for id in &ids {
            client.action(id, AgentAction::Stop).await?;
        }
        for id in &ids {
            wait_state(&client, id, AgentState::Sleeping).await?;
        }
    }
    let t = Instant::now();
    cx.server.restart().await?;
    let client = cx.client();
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        let agents = client.list_agents().await?;
        if agents.iter().all(|a| !a.state.is_transient()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("agents still unsettled after the restart");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Reconnected: every running agent runs a command.
    let req = ExecBody {
        command: vec!["true".into()],
        ..Default::default()
    };
    futures::future::try_join_all(running.iter().map(|id| {
        let client = client.clone();
        let req = req.clone();
        async move { client.exec(id, &req).await }
    }))
    .await?;
    let secs = t.elapsed().as_secs_f64();
    Ok(Row::value(
        &format!("restart: {total} agents, {} running", running.len()),
        "s",
        secs,
        None,
        false,
    )
    .judged(TARGET))
}
