//! `--case processes`: background processes (`/api/v1/agents/{id}/processes…`). How soon a
//! started process's first byte reaches a follower, against the streamed exec's first byte; how
//! fast a follower receives a big output, against the streamed exec of the same command; and
//! what 100 running processes cost sandboxd, against its own idle figure. Every process started
//! here is deleted at the end, also when a step fails.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Deserialize;

use super::cases::Ctx;
use super::docker_cli::docker;
use super::server_proc::{children, rss_kib};
use super::stats::{ms, percentile, Row};
use crate::api::output_lines::line_bytes;
use crate::api::types::process::{Gap, OutputLine, Process, StartProcess};
use crate::api::types::OutputStream;
use crate::cli::{ApiClient, ExecBody, ExecEvent, OutputEvent};

/// How many `sleep` processes the memory row runs at once (`sandbox.max_processes` is 128 by
/// default).
const HELD: usize = 100;
/// The most sandboxd may grow per running process for the memory row to pass.
const GROWTH_PER_PROCESS_KIB: f64 = 64.0;
/// `sandbox.process_output_kb` of the benchmark's server: the most there is (1 GiB), so a
/// follower of the biggest output measured here is never skipped ahead (see [`following`]).
/// Kept on the sandbox's disk, not in memory, and only by processes that write that much.
pub const OUTPUT_KIB: u64 = agenthold_proto::process::MAX_OUTPUT / 1024;

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
    let memory = held_processes(cx, client, id, started).await?;
    let first = first_byte(cx, client, id, started).await?;
    let follow = following(cx, client, id, started).await?;
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

