//! The benchmark's cases. Each returns rows for the table; timings use `Instant` around the
//! whole user-visible operation, ours and Docker's alike.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

use super::docker_cli::{docker, timed};
use super::server_proc::{children, rss_kib, ServerProc};
use super::stats::{ms, Row};
use crate::cli::{AgentAction, ApiClient, CreateAgent, ExecBody, ServerEvent, Terminal};
use crate::model::AgentState;

const WAKE_MESSAGE: &str = "Starting the sandbox";
const STEP_DEADLINE: Duration = Duration::from_secs(120);

pub struct Ctx<'a> {
    pub server: &'a mut ServerProc,
    pub prefix: &'a str,
    pub image: &'a str,
    pub runs: usize,
    pub tmp: &'a Path,
    pub quick: bool,
}

impl Ctx<'_> {
    fn client(&self) -> ApiClient {
        self.server.client.clone()
    }
}

pub async fn wait_state(client: &ApiClient, id: &str, want: AgentState) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        let a = client.get_agent(id).await?;
        if a.state == want {
            return Ok(());
        }
        if a.state == AgentState::Error {
            bail!("agent {id} failed: {}", a.error.unwrap_or_default());
        }
        if Instant::now() > deadline {
            bail!("agent {id} did not become {want} (it is {})", a.state);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn create_running(client: &ApiClient, name: &str) -> anyhow::Result<String> {
    let mut ids = create_all_running(client, &[name.to_string()]).await?;
    ids.pop().context("no agent was created")
}

/// Creates the agents named `names` at once and waits until all of them run, returning their
/// ids in order. Waits on the server's event stream, with a slow poll in case events are lost:
/// polling alone (every 5 ms per agent) made a burst of 50 cost the server 10,000 requests a
/// second, CPU taken from the very work being measured.
pub async fn create_all_running(
    client: &ApiClient,
    names: &[String],
) -> anyhow::Result<Vec<String>> {
    create_all_running_with(client, names, None).await
}

/// [`create_all_running`], with these `egress` rules for every agent.
pub async fn create_all_running_with(
    client: &ApiClient,
    names: &[String],
    egress: Option<crate::egress::EgressRules>,
) -> anyhow::Result<Vec<String>> {
    // Subscribed before the first create, so no state change can slip past.
    let mut events = client.events().await?;
    let egress = &egress;
    let ids = futures::future::try_join_all(names.iter().map(|name| async move {
        let a = client
            .create_agent(&CreateAgent {
                name: name.clone(),
                egress: egress.clone(),
                ..Default::default()
            })
            .await?;
        anyhow::Ok(a.id)
    }))
    .await?;
    until_running(&mut events, client, &ids).await?;
    Ok(ids)
}

type Events = futures::stream::BoxStream<'static, Result<ServerEvent, crate::cli::ClientError>>;

/// Waits until every agent in `ids` runs, on `events` (subscribed before the agents were
/// asked to start) and a slow poll.
pub(super) async fn until_running(
    events: &mut Events,
    client: &ApiClient,
    ids: &[String],
) -> anyhow::Result<()> {
    let mut pending: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    let mut poll = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(ServerEvent::Agent(a))) => note(&mut pending, &a)?,
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("the event stream failed: {e}"),
                None => bail!("the event stream ended"),
            },
            _ = poll.tick() => {
                for a in client.list_agents().await? {
                    note(&mut pending, &a)?;
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                bail!("{} of {} agents were not running in time", pending.len(), ids.len())
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
    }
}

/// Takes a running agent off `pending`; an agent of ours in `error` fails the wait.
fn note(
    pending: &mut std::collections::HashSet<&str>,
    a: &crate::model::Agent,
) -> anyhow::Result<()> {
    if !pending.contains(a.id.as_str()) {
        return Ok(());
    }
    match a.state {
        AgentState::Running => {
            pending.remove(a.id.as_str());
        }
        AgentState::Error => bail!(
            "agent {} failed: {}",
            a.id,
            a.error.clone().unwrap_or_default()
        ),
        _ => {}
    }
    Ok(())
}

