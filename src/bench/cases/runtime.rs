//! `--case runtime`: what gVisor (`runsc`) costs against Docker's own runtime (`runc`), both
//! through agenthold in the same run: exec `true`, create → shell, wake, and a file written and
//! read through the file API. The bench server allows both (its engine's default list).

use std::time::Instant;

use anyhow::{bail, Context};
use futures::StreamExt;

use super::common::{first_shell_bytes, until_running, wait_state};
use super::Ctx;
use crate::agents::runtimes::{GVISOR, RUNC};
use crate::api::types::AgentState;
use crate::bench::docker_cli::docker;
use crate::bench::stats::{ms, Row};
use crate::cli::{AgentAction, ApiClient, CreateAgent, ExecBody};

/// Whether the engine has gVisor registered (scripts/docker-setup.sh does it).
pub async fn engine_has_gvisor() -> anyhow::Result<bool> {
    let runtimes = docker(&["info", "--format", "{{json .Runtimes}}"]).await?;
    let runtimes: serde_json::Value =
        serde_json::from_str(runtimes.trim()).context("reading `docker info`'s runtimes")?;
    Ok(runtimes.get(GVISOR).is_some())
}

/// What one runtime took, each a list of samples in ms (the file figures in MiB/s).
#[derive(Default)]
struct Figures {
    exec: Vec<f64>,
    create: Vec<f64>,
    wake: Vec<f64>,
    write: f64,
    read: f64,
}

pub async fn runtime(cx: &mut Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let mib = if cx.quick { 128 } else { 1024 };
    let mut runc = Figures::default();
    let mut gvisor = Figures::default();
    for (runtime, figures) in [(RUNC, &mut runc), (GVISOR, &mut gvisor)] {
        crate::bench::progress(&format!("runtime {runtime}"));
        *figures = measure(cx, runtime, mib).await?;
    }
    let pair = |case: &str, g: &[f64], r: &[f64]| {
        Row::times(&format!("{case}, {GVISOR} (baseline: {RUNC})"), g, Some(r))
    };
    let file = |case: &str, g: f64, r: f64| {
        Row::value(
            &format!("{case} {mib} MiB, {GVISOR} (baseline: {RUNC})"),
            "MiB/s",
            g,
            Some(r),
            true,
        )
    };
    Ok(vec![
        pair("exec `true`", &gvisor.exec, &runc.exec),
        pair("create → shell usable", &gvisor.create, &runc.create),
        pair("wake → first terminal byte", &gvisor.wake, &runc.wake),
        file("file write", gvisor.write, runc.write),
        file("file read", gvisor.read, runc.read),
    ])
}

async fn measure(cx: &mut Ctx<'_>, runtime: &str, mib: usize) -> anyhow::Result<Figures> {
    let client = cx.server.client.clone();
    let mut f = Figures::default();
    // Create → shell, each agent made and removed.
    for i in 0..cx.runs {
        let mut events = client.events().await?;
        let t = Instant::now();
        let id = client
            .create_agent(&agent(&format!("rt-{runtime}-{i}"), runtime))
            .await?
            .id;
        until_running(&mut events, &client, std::slice::from_ref(&id)).await?;
        drop(events);
        let mut term = client.connect_terminal(&id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        f.create.push(ms(t.elapsed()));
        drop(term);
        client.delete_agent(&id).await?;
    }

    let mut events = client.events().await?;
    let id = client
        .create_agent(&agent(&format!("rt-{runtime}"), runtime))
        .await?
        .id;
    until_running(&mut events, &client, std::slice::from_ref(&id)).await?;
    drop(events);

    let req = ExecBody {
        command: vec!["true".into()],
        ..Default::default()
    };
    client.exec(&id, &req).await?;
    for _ in 0..cx.runs * 10 {
        let t = Instant::now();
        let r = client.exec(&id, &req).await?;
        f.exec.push(ms(t.elapsed()));
        if r.exit_code != 0 {
            bail!("`true` exited with {} under {runtime}", r.exit_code);
        }
    }

    (f.write, f.read) = file_round_trip(&client, &id, mib).await?;

    for _ in 0..cx.runs {
        client.action(&id, AgentAction::Stop).await?;
        wait_state(&client, &id, AgentState::Sleeping).await?;
        let t = Instant::now();
        let mut term = client.connect_terminal(&id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        f.wake.push(ms(t.elapsed()));
    }
    wait_state(&client, &id, AgentState::Running).await?;
    client.delete_agent(&id).await?;
    Ok(f)
}

fn agent(name: &str, runtime: &str) -> CreateAgent {
    CreateAgent {
        name: name.to_string(),
        runtime: Some(runtime.to_string()),
        ..Default::default()
    }
}

/// Writes `mib` MiB through the file API and reads them back, both streamed from and to
/// memory (one block repeated: the disk of the machine running the bench stays out of it);
/// MiB/s each way.
async fn file_round_trip(client: &ApiClient, id: &str, mib: usize) -> anyhow::Result<(f64, f64)> {
    let block = bytes::Bytes::from(vec![0x5a_u8; 1 << 20]);
    let body = futures::stream::iter((0..mib).map(move |_| Ok::<_, std::io::Error>(block.clone())));
    let t = Instant::now();
    client
        .fs_write(id, "bench-runtime.bin", reqwest::Body::wrap_stream(body))
        .await?;
    let write = mib as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut s = client.fs_read(id, "bench-runtime.bin").await?;
    let mut n = 0usize;
    while let Some(chunk) = s.next().await {
        n += chunk?.len();
    }
    let read = mib as f64 / t.elapsed().as_secs_f64();
    if n != mib << 20 {
        bail!("read {n} bytes back, wrote {}", mib << 20);
    }
    Ok((write, read))
}