/// Start → first output byte: POST the process, then follow its output from offset 0 until the
/// first data byte, timed from before the POST. The baseline is the same command's first byte
/// through the streamed exec (one request instead of two).
async fn first_byte(
    cx: &Ctx<'_>,
    client: &ApiClient,
    id: &str,
    started: &mut Vec<String>,
) -> anyhow::Result<Row> {
    let n = cx.runs * 10;
    let req = start(&["echo", "x"]);
    let exec = ExecBody {
        command: req.command.clone(),
        ..Default::default()
    };
    let mut ours = Vec::with_capacity(n);
    let mut base = Vec::with_capacity(n);
    // Where the time goes: the POST (sandboxd starts the shim, which starts the command and
    // reports its pid), and the GET until the first byte.
    let mut posts = Vec::with_capacity(n);
    // One warm-up of each.
    for i in 0..=n {
        let t = Instant::now();
        let p = start_noted(client, id, &req, started).await?;
        let posted = ms(t.elapsed());
        let mut out = client.process_output(id, &p.id, 0, true).await?;
        loop {
            match out.next().await {
                Some(Ok(OutputEvent::Line(l))) => match l {
                    OutputLine::Exit { exit } => {
                        bail!("`echo x` ended without output: {:?}", exit.state)
                    }
                    l if line_bytes(&l).is_some_and(|(_, _, b)| !b.is_empty()) => break,
                    _ => {}
                },
                Some(Ok(OutputEvent::Cut(why))) => bail!("the output stream was cut: {why}"),
                Some(Err(e)) => return Err(e.into()),
                None => bail!("the output stream ended without output"),
            }
        }
        let took = ms(t.elapsed());
        drop(out);
        delete_noted(client, id, &p.id, started).await?;

        let t = Instant::now();
        let mut s = client.exec_stream(id, &exec).await?;
        loop {
            match s.next().await {
                Some(Ok(ExecEvent::Output { data, .. })) if !data.is_empty() => break,
                Some(Ok(ExecEvent::Exit(e))) => {
                    bail!("exec `echo x` ended without output ({})", e.exit_code)
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => bail!("the exec stream ended without output"),
            }
        }
        let exec_took = ms(t.elapsed());
        // The rest of the stream (its exit line), so the next exec starts on a quiet sandbox.
        while let Some(ev) = s.next().await {
            ev?;
        }
        if i > 0 {
            ours.push(took);
            posts.push(posted);
            base.push(exec_took);
        }
    }
    let p50 = |v: &[f64]| percentile(v, 0.5);
    super::progress(&format!(
        "processes: start → first byte, p50 {:.2} ms: the POST {:.2} ms, then the output's GET \
         until the first byte {:.2} ms; a streamed exec's first byte {:.2} ms",
        p50(&ours),
        p50(&posts),
        p50(&ours
            .iter()
            .zip(&posts)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>()),
        p50(&base)
    ));
    let row = Row::times("process start → first output byte", &ours, Some(&base));
    let met = row.ours_p50 <= 5.0;
    Ok(row.target("p50 ≤ 5 ms", met))
}

/// What following one process's output from offset 0 until its exit line delivered.
struct Followed {
    /// Bytes of data lines received.
    data: u64,
    /// Bytes skipped over in gaps: output that left sandboxd's buffer before the reader got to
    /// it.
    lost: u64,
    gaps: usize,
    secs: f64,
    /// How long the process itself ran, by its own start and end times.
    ran_secs: Option<f64>,
}

/// Following a big output, against the streamed exec of the same command.
///
/// What is measured, and why: a background process does not wait for its readers. It writes
/// into a pipe that sandboxd drains into the process's log on disk whatever any reader does,
/// keeping the last `sandbox.process_output_kb`; a follower that falls further behind is told
/// so with a gap and goes on from the oldest byte still kept. With the default 4 MiB, `head`
/// writes the whole output long before a follower has read it, and the follower receives a few
/// MiB: counting the gaps as delivered would report the writer's speed as the follower's, and
/// counting only what arrived would time a race of a few MiB against the writer. So the
/// benchmark's server keeps the most output there is ([`OUTPUT_KIB`], 1 GiB) and the output
/// does not outrun the follower: the figure is the data bytes the follower received per second,
/// from before the POST to the exit line, gap bytes not counted. At a full 1 GiB the log's
/// record heads take it just past its budget, so its oldest segment (an eighth) goes near the
/// end; a follower still inside it is skipped ahead, and the row says how much that skipped.
/// The exec stream holds its command back when its reader is slow, so everything arrives there;
/// its figure is bytes received per second from before its POST to its exit line.
///
/// Both streams are decoded here the same way ([`Lines`], then one serde struct per line) and
/// not with the CLI client's decoders: that one tries each output line as an error body and
/// then as the untagged [`OutputLine`], which on this output costs 2.3 times the exec stream's
/// decoding, and the client's decoding is what bounds both figures here (each NUL byte is six
/// bytes of JSON, `\u0000`).
async fn following(
    cx: &Ctx<'_>,
    client: &ApiClient,
    id: &str,
    started: &mut Vec<String>,
) -> anyhow::Result<Vec<Row>> {
    let mib: u64 = if cx.quick { 128 } else { 1024 };
    let bytes = mib << 20;
    let command = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("head -c {bytes} /dev/zero"),
    ];
    let http = Http::new(cx, client)?;

    let t = Instant::now();
    let exec = ExecBody {
        command: command.clone(),
        timeout_ms: Some(600_000),
        ..Default::default()
    };
    let resp = http
        .send(
            http.post(&["agents", id, "exec"])
                .header(reqwest::header::ACCEPT, "application/x-ndjson")
                .json(&exec),
        )
        .await?;
    let mut exec_bytes = 0u64;
    let mut exit = None;
    let mut lines = Lines::new(resp);
    while let Some(line) = lines.next().await? {
        let l: ExecPiece = serde_json::from_slice(&line)?;
        if let Some(e) = l.error {
            bail!("the exec stream failed: {e}");
        }
        if let Some(d) = l.data {
            exec_bytes += d.len() as u64;
        } else if l.exit_code.is_some() {
            exit = l.exit_code;
            break;
        }
    }
    let exec_s = t.elapsed().as_secs_f64();
    if exit != Some(0) || exec_bytes != bytes {
        bail!("the streamed exec gave {exec_bytes} of {bytes} bytes, exit {exit:?}");
    }

    let f = follow_one(&http, client, id, command, bytes, started).await?;
    let received_mib = f.data as f64 / (1 << 20) as f64;
    let ours = received_mib / f.secs;
    let base = exec_bytes as f64 / (1 << 20) as f64 / exec_s;
    let row = Row::value(
        &format!("following {mib} MiB of a process's output (1 GiB kept, not the default 4 MiB)"),
        "MiB/s",
        ours,
        Some(base),
        true,
    );
    let met = row.ratio.is_some_and(|r| r >= 1.0);
    let lost = if f.gaps == 0 {
        "no gaps".to_string()
    } else {
        format!(
            "received {received_mib:.0} MiB; {} gaps skipped {:.0} MiB",
            f.gaps,
            f.lost as f64 / (1 << 20) as f64
        )
    };
    super::progress(&format!(
        "processes: followed {received_mib:.1} MiB in {:.2} s ({lost}; the process ran {}); \
         the exec stream gave {mib} MiB in {exec_s:.2} s",
        f.secs,
        f.ran_secs
            .map(|s| format!("{s:.2} s"))
            .unwrap_or_else(|| "?".into())
    ));
    Ok(vec![row.target(&format!("ratio ≥ 1.0 ({lost})"), met)])
}

