//! `--case burst`: many agents created at once, cold and from a warm pool as big as the burst,
//! against as many `docker run`s (and plain Docker doing more of a sandbox's work); the host's
//! memory and the server's RSS with them running and with them paused.

use std::time::Instant;

use anyhow::Context;

use super::common::{
    create_all_running, create_all_running_like, destroy_all, until_pool_empty, until_pool_ready,
    wait_state,
};
use super::footprint::SERVER_IDLE_MIB;
use super::Ctx;
use crate::api::types::AgentState;
use crate::bench::docker_cli::{docker, BASELINE_LABEL};
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;
use crate::cli::{AgentAction, CreateAgent};

/// The preset whose warm pool the warm burst fills (given `warm: n` by a config reload).
const BURST_POOL_PRESET: &str = "burst-pool";

/// What the server's RSS may grow by per running agent, in MiB.
const RSS_PER_AGENT_MIB: f64 = 0.25;

pub async fn burst(cx: &mut Ctx<'_>, n: usize) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let client = cx.client();
    let t = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("burst-{i}")).collect();
    let ids = create_all_running(&client, &names).await?;
    let created = ids.len();
    let ours = ms(t.elapsed());
    let base = docker_run_burst(cx, n, "burst").await?;
    let network_only = burst_with(cx, n, BurstWork::Network).await?;
    let same_work = burst_with(cx, n, BurstWork::Sandbox).await?;
    let row = Row::value(
        &format!("burst: {n} agents created at once"),
        "ms",
        ours,
        Some(base),
        false,
    );
    let against = |what: &str, base: f64| {
        Row::value(
            &format!("burst: {n} agents vs {what}"),
            "ms",
            ours,
            Some(base),
            false,
        )
    };
    Ok((
        vec![
            row.judged(&[
                Bound::All {
                    what: "succeed",
                    done: created,
                    of: n,
                },
                Bound::RatioAtMost(1.3),
            ]),
            against("docker run, a network each", network_only),
            against("Docker doing the same work", same_work),
        ],
        ids,
    ))
}

/// `n` `docker run`s at once, in ms (the containers are removed after).
async fn docker_run_burst(cx: &Ctx<'_>, n: usize, what: &str) -> anyhow::Result<f64> {
    let name = |i: usize| format!("{}-base-{what}-{i}", cx.prefix);
    let t = Instant::now();
    let made = futures::future::try_join_all((0..n).map(|i| {
        let (name, image) = (name(i), cx.image.to_string());
        async move {
            docker(&[
                "run", "-d", "--init", "--name", &name, &image, "sleep", "infinity",
            ])
            .await
        }
    }))
    .await;
    let took = ms(t.elapsed());
    for i in 0..n {
        let _ = docker(&["rm", "-f", &name(i)]).await;
    }
    made?;
    Ok(took)
}

/// `n` creates at once from a preset whose warm pool holds `n` ready entries (filled ahead,
/// untimed), until all run, against `n` `docker run`s at once. The pool is emptied and the
/// agents destroyed before the baseline, which they would slow down.
pub async fn warm_burst(cx: &mut Ctx<'_>, n: usize) -> anyhow::Result<Row> {
    let client = cx.client();
    let warm = u32::try_from(n)?;
    cx.server
        .set_extra_presets(&format!("  {BURST_POOL_PRESET}:\n    warm: {warm}\n"))
        .await?;
    until_pool_ready(&client, BURST_POOL_PRESET, warm).await?;
    let names: Vec<String> = (0..n).map(|i| format!("warm-burst-{i}")).collect();
    let like = CreateAgent {
        preset: Some(BURST_POOL_PRESET.to_string()),
        ..Default::default()
    };
    let t = Instant::now();
    let created = create_all_running_like(&client, &names, &like).await?;
    let ours = ms(t.elapsed());
    let claimed = created.iter().filter(|a| a.warm).count();
    cx.server.set_extra_presets("").await?;
    let ids: Vec<String> = created.into_iter().map(|a| a.id).collect();
    destroy_all(&client, &ids).await?;
    until_pool_empty(&client, BURST_POOL_PRESET).await?;
    let base = docker_run_burst(cx, n, "warm-burst").await?;
    Ok(Row::value(
        &format!("burst: {n} agents created at once from a warm pool of {n}"),
        "ms",
        ours,
        Some(base),
        false,
    )
    .judged(&[
        Bound::All {
            what: "claim a warm entry",
            done: claimed,
            of: n,
        },
        Bound::RatioAtMost(0.2),
    ]))
}

/// The memory the sandboxes of `ids` use on the host (their containers' cgroups, as `docker
/// stats` reads them) and the server's RSS, with them running, then paused (the light sleep
/// keeps their memory: the figure says what that costs), the running figures as baselines.
/// They run again after.
pub async fn paused_memory(cx: &mut Ctx<'_>, ids: &[String]) -> anyhow::Result<Vec<Row>> {
    let client = cx.client();
    let n = ids.len();
    let names: Vec<String> = ids.iter().map(|id| format!("{}-{id}", cx.prefix)).collect();
    let rss_mib = |cx: &Ctx<'_>| cx.server.rss_kib().unwrap_or(0) as f64 / 1024.0;
    let (host_running, rss_running) = (containers_memory_mib(&names).await?, rss_mib(cx));
    futures::future::try_join_all(ids.iter().map(|id| client.action(id, AgentAction::Pause)))
        .await?;
    for id in ids {
        wait_state(&client, id, AgentState::Paused).await?;
    }
    let (host_paused, rss_paused) = (containers_memory_mib(&names).await?, rss_mib(cx));
    futures::future::try_join_all(ids.iter().map(|id| client.action(id, AgentAction::Start)))
        .await?;
    for id in ids {
        wait_state(&client, id, AgentState::Running).await?;
    }
    Ok(vec![
        Row::value(
            &format!("host memory of {n} sandboxes paused (baseline: running)"),
            "MiB",
            host_paused,
            Some(host_running),
            false,
        ),
        Row::value(
            &format!("server RSS, {n} agents paused (baseline: running)"),
            "MiB",
            rss_paused,
            Some(rss_running),
            false,
        ),
    ])
}

