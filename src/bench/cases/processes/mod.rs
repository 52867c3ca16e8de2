//! `--case processes`: background processes (`/api/v1/agents/{id}/processes…`). How soon a
//! started process's first byte reaches a follower, against the streamed exec's first byte; how
//! fast a follower receives a big output, against the streamed exec of the same command; and
//! what 100 running processes cost sandboxd, against its own idle figure. Every process started
//! here is deleted at the end, also when a step fails.
//!
//! One file per figure: [`first_byte`], [`follow`] (with its plain NDJSON reading in
//! [`ndjson`]) and [`memory`].

mod first_byte;
mod follow;
mod memory;
mod ndjson;

use super::Ctx;
use crate::api::types::process::{Process, StartProcess};
use crate::bench::stats::Row;
use crate::cli::ApiClient;

pub async fn processes(cx: &mut Ctx<'_>, id: &str) -> anyhow::Result<Vec<Row>> {
    let client = cx.server.client.clone();
    let mut started: Vec<String> = Vec::new();
    let result = measure(cx, &client, id, &mut started).await;
    // Whatever is left after a failure; the steps delete their own processes as they go.
    for pid in &started {
        let _ = client.delete_process(id, pid).await;
    }
    result
}

async fn measure(
    cx: &mut Ctx<'_>,
    client: &ApiClient,
    id: &str,
    started: &mut Vec<String>,
) -> anyhow::Result<Vec<Row>> {
    // Memory first, while sandboxd has done nothing heavy in this case: after a gigabyte has
    // gone through it, its idle figure would include the allocator's leftovers.
    let memory = memory::held_processes(cx, client, id, started).await?;
    let first = first_byte::first_byte(cx, client, id, started).await?;
    let follow = follow::following(cx, client, id, started).await?;
    let mut rows = vec![first];
    rows.extend(follow);
    rows.extend(memory);
    Ok(rows)
}

fn start(command: &[&str]) -> StartProcess {
    StartProcess {
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Starts a process, noting it in `started` until it is deleted.
async fn start_noted(
    client: &ApiClient,
    id: &str,
    req: &StartProcess,
    started: &mut Vec<String>,
) -> anyhow::Result<Process> {
    let p = client.start_process(id, req).await?;
    started.push(p.id.clone());
    Ok(p)
}

async fn delete_noted(
    client: &ApiClient,
    id: &str,
    pid: &str,
    started: &mut Vec<String>,
) -> anyhow::Result<()> {
    client.delete_process(id, pid).await?;
    started.retain(|p| p != pid);
    Ok(())
}