async fn follow_one(
    http: &Http,
    client: &ApiClient,
    id: &str,
    command: Vec<String>,
    bytes: u64,
    started: &mut Vec<String>,
) -> anyhow::Result<Followed> {
    let req = StartProcess {
        command,
        ..Default::default()
    };
    let t = Instant::now();
    let p = start_noted(client, id, &req, started).await?;
    let resp = http
        .send(
            http.get(&["agents", id, "processes", &p.id, "output"])
                .query(&[("offset", "0"), ("follow", "true")])
                .header(reqwest::header::ACCEPT, "application/x-ndjson"),
        )
        .await?;
    let mut f = Followed {
        data: 0,
        lost: 0,
        gaps: 0,
        secs: 0.0,
        ran_secs: None,
    };
    // The offset of the next byte; every line must start there (or a gap move it on).
    let mut at = 0u64;
    let mut ended: Option<Box<Process>> = None;
    let mut lines = Lines::new(resp);
    while let Some(line) = lines.next().await? {
        let l: OutputPiece = serde_json::from_slice(&line)?;
        let (offset, len) = match l {
            OutputPiece { error: Some(e), .. } => bail!("the output stream was cut at {at}: {e}"),
            OutputPiece {
                exit: Some(exit), ..
            } => {
                ended = Some(exit);
                break;
            }
            OutputPiece { gap: Some(gap), .. } => {
                if gap.from != at || gap.to < gap.from {
                    bail!(
                        "a gap {}..{} where the output was at {at}",
                        gap.from,
                        gap.to
                    );
                }
                f.gaps += 1;
                f.lost += gap.to - gap.from;
                at = gap.to;
                continue;
            }
            // Text (all of it here: NUL bytes are UTF-8) is counted as it is.
            OutputPiece {
                offset: Some(offset),
                data: Some(data),
                ..
            } => (offset, data.len() as u64),
            OutputPiece {
                offset: Some(offset),
                data64: Some(data64),
                ..
            } => {
                let line = OutputLine::Bytes {
                    offset,
                    stream: OutputStream::Stdout,
                    data64,
                };
                match line_bytes(&line) {
                    Some((_, _, b)) => (offset, b.len() as u64),
                    None => bail!("base64 that does not decode at {at}"),
                }
            }
            _ => continue,
        };
        if offset != at {
            bail!("a line at offset {offset} where the output was at {at}");
        }
        at += len;
        f.data += len;
    }
    f.secs = t.elapsed().as_secs_f64();
    drop(lines);
    let Some(exit) = ended else {
        bail!("the output stream ended without an exit line, at {at}");
    };
    let time = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    if let (Some(a), Some(b)) = (
        time(&exit.started_at),
        exit.ended_at.as_deref().and_then(time),
    ) {
        f.ran_secs = Some((b - a).num_milliseconds() as f64 / 1000.0);
    }
    if exit.exit_code != Some(0) || exit.output_bytes != bytes || at != bytes {
        bail!(
            "the process ended {:?} (exit {:?}) with {} bytes of output, followed to {at} of {bytes}",
            exit.state,
            exit.exit_code,
            exit.output_bytes
        );
    }
    delete_noted(client, id, &p.id, started).await?;
    Ok(f)
}

