//! `--case burst`: many agents created at once, against as many `docker run`s (and plain Docker
//! doing more of a sandbox's work), and the server's RSS with them running.

use std::time::Instant;

use super::common::create_all_running;
use super::footprint::SERVER_IDLE_MIB;
use super::Ctx;
use crate::bench::docker_cli::{docker, BASELINE_LABEL};
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;

/// What the server's RSS may grow by per running agent, in MiB.
const RSS_PER_AGENT_MIB: f64 = 0.25;

pub async fn burst(cx: &mut Ctx<'_>, n: usize) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let client = cx.client();
    let t = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("burst-{i}")).collect();
    let ids = create_all_running(&client, &names).await?;
    let created = ids.len();
    let ours = ms(t.elapsed());
    let prefix = cx.prefix.to_string();
    let image = cx.image.to_string();
    let t = Instant::now();
    futures::future::try_join_all((0..n).map(|i| {
        let name = format!("{prefix}-base-burst-{i}");
        let image = image.clone();
        async move {
            docker(&[
                "run", "-d", "--init", "--name", &name, &image, "sleep", "infinity",
            ])
            .await
        }
    }))
    .await?;
    let base = ms(t.elapsed());
    for i in 0..n {
        let _ = docker(&["rm", "-f", &format!("{prefix}-base-burst-{i}")]).await;
    }
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
