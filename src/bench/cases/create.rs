//! `--case create`: create → shell usable, cold and from a warm pool, each against
//! `docker run -d` + `docker exec`.

use std::time::Instant;

use super::common::{first_shell_bytes, until_pool_ready, until_running};
use super::Ctx;
use crate::bench::docker_cli::docker;
use crate::bench::stats::{ms, percentile, Row};
use crate::bench::target::Bound;
use crate::cli::CreateAgent;

const TARGET: &[Bound] = &[Bound::RatioAtMost(1.2)];
/// From the pool: a claim is one database transaction and sandboxd's setup, no container made.
const POOL_TARGET: &[Bound] = &[Bound::AtMost(100.0)];

/// The benchmark server's preset with `warm: 1` (see `server_proc::write_config`).
pub const POOL_PRESET: &str = "pooled";

pub async fn create_to_shell(cx: &mut Ctx<'_>) -> anyhow::Result<Row> {
    let client = cx.client();
    let mut ours = Vec::new();
    let mut base = Vec::new();
    // Where our time goes, as the client sees it: the create request, until the agent runs
    // (the driver's steps log at `agenthold::driver=debug`), the terminal's upgrade, the shell.
    let mut steps: [Vec<f64>; 4] = Default::default();
    for i in 0..cx.runs {
        let mut events = client.events().await?;
        let t = Instant::now();
        let id = client
            .create_agent(&CreateAgent {
                name: format!("create-{i}"),
                ..Default::default()
            })
            .await?
            .id;
        let posted = t.elapsed();
        until_running(&mut events, &client, std::slice::from_ref(&id)).await?;
        let running = t.elapsed();
        drop(events);
        let mut term = client.connect_terminal(&id, 80, 24).await?;
        let upgraded = t.elapsed();
        first_shell_bytes(&mut term).await?;
        let done = t.elapsed();
        ours.push(ms(done));
        for (k, d) in [
            posted,
            running - posted,
            upgraded - running,
            done - upgraded,
        ]
        .into_iter()
        .enumerate()
        {
            steps[k].push(ms(d));
        }
        drop(term);
        client.delete_agent(&id).await?;

        base.push(baseline(cx, &format!("create-{i}")).await?);
    }
    let p50 = |v: &[f64]| percentile(v, 0.5);
    crate::bench::progress(&format!(
        "create → shell, p50 of each step: create request {:.0} ms, until running {:.0} ms, \
         terminal upgrade {:.0} ms, first shell byte {:.0} ms",
        p50(&steps[0]),
        p50(&steps[1]),
        p50(&steps[2]),
        p50(&steps[3])
    ));
    Ok(Row::times("create → shell usable", &ours, Some(&base)).judged(TARGET))
}

/// A create that claims the pool's ready entry → shell usable. Each run waits for the refill
/// first, untimed: the figure is the claim's.
pub async fn create_from_pool_to_shell(cx: &mut Ctx<'_>) -> anyhow::Result<Row> {
    let client = cx.client();
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for i in 0..cx.runs {
        until_pool_ready(&client, POOL_PRESET, 1).await?;
        let t = Instant::now();
        let agent = client
            .create_agent(&CreateAgent {
                name: format!("pooled-{i}"),
                preset: Some(POOL_PRESET.to_string()),
                ..Default::default()
            })
            .await?;
        anyhow::ensure!(agent.warm, "the create did not claim the warm pool's entry");
        let mut term = client.connect_terminal(&agent.id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        ours.push(ms(t.elapsed()));
        drop(term);
        client.delete_agent(&agent.id).await?;
        // Not beside the refill, which would slow the baseline down.
        until_pool_ready(&client, POOL_PRESET, 1).await?;
        base.push(baseline(cx, &format!("pooled-{i}")).await?);
    }
    // Refilled before the next case, so that it measures nothing of ours in the background.
    until_pool_ready(&client, POOL_PRESET, 1).await?;
    Ok(Row::times(
        "create from the warm pool → shell usable",
        &ours,
        Some(&base),
    )
    .judged(POOL_TARGET))
}

/// `docker run -d` + `docker exec echo`, in ms: what a create → shell usable is measured against.
async fn baseline(cx: &Ctx<'_>, what: &str) -> anyhow::Result<f64> {
    let name = format!("{}-base-{what}", cx.prefix);
    let t = Instant::now();
    docker(&[
        "run", "-d", "--init", "--name", &name, cx.image, "sleep", "infinity",
    ])
    .await?;
    docker(&["exec", &name, "sh", "-c", "echo ready"]).await?;
    let took = ms(t.elapsed());
    docker(&["rm", "-f", &name]).await?;
    Ok(took)
}