/// One line of the exec stream, whichever kind ([`crate::api::types::ExecLine`] is not
/// `Deserialize`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecPiece {
    data: Option<String>,
    exit_code: Option<i32>,
    error: Option<serde_json::Value>,
}

/// One line of a process's output, whichever kind ([`OutputLine`]'s fields in one struct:
/// deserializing the untagged enum buffers each line before trying its variants).
#[derive(Deserialize)]
struct OutputPiece {
    offset: Option<u64>,
    data: Option<String>,
    data64: Option<String>,
    gap: Option<Gap>,
    exit: Option<Box<Process>>,
    error: Option<serde_json::Value>,
}

/// Plain HTTP to the benchmark's server, for the streams read with [`Lines`].
struct Http {
    http: reqwest::Client,
    client: ApiClient,
    token: String,
}

impl Http {
    fn new(cx: &Ctx<'_>, client: &ApiClient) -> anyhow::Result<Http> {
        Ok(Http {
            http: reqwest::Client::builder().no_proxy().build()?,
            client: client.clone(),
            token: cx.server.token.clone(),
        })
    }

    fn get(&self, segments: &[&str]) -> reqwest::RequestBuilder {
        self.http
            .get(self.client.api_url(segments))
            .bearer_auth(&self.token)
    }

    fn post(&self, segments: &[&str]) -> reqwest::RequestBuilder {
        self.http
            .post(self.client.api_url(segments))
            .bearer_auth(&self.token)
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let resp = rb.send().await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            bail!("{status}: {body}");
        }
        Ok(resp)
    }
}

/// An NDJSON response, line by line (blank lines skipped).
struct Lines {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    /// How much of `buf` was searched for a newline already, without one.
    searched: usize,
}

impl Lines {
    fn new(resp: reqwest::Response) -> Lines {
        Lines {
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
            searched: 0,
        }
    }

    async fn next(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        loop {
            if let Some(i) = self.buf[self.searched..].iter().position(|&b| b == b'\n') {
                let end = self.searched + i;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                self.searched = 0;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            self.searched = self.buf.len();
            match self.body.next().await {
                Some(chunk) => self.buf.extend_from_slice(&chunk?),
                None if self.buf.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                None => return Ok(Some(std::mem::take(&mut self.buf))),
            }
        }
    }
}

/// sandboxd's pid in agent `id`'s container (under `--init` it is the init's child), found as
/// `footprint` finds it.
async fn sandboxd_pid(cx: &Ctx<'_>, id: &str) -> anyhow::Result<u32> {
    let container = format!("{}-{id}", cx.prefix);
    let init: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", &container])
        .await?
        .parse()?;
    Ok(children(init)
        .into_iter()
        .max_by_key(|&p| rss_kib(p).unwrap_or(0))
        .unwrap_or(init))
}

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
async fn held_processes(
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

    let per = (with as f64 - idle as f64) / HELD as f64;
    let mut rows = vec![Row::value(
        &format!("sandboxd RSS, {HELD} processes running (against idle)"),
        "KiB",
        with as f64,
        Some(idle as f64),
        false,
    )
    .target(
        &format!("≤ {GROWTH_PER_PROCESS_KIB:.0} KiB more each (grew {per:.1} KiB each)"),
        per <= GROWTH_PER_PROCESS_KIB,
    )];
    if shim_pids.len() != HELD {
        super::progress(&format!(
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