/// Reads the terminal until a byte from the shell (not the server's wake notice) arrives.
pub(super) async fn first_shell_bytes(term: &mut Terminal) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(deadline, term.next())
            .await
            .context("no terminal output")?;
        match msg {
            Some(Ok(Message::Binary(b))) => {
                if !String::from_utf8_lossy(&b).contains(WAKE_MESSAGE) && !b.is_empty() {
                    return Ok(());
                }
            }
            Some(Ok(Message::Close(c))) => bail!("the terminal closed: {c:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("terminal: {e}"),
            None => bail!("the terminal ended"),
        }
    }
}

/// Reads the terminal until `needle` shows.
async fn read_until(term: &mut Terminal, needle: &[u8]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    let mut seen: Vec<u8> = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, term.next())
            .await
            .context("terminal timeout")?
        {
            Some(Ok(Message::Binary(b))) => {
                seen.extend_from_slice(&b);
                if seen.windows(needle.len()).any(|w| w == needle) {
                    return Ok(());
                }
                if seen.len() > 1 << 20 {
                    seen.drain(..seen.len() - 4096);
                }
            }
            Some(Ok(Message::Close(c))) => bail!("the terminal closed: {c:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("terminal: {e}"),
            None => bail!("the terminal ended"),
        }
    }
}

async fn keys(term: &mut Terminal, k: &[u8]) -> anyhow::Result<()> {
    term.send(Message::Binary(k.to_vec().into())).await?;
    Ok(())
}

/// A running container of `image` for the baselines.
pub async fn baseline_container(prefix: &str, image: &str, name: &str) -> anyhow::Result<String> {
    let name = format!("{prefix}-base-{name}");
    docker(&[
        "run", "-d", "--init", "--name", &name, image, "sleep", "infinity",
    ])
    .await?;
    Ok(name)
}

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

        let name = format!("{}-base-create-{i}", cx.prefix);
        let t = Instant::now();
        docker(&[
            "run", "-d", "--init", "--name", &name, cx.image, "sleep", "infinity",
        ])
        .await?;
        docker(&["exec", &name, "sh", "-c", "echo ready"]).await?;
        base.push(ms(t.elapsed()));
        docker(&["rm", "-f", &name]).await?;
    }
    let p50 = |v: &[f64]| super::stats::percentile(v, 0.5);
    super::progress(&format!(
        "create → shell, p50 of each step: create request {:.0} ms, until running {:.0} ms, \
         terminal upgrade {:.0} ms, first shell byte {:.0} ms",
        p50(&steps[0]),
        p50(&steps[1]),
        p50(&steps[2]),
        p50(&steps[3])
    ));
    let row = Row::times("create → shell usable", &ours, Some(&base));
    let met = row.ratio.is_some_and(|r| r <= 1.2);
    Ok(row.target("ratio ≤ 1.2", met))
}

