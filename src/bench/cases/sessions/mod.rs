//! `--case sessions`: agent sessions, with the repo's model-free ACP agent (`acp-test-agent/`)
//! as the harness, on an agent of their own, each figure against the harness's own in the same
//! run:
//! - prompt → first update at an SSE client (which follows `…/events?after=lastSeq` before the
//!   prompt goes), against prompt → first `session/update` line of the same agent program
//!   driven through `docker exec -i` in the same container ([`direct`]);
//! - updates delivered end to end per second (`flood N`), against the same flood read directly,
//!   and the server's RSS growth meanwhile;
//! - the server's RSS per idle session (each with its harness process and runner, after a turn);
//! - wake → first update, against wake → first terminal byte of the same agent.
//!
//! The benchmark's server mounts a folder holding only the test agent into every sandbox and
//! names it its default harness ([`stage_test_agent`], `server_proc::write_config`).

mod api;
mod direct;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::common::{create_running, first_shell_bytes, wait_state, RssWatch};
use super::Ctx;
use crate::api::types::process::ProcessState;
use crate::api::types::AgentState;
use crate::bench::server_proc::TEST_AGENT_MOUNT as MOUNTED;
use crate::bench::stats::{ms, percentile, Row};
use crate::bench::target::Bound;
use crate::cli::{AgentAction, ApiClient};
use api::SessionApi;
use direct::Direct;

/// The most the server may add to the harness's own prompt → first update, at p50, in ms.
const ADDS_AT_P50_MS: f64 = 5.0;
/// Updates a second that must reach an SSE client end to end.
const UPDATES_PER_S: f64 = 10_000.0;
/// The most the server's RSS may grow while a flood goes through it, in MiB.
const FLOOD_GROWTH_MIB: f64 = 16.0;

/// The static test agent: next to the sandboxd the benchmark's sandboxes run (the driver's own
/// lookup; `scripts/build-sandboxd.sh` and `scripts/build-acp-test-agent.sh` put them side by
/// side under the target directory), else where that lookup would look for sandboxd. `Err`
/// says where it looked and how to build it.
pub fn locate_test_agent() -> Result<PathBuf, String> {
    let sandboxd = crate::driver::docker::locate_sandboxd(None).ok();
    let exe = std::env::current_exe().ok();
    let mut looked: Vec<PathBuf> = Vec::new();
    for c in candidates(sandboxd.as_deref(), exe.as_deref()) {
        if looked.contains(&c) {
            continue;
        }
        // A plain `cargo build` of the workspace leaves a dynamic build in target/debug/,
        // which would start only in images with a matching glibc.
        if c.is_file() && crate::driver::docker::is_static_elf(&c).unwrap_or(false) {
            return Ok(c);
        }
        looked.push(c);
    }
    let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "no static acp-test-agent (looked at {}); build it with `bash scripts/build-acp-test-agent.sh`",
        looked.join(", ")
    ))
}

/// Where the test agent may be, in order, given the sandboxd the driver found and the running
/// executable.
fn candidates(sandboxd: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    const NAME: &str = "acp-test-agent";
    let mut out = Vec::new();
    // target/sandboxd/sandboxd → target/acp-test-agent/acp-test-agent; a sandboxd copied next
    // to the binary → the agent beside it.
    if let Some(dir) = sandboxd.and_then(Path::parent) {
        out.push(dir.join(NAME));
        if let Some(up) = dir.parent() {
            out.push(up.join(NAME).join(NAME));
        }
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        out.push(dir.join(NAME));
        for a in dir.ancestors() {
            if a.file_name().is_some_and(|n| n == "target") {
                out.push(a.join(NAME).join(NAME));
            }
        }
    }
    out
}

/// Copies the test agent alone into a folder under `tmp` for the server to mount (whatever lies
/// beside the original stays out of the sandboxes): the folder.
pub fn stage_test_agent(tmp: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let bin = locate_test_agent()?;
    let dir = tmp.join("acp");
    let staged = (|| {
        std::fs::create_dir_all(&dir)?;
        // Read and run by the sandbox's account, whoever that is.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let to = dir.join("acp-test-agent");
        std::fs::copy(&bin, &to)?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
    })();
    staged.map_err(|e| format!("copying {} into {}: {e}", bin.display(), dir.display()))?;
    Ok(dir)
}

