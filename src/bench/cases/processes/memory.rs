//! What running background processes cost: sandboxd's RSS with [`HELD`] of them against its
//! idle figure, and each process's shim on top.

use std::time::Duration;

use anyhow::{bail, Context};

use super::{delete_noted, start, start_noted};
use crate::bench::cases::common::sandboxd_pid;
use crate::bench::cases::Ctx;
use crate::bench::server_proc::{children, rss_kib};
use crate::bench::stats::{percentile, Row};
use crate::bench::target::Bound;
use crate::cli::ApiClient;

/// How many `sleep` processes the memory row runs at once (`sandbox.max_processes` is 128 by
/// default).
const HELD: usize = 100;
/// The most sandboxd may grow per running process for the memory row to pass.
const GROWTH_PER_PROCESS_KIB: f64 = 64.0;

/// A process's private memory (`Private_Clean` + `Private_Dirty` of `smaps_rollup`): what it
/// costs beyond the pages it shares (sandboxd's text, for a shim), in KiB.
fn private_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let mut sum = None;
    for l in s.lines() {
        if l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:") {
            let kib: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
            sum = Some(sum.unwrap_or(0) + kib);
        }
    }
    sum
}

/// sandboxd's children that are process shims (its own binary, run with the shim argument).
fn shims(sandboxd: u32) -> Vec<u32> {
    let arg = sandboxd::process::shim::SHIM_ARG.as_bytes();
    children(sandboxd)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg))
        })
        .collect()
}

/// sandboxd's RSS idle, then with [`HELD`] `sleep` processes running; and what each process's
/// shim costs on top (a process of its own, outside sandboxd's RSS).
pub(super) async fn held_processes(
    cx: &Ctx<'_>,
    client: &ApiClient,
    id: &str,
    started: &mut Vec<String>,
) -> anyhow::Result<Vec<Row>> {
    let pid = sandboxd_pid(cx, id).await?;
    let settle = || tokio::time::sleep(Duration::from_millis(500));
    settle().await;
    let idle = rss_kib(pid).context("reading sandboxd's RSS")?;
    let req = start(&["sleep", "1000"]);
    let mut held = Vec::with_capacity(HELD);
    for _ in 0..HELD {
        held.push(start_noted(client, id, &req, started).await?.id);
    }
    settle().await;
    if sandboxd_pid(cx, id).await? != pid {
        bail!("sandboxd's pid changed while processes were started");
    }
    let with = rss_kib(pid).context("reading sandboxd's RSS")?;
    let shim_pids = shims(pid);
    let shim_private: Vec<u64> = shim_pids.iter().filter_map(|&p| private_kib(p)).collect();
    let shim_rss: Vec<u64> = shim_pids.iter().filter_map(|&p| rss_kib(p)).collect();
    for p in &held {
        delete_noted(client, id, p, started).await?;
    }
    let left = client
        .list_processes(id)
        .await?
        .into_iter()
        .filter(|p| held.contains(&p.id))
        .count();
    if left > 0 {
        bail!("{left} of the {HELD} processes are still listed after their delete");
    }

    let mut rows = vec![Row::value(
        &format!("sandboxd RSS, {HELD} processes running (against idle)"),
        "KiB",
        with as f64,
        Some(idle as f64),
        false,
    )
    .judged(&[Bound::EachAtMost {
        limit: GROWTH_PER_PROCESS_KIB,
        count: HELD,
    }])];
    if shim_pids.len() != HELD {
        crate::bench::progress(&format!(
            "processes: found {} shims under sandboxd for {HELD} processes",
            shim_pids.len()
        ));
    }
    if !shim_private.is_empty() {
        let median = |v: &[u64]| {
            let v: Vec<f64> = v.iter().map(|&k| k as f64).collect();
            percentile(&v, 0.5)
        };
        rows.push(Row::value(
            &format!(
                "a process's shim, private memory (median of {}; its RSS, with shared text, {:.0} KiB)",
                shim_private.len(),
                median(&shim_rss)
            ),
            "KiB",
            median(&shim_private),
            None,
            false,
        ));
    }
    Ok(rows)
}