pub async fn wake_to_first_byte(cx: &mut Ctx<'_>, id: &str) -> anyhow::Result<Row> {
    let client = cx.client();
    let base_name = baseline_container(cx.prefix, cx.image, "wake").await?;
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for _ in 0..cx.runs {
        client.action(id, AgentAction::Stop).await?;
        wait_state(&client, id, AgentState::Sleeping).await?;
        let t = Instant::now();
        let mut term = client.connect_terminal(id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        ours.push(ms(t.elapsed()));
        drop(term);

        docker(&["stop", "-t", "0", &base_name]).await?;
        let t = Instant::now();
        docker(&["start", &base_name]).await?;
        docker(&["exec", &base_name, "echo", "x"]).await?;
        base.push(ms(t.elapsed()));
    }
    wait_state(&client, id, AgentState::Running).await?;
    let row = Row::times("wake → first terminal byte", &ours, Some(&base));
    let met = row.ours_p50 <= 400.0 && row.ratio.is_some_and(|r| r <= 1.0);
    Ok(row.target("p50 ≤ 400 ms, ratio ≤ 1.0", met))
}

/// Round trips of one byte through a pty running `cat` in raw mode, on the host: the floor.
fn host_pty_floor(samples: usize) -> anyhow::Result<Vec<f64>> {
    use std::io::{Read, Write};
    let pty = nix::pty::openpty(None, None)?;
    let mut t = nix::sys::termios::tcgetattr(&pty.slave)?;
    nix::sys::termios::cfmakeraw(&mut t);
    nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &t)?;
    let slave = std::fs::File::from(pty.slave);
    let mut child = std::process::Command::new("cat")
        .stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    drop(slave);
    let mut master = std::fs::File::from(pty.master);
    let mut out = Vec::with_capacity(samples);
    let mut buf = [0u8; 64];
    for _ in 0..samples {
        let t = Instant::now();
        master.write_all(b"x")?;
        let n = master.read(&mut buf)?;
        if n == 0 {
            bail!("cat ended");
        }
        out.push(ms(t.elapsed()));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(out)
}

async fn echo_samples(term: &mut Terminal, samples: usize) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        keys(term, b"x").await?;
        read_until(term, b"x").await?;
        out.push(ms(t.elapsed()));
    }
    Ok(out)
}

pub async fn keystroke_echo(cx: &mut Ctx<'_>, id: &str, other: &str) -> anyhow::Result<Vec<Row>> {
    let client = cx.client();
    let samples = if cx.quick { 200 } else { 2000 };
    let mut term = client.connect_terminal(id, 80, 24).await?;
    first_shell_bytes(&mut term).await?;
    keys(&mut term, b"stty raw -echo; echo cat-''ready; exec cat\r").await?;
    read_until(&mut term, b"cat-ready").await?;
    // cat is up once a probe byte comes back.
    keys(&mut term, b"p").await?;
    read_until(&mut term, b"p").await?;
    let ours = echo_samples(&mut term, samples).await?;
    let floor = tokio::task::spawn_blocking(move || host_pty_floor(samples)).await??;

    // Again while another agent streams a file out as fast as it can.
    let size_mb: usize = if cx.quick { 64 } else { 256 };
    client
        .exec(
            other,
            &ExecBody {
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    format!("head -c {}M /dev/urandom > /tmp/stream.bin", size_mb),
                ],
                ..Default::default()
            },
        )
        .await?;
    let streamer = {
        let client = client.clone();
        let other = other.to_string();
        tokio::spawn(async move {
            loop {
                let Ok(mut s) = client.fs_read(&other, "/tmp/stream.bin").await else {
                    return;
                };
                while let Some(Ok(_)) = s.next().await {}
            }
        })
    };
    let loaded = echo_samples(&mut term, samples).await;
    streamer.abort();
    let loaded = loaded?;

    let floor_p50 = super::stats::percentile(&floor, 0.5);
    let floor_p99 = super::stats::percentile(&floor, 0.99);
    let judge = |r: Row| {
        let add50 = r.ours_p50 - floor_p50;
        let add99 = r.ours_p99.unwrap_or(f64::NAN) - floor_p99;
        r.target(
            "+p50 ≤ 1 ms, +p99 ≤ 5 ms over the floor",
            add50 <= 1.0 && add99 <= 5.0,
        )
    };
    let mut quiet = Row::times("keystroke echo", &ours, Some(&floor));
    quiet.baseline = Some(floor_p50);
    let mut busy = Row::times(
        "keystroke echo, other agent streaming",
        &loaded,
        Some(&floor),
    );
    busy.baseline = Some(floor_p50);
    Ok(vec![judge(quiet), judge(busy)])
}