/// The memory the containers `names` use together, in MiB, as `docker stats` shows it.
async fn containers_memory_mib(names: &[String]) -> anyhow::Result<f64> {
    let out = docker(&[
        "stats",
        "--no-stream",
        "--format",
        "{{.Name}}\t{{.MemUsage}}",
    ])
    .await?;
    let mut total = 0.0;
    for line in out.lines() {
        let Some((name, usage)) = line.split_once('\t') else {
            continue;
        };
        if names.iter().any(|n| n == name) {
            total += parse_mem(usage.split('/').next().unwrap_or_default().trim())
                .with_context(|| format!("docker stats said {usage:?} for {name}"))?;
        }
    }
    Ok(total)
}

/// `3.469MiB` (or `B`, `kB`, `KiB`, `MB`, `GiB`, …) in MiB.
fn parse_mem(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let bytes = match unit {
        "B" => 1.0,
        "kB" | "KB" => 1e3,
        "KiB" => 1024.0,
        "MB" => 1e6,
        "MiB" => 1024.0 * 1024.0,
        "GB" => 1e9,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(number * bytes / (1024.0 * 1024.0))
}

/// How much of a sandbox's work a plain-Docker burst baseline does.
#[derive(Clone, Copy, PartialEq)]
enum BurstWork {
    /// An internal network with its own subnet per container, then `docker run` on it.
    Network,
    /// All a sandbox needs besides its server: the network, a home volume, a file copied in
    /// (boot.json), then the start.
    Sandbox,
}

/// Plain Docker doing `work` for `n` containers at once: what `docker run` alone leaves out,
/// measured, to tell what the design costs from what the server adds.
async fn burst_with(cx: &Ctx<'_>, n: usize, work: BurstWork) -> anyhow::Result<f64> {
    let boot = cx.tmp.join("bench-boot.json");
    std::fs::write(&boot, br#"{"token":"bench"}"#)?;
    let boot = boot.to_string_lossy().into_owned();
    let label = format!("{}={}", BASELINE_LABEL, cx.prefix);
    let names = |i: usize| {
        let p = cx.prefix;
        (
            format!("{p}-base-work-{i}"),
            format!("{p}-base-net-{i}"),
            format!("{p}-base-home-{i}"),
        )
    };
    let t = Instant::now();
    let made = futures::future::try_join_all((0..n).map(|i| {
        let (name, net, home) = names(i);
        let (boot, label, image) = (boot.clone(), label.clone(), cx.image.to_string());
        // The upper half of the benchmark's own pool (10.214.0.0/16), which its agents, taken
        // from the bottom, do not reach.
        let subnet = format!("10.214.{}.{}/28", 200 + i / 16, (i % 16) * 16);
        async move {
            let mount = format!("{home}:/home/agent");
            docker(&[
                "network",
                "create",
                "--internal",
                "--label",
                &label,
                "--subnet",
                &subnet,
                &net,
            ])
            .await?;
            if work == BurstWork::Network {
                return docker(&[
                    "run",
                    "-d",
                    "--init",
                    "--name",
                    &name,
                    "--network",
                    &net,
                    &image,
                    "sleep",
                    "infinity",
                ])
                .await;
            }
            docker(&["volume", "create", "--label", &label, &home]).await?;
            docker(&[
                "create",
                "--init",
                "--name",
                &name,
                "--network",
                &net,
                "-v",
                &mount,
                &image,
                "sleep",
                "infinity",
            ])
            .await?;
            docker(&["cp", &boot, &format!("{name}:/etc/boot.json")]).await?;
            docker(&["start", &name]).await
        }
    }))
    .await;
    let took = ms(t.elapsed());
    for i in 0..n {
        let (name, net, home) = names(i);
        let _ = docker(&["rm", "-f", &name]).await;
        let _ = docker(&["network", "rm", &net]).await;
        let _ = docker(&["volume", "rm", "-f", &home]).await;
    }
    made?;
    Ok(took)
}

pub fn server_rss_with_agents(cx: &Ctx<'_>, connected: usize) -> Row {
    let kib = cx.server.rss_kib().unwrap_or(0);
    let mib = kib as f64 / 1024.0;
    let limit = SERVER_IDLE_MIB + RSS_PER_AGENT_MIB * connected as f64;
    Row::value(
        &format!("server RSS, {connected} agents running"),
        "MiB",
        mib,
        None,
        false,
    )
    .judged(&[Bound::AtMost(limit)])
}

#[cfg(test)]
mod tests {
    use super::parse_mem;

    #[test]
    fn docker_stats_memory_is_read_in_mib() {
        assert_eq!(parse_mem("512MiB"), Some(512.0));
        assert_eq!(parse_mem("1.5GiB"), Some(1536.0));
        assert_eq!(parse_mem("2048KiB"), Some(2.0));
        assert_eq!(parse_mem("0B"), Some(0.0));
        assert_eq!(parse_mem("12 parsecs"), None);
        assert_eq!(parse_mem(""), None);
    }
}