pub async fn sessions(cx: &mut Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let client = cx.client();
    let api = SessionApi::new(&cx.server.base, &cx.server.token)?;
    let id = create_running(&client, "sessions").await?;
    let rows = measure(cx, &client, &api, &id).await;
    // The agent takes its sessions and their harnesses with it, also after a failure.
    let _ = client.delete_agent(&id).await;
    rows
}

async fn measure(
    cx: &mut Ctx<'_>,
    client: &ApiClient,
    api: &SessionApi,
    id: &str,
) -> anyhow::Result<Vec<Row>> {
    // Memory first, before a flood has gone through the server.
    let idle = idle_sessions(cx, client, api, id).await?;
    let container = format!("{}-{id}", cx.prefix);
    let mut direct = Direct::start(&container).await?;
    let mut rows = vec![first_update(cx, api, id, &mut direct).await?];
    rows.extend(flood(cx, api, id, &mut direct).await?);
    drop(direct);
    rows.push(idle);
    rows.push(wake(cx, client, api, id).await?);
    Ok(rows)
}

fn ended(stop_reason: String) -> anyhow::Result<()> {
    if stop_reason != "end_turn" {
        bail!("a turn of the test agent ended {stop_reason:?}, not end_turn");
    }
    Ok(())
}

/// A new session whose harness runs (one turn done).
async fn warm_session(api: &SessionApi, id: &str, title: &str) -> anyhow::Result<String> {
    let s = api.create(id, title).await?;
    ended(api.ask(id, &s.id, "warm up").await?)?;
    Ok(s.id)
}

/// Prompt → first update at an SSE client, against the harness's own prompt → first update.
/// The two alternate, prompt by prompt.
async fn first_update(
    cx: &Ctx<'_>,
    api: &SessionApi,
    id: &str,
    direct: &mut Direct,
) -> anyhow::Result<Row> {
    let samples = if cx.quick { 30 } else { 300 };
    let sid = warm_session(api, id, "latency").await?;
    direct.first_update("warm up").await?;
    let last = api.get(id, &sid).await?.last_seq;
    let mut events = api.follow(id, &sid, last).await?;
    let mut ours = Vec::with_capacity(samples);
    let mut base = Vec::with_capacity(samples);
    for i in 0..samples {
        let text = format!("ping {i}");
        let t = Instant::now();
        let turn = api.prompt(id, &sid, &text).await?;
        events.first_update().await?;
        ours.push(ms(t.elapsed()));
        ended(events.turn_end(turn).await?)?;
        base.push(ms(direct.first_update(&text).await?));
    }
    let added = percentile(&ours, 0.5) - percentile(&base, 0.5);
    Ok(Row::times(
        "session prompt → first update at an SSE client",
        &ours,
        Some(&base),
    )
    .judged(&[Bound::AddsAtP50(ADDS_AT_P50_MS)])
    .noted(&format!("adds {added:.2} ms")))
}

/// `flood N` through the server to an SSE client, against the same flood read from the
/// harness directly; and the server's RSS growth while it goes through.
async fn flood(
    cx: &Ctx<'_>,
    api: &SessionApi,
    id: &str,
    direct: &mut Direct,
) -> anyhow::Result<Vec<Row>> {
    let n: usize = if cx.quick { 20_000 } else { 100_000 };
    let sid = warm_session(api, id, "flood").await?;
    let last = api.get(id, &sid).await?.last_seq;
    let mut events = api.follow(id, &sid, last).await?;
    let before = cx.server.rss_kib().unwrap_or(0);
    let watch = RssWatch::start(cx.server.pid().context("the server has exited")?);
    let t = Instant::now();
    let turn = api.prompt(id, &sid, &format!("flood {n}")).await?;
    let (seen, took) = events.updates(n, t).await?;
    let stop = events.turn_end(turn).await?;
    let peak = watch.peak_kib();
    if stop != "end_turn" {
        bail!("the flood's turn ended {stop:?} after {seen} of {n} updates");
    }
    let (base_seen, base_took) = direct.flood(n).await?;
    let rate = seen as f64 / took.as_secs_f64();
    let base_rate = base_seen as f64 / base_took.as_secs_f64();
    let grew = peak.saturating_sub(before) as f64 / 1024.0;
    Ok(vec![
        Row::value(
            &format!("session updates delivered end to end (flood {n})"),
            "updates/s",
            rate,
            Some(base_rate),
            true,
        )
        .judged(&[
            Bound::AtLeast(UPDATES_PER_S),
            Bound::All {
                what: "delivered",
                done: seen,
                of: n,
            },
        ]),
        Row::value(
            "server RSS growth during the flood",
            "MiB",
            grew,
            None,
            false,
        )
        .judged(&[Bound::AtMost(FLOOD_GROWTH_MIB)]),
    ])
}