pub async fn exec_true(cx: &mut Ctx<'_>, id: &str, base_name: &str) -> anyhow::Result<Row> {
    let client = cx.client();
    let n = cx.runs * 10;
    let req = ExecBody {
        command: vec!["true".into()],
        ..Default::default()
    };
    client.exec(id, &req).await?;
    let mut ours = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let r = client.exec(id, &req).await?;
        ours.push(ms(t.elapsed()));
        if r.exit_code != 0 {
            bail!("`true` exited with {}", r.exit_code);
        }
    }
    let mut base = Vec::new();
    for _ in 0..n {
        base.push(ms(timed(&["exec", base_name, "true"]).await?));
    }
    let row = Row::times("exec `true`", &ours, Some(&base));
    let met = row.ours_p50 <= 10.0 && row.ratio.is_some_and(|r| r <= 0.2);
    Ok(row.target("p50 ≤ 10 ms, ratio ≤ 0.2", met))
}

fn make_file(path: &Path, mib: usize) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    for i in 0..mib {
        block[0] = i as u8;
        f.write_all(&block)?;
    }
    f.flush()?;
    Ok(())
}

/// Samples the server's RSS every 20 ms until dropped, keeping the peak.
pub(super) struct RssWatch {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssWatch {
    pub(super) fn start(pid: u32) -> RssWatch {
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some(r) = rss_kib(pid) {
                    p.fetch_max(r, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        RssWatch { peak, task }
    }

    pub(super) fn peak_kib(self) -> u64 {
        self.task.abort();
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

pub async fn files(cx: &mut Ctx<'_>, id: &str, base_name: &str) -> anyhow::Result<Vec<Row>> {
    let client = cx.client();
    let mib = if cx.quick { 128 } else { 1024 };
    let src = cx.tmp.join("bench-file.bin");
    let dst = cx.tmp.join("bench-file.out");
    make_file(&src, mib)?;
    // The source file is fresh in the page cache: written back while the first transfer runs
    // (ours), it would compete for the disk with that transfer only.
    tokio::task::spawn_blocking(nix::unistd::sync).await?;
    let pid = cx.server.pid().context("the server has no pid")?;
    let before = rss_kib(pid).unwrap_or(0);
    let watch = RssWatch::start(pid);

    let t = Instant::now();
    let f = tokio::fs::File::open(&src).await?;
    let body =
        reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(f, 256 * 1024));
    client.fs_write(id, "bench-file.bin", body).await?;
    let write_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::create(&dst).await?);
    let mut s = client.fs_read(id, "bench-file.bin").await?;
    let mut n = 0usize;
    while let Some(chunk) = s.next().await {
        let chunk = chunk?;
        n += chunk.len();
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    let read_s = t.elapsed().as_secs_f64();
    if n != mib << 20 {
        bail!("read {n} bytes back, wrote {}", mib << 20);
    }
    let growth_mib = watch.peak_kib().saturating_sub(before) as f64 / 1024.0;

    let src_s = src.to_string_lossy().into_owned();
    let dst_s = dst.to_string_lossy().into_owned();
    let _ = std::fs::remove_file(&dst);
    let base_write = timed(&["cp", &src_s, &format!("{base_name}:/tmp/bench-file.bin")])
        .await?
        .as_secs_f64();
    let base_read = timed(&["cp", &format!("{base_name}:/tmp/bench-file.bin"), &dst_s])
        .await?
        .as_secs_f64();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&dst);
    // Leave no writes behind for the next case. `docker cp` does not sync: the file it wrote
    // into the baseline container was still being written back during the first create of the
    // next case, which then waited on the disk for a second or two (its p95).
    let _ = docker(&["exec", base_name, "rm", "-f", "/tmp/bench-file.bin"]).await;
    let _ = tokio::task::spawn_blocking(nix::unistd::sync).await;
    // The ceiling of a write that is whole or absent across a crash: the disk's own speed for
    // the same bytes written and synced, with nothing in between (`docker cp` does not sync).
    let count = format!("count={mib}");
    let disk_write = timed(&[
        "exec",
        base_name,
        "dd",
        "if=/dev/zero",
        "of=/tmp/bench-dd.bin",
        "bs=1M",
        &count,
        "conv=fdatasync",
    ])
    .await?
    .as_secs_f64();
    let _ = docker(&["exec", base_name, "rm", "-f", "/tmp/bench-dd.bin"]).await;

    let mb = mib as f64;
    let w = Row::value(
        &format!("file write {mib} MiB"),
        "MiB/s",
        mb / write_s,
        Some(mb / base_write),
        true,
    );
    let w_met = w.ratio.is_some_and(|r| r >= 1.0);
    let disk = Row::value(
        &format!("file write {mib} MiB vs synced dd"),
        "MiB/s",
        mb / write_s,
        Some(mb / disk_write),
        true,
    );
    let r = Row::value(
        &format!("file read {mib} MiB"),
        "MiB/s",
        mb / read_s,
        Some(mb / base_read),
        true,
    );
    let r_met = r.ratio.is_some_and(|r| r >= 1.0);
    let g = Row::value(
        "server RSS growth during file transfer",
        "MiB",
        growth_mib,
        None,
        false,
    );
    Ok(vec![
        w.target("ratio ≥ 1.0", w_met),
        disk,
        r.target("ratio ≥ 1.0", r_met),
        g.target("≤ 16 MiB", growth_mib <= 16.0),
    ])
}

pub async fn footprint(
    cx: &mut Ctx<'_>,
    id: &str,
    idle_server_kib: u64,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    // The same lookup the Docker driver makes, so this is the binary the sandboxes run.
    if let Ok(bin) = crate::driver::docker::locate_sandboxd(None) {
        let stripped = cx.tmp.join("sandboxd.stripped");
        let ok = tokio::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&bin)
            .status()
            .await
            .is_ok_and(|s| s.success());
        let size =
            std::fs::metadata(if ok { &stripped } else { &bin })?.len() as f64 / (1 << 20) as f64;
        rows.push(
            Row::value("sandboxd size, stripped", "MiB", size, None, false)
                .target("≤ 4 MiB", size <= 4.0),
        );
    }
    let container = format!("{}-{id}", cx.prefix);
    let init: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", &container])
        .await?
        .parse()?;
    // Under --init, sandboxd is the init's child.
    let sandboxd_kib = children(init)
        .into_iter()
        .filter_map(rss_kib)
        .max()
        .or_else(|| rss_kib(init))
        .unwrap_or(0);
    let mib = sandboxd_kib as f64 / 1024.0;
    rows.push(
        Row::value("sandboxd RSS, idle", "MiB", mib, None, false).target("≤ 6 MiB", mib <= 6.0),
    );
    let idle = idle_server_kib as f64 / 1024.0;
    rows.push(
        Row::value("server RSS, idle", "MiB", idle, None, false).target("≤ 64 MiB", idle <= 64.0),
    );
    Ok(rows)
}

pub async fn burst(cx: &mut Ctx<'_>, n: usize) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let client = cx.client();
    let t = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("burst-{i}")).collect();
    let ids = create_all_running(&client, &names).await?;
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
    let met = row.ratio.is_some_and(|r| r <= 1.3);
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
            row.target("all succeed, ratio ≤ 1.3", met),
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
    let label = format!("{}={}", super::docker_cli::BASELINE_LABEL, cx.prefix);
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
    let limit = 64.0 + 0.25 * connected as f64;
    Row::value(
        &format!("server RSS, {connected} agents running"),
        "MiB",
        mib,
        None,
        false,
    )
    .target(&format!("≤ {limit:.1} MiB"), mib <= limit)
}

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
    let row = Row::value(
        &format!("restart: {total} agents, {} running", running.len()),
        "s",
        secs,
        None,
        false,
    );
    Ok(row.target("≤ 3 s", secs <= 3.0))
}
