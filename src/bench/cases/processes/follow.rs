//! Following a big output of a background process, against the streamed exec of the same
//! command (see [`following`] for what is measured and why).

use std::time::Instant;

use anyhow::bail;
use serde::Deserialize;

use super::ndjson::{Http, Lines};
use super::{delete_noted, start_noted};
use crate::api::output_lines::line_bytes;
use crate::api::types::process::{Gap, OutputLine, Process, StartProcess};
use crate::api::types::OutputStream;
use crate::bench::cases::Ctx;
use crate::bench::stats::Row;
use crate::bench::target::Bound;
use crate::cli::{ApiClient, ExecBody};

const TARGET: &[Bound] = &[Bound::RatioAtLeast(1.0)];

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
/// benchmark's server keeps the most output there is
/// ([`crate::bench::server_proc::OUTPUT_KIB`], 1 GiB) and the output does not outrun the
/// follower: the figure is the data bytes the follower received per second, from before the
/// POST to the exit line, gap bytes not counted. At a full 1 GiB the log's
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
pub(super) async fn following(
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
    let lost = if f.gaps == 0 {
        "no gaps".to_string()
    } else {
        format!(
            "received {received_mib:.0} MiB; {} gaps skipped {:.0} MiB",
            f.gaps,
            f.lost as f64 / (1 << 20) as f64
        )
    };
    crate::bench::progress(&format!(
        "processes: followed {received_mib:.1} MiB in {:.2} s ({lost}; the process ran {}); \
         the exec stream gave {mib} MiB in {exec_s:.2} s",
        f.secs,
        f.ran_secs
            .map(|s| format!("{s:.2} s"))
            .unwrap_or_else(|| "?".into())
    ));
    Ok(vec![row.judged(TARGET).noted(&lost)])
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