/// The server's RSS per idle session: `n` sessions made, each through one turn (so each has a
/// harness process and a runner reading it), against the RSS before them.
async fn idle_sessions(
    cx: &Ctx<'_>,
    client: &ApiClient,
    api: &SessionApi,
    id: &str,
) -> anyhow::Result<Row> {
    let n = if cx.quick { 10 } else { 20 };
    // One first, so that what the first session costs once (code paths, the store's caches)
    // is not counted per session.
    warm_session(api, id, "first").await?;
    let settle = Duration::from_millis(500);
    tokio::time::sleep(settle).await;
    let before = cx.server.rss_kib().context("reading the server's RSS")?;
    for i in 0..n {
        warm_session(api, id, &format!("idle {i}")).await?;
    }
    tokio::time::sleep(settle).await;
    let after = cx.server.rss_kib().context("reading the server's RSS")?;
    // Each of them must still have its harness, or this measured less than it says.
    let harnesses = client
        .list_processes(id)
        .await?
        .iter()
        .filter(|p| {
            p.tag.as_deref().is_some_and(|t| t.starts_with("acp-"))
                && p.state == ProcessState::Running
        })
        .count();
    if harnesses < n + 1 {
        bail!("{harnesses} harness processes run, not {}", n + 1);
    }
    let per = (after as f64 - before as f64) / n as f64;
    Ok(Row::value(
        &format!("server RSS per idle session ({n} sessions with a harness each)"),
        "KiB",
        per,
        None,
        false,
    ))
}

async fn sleep_agent(client: &ApiClient, id: &str) -> anyhow::Result<()> {
    client.action(id, AgentAction::Stop).await?;
    wait_state(client, id, AgentState::Sleeping).await
}

/// Wake → first update (a prompt to a sleeping agent: the sandbox starts, then the harness,
/// which reopens the conversation), against wake → first terminal byte of the same agent,
/// run by run.
async fn wake(cx: &Ctx<'_>, client: &ApiClient, api: &SessionApi, id: &str) -> anyhow::Result<Row> {
    let sid = warm_session(api, id, "wake").await?;
    let mut ours = Vec::with_capacity(cx.runs);
    let mut base = Vec::with_capacity(cx.runs);
    for i in 0..cx.runs {
        sleep_agent(client, id).await?;
        let t = Instant::now();
        let mut term = client.connect_terminal(id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        base.push(ms(t.elapsed()));
        drop(term);

        sleep_agent(client, id).await?;
        let last = api.get(id, &sid).await?.last_seq;
        let mut events = api.follow(id, &sid, last).await?;
        let t = Instant::now();
        let turn = api.prompt(id, &sid, &format!("wake {i}")).await?;
        events.first_update().await?;
        ours.push(ms(t.elapsed()));
        ended(events.turn_end(turn).await?)?;
    }
    Ok(Row::times(
        "wake → first session update (baseline: wake → first terminal byte)",
        &ours,
        Some(&base),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_agent_is_looked_for_beside_sandboxd_first() {
        let found = candidates(
            Some(Path::new("/r/target/sandboxd/sandboxd")),
            Some(Path::new("/r/target/debug/agenthold")),
        );
        assert_eq!(
            found[..2],
            [
                PathBuf::from("/r/target/sandboxd/acp-test-agent"),
                PathBuf::from("/r/target/acp-test-agent/acp-test-agent"),
            ]
        );
        assert!(found.contains(&PathBuf::from("/r/target/debug/acp-test-agent")));
        // A sandboxd beside the binary, in a target directory of another name.
        let found = candidates(
            Some(Path::new("/t/debug/sandboxd")),
            Some(Path::new("/t/debug/agenthold")),
        );
        assert!(found.contains(&PathBuf::from("/t/acp-test-agent/acp-test-agent")));
        assert!(candidates(None, None).is_empty());
    }
}
