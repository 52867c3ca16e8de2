//! `--case files`: a file written and read through the file API, against `docker cp` (and the
//! write against a synced `dd`), and the server's RSS growth meanwhile.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::common::RssWatch;
use super::Ctx;
use crate::bench::docker_cli::{docker, timed};
use crate::bench::server_proc::rss_kib;
use crate::bench::stats::Row;
use crate::bench::target::Bound;

const TRANSFER: &[Bound] = &[Bound::RatioAtLeast(1.0)];
const GROWTH: &[Bound] = &[Bound::AtMost(16.0)];

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
    let g = Row::value(
        "server RSS growth during file transfer",
        "MiB",
        growth_mib,
        None,
        false,
    );
    Ok(vec![
        w.judged(TRANSFER),
        disk,
        r.judged(TRANSFER),
        g.judged(GROWTH),
    ])
}
