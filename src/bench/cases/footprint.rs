//! `--case footprint`: sandboxd's size and idle RSS, and the server's idle RSS.

use super::common::sandboxd_pid;
use super::Ctx;
use crate::bench::server_proc::rss_kib;
use crate::bench::stats::Row;
use crate::bench::target::Bound;

/// The most the server may take idle, in MiB (also the base of the burst's RSS target).
pub const SERVER_IDLE_MIB: f64 = 64.0;

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
        // 6 MiB since the code kernels: ZeroMQ and the Jupyter message types took it from 3.4
        // to 5.4 MiB (it is copied into each sandbox once, and shared read-only).
        rows.push(
            Row::value("sandboxd size, stripped", "MiB", size, None, false)
                .judged(&[Bound::AtMost(6.0)]),
        );
    }
    let sandboxd_kib = rss_kib(sandboxd_pid(cx, id).await?).unwrap_or(0);
    let mib = sandboxd_kib as f64 / 1024.0;
    rows.push(
        Row::value("sandboxd RSS, idle", "MiB", mib, None, false).judged(&[Bound::AtMost(6.0)]),
    );
    let idle = idle_server_kib as f64 / 1024.0;
    rows.push(
        Row::value("server RSS, idle", "MiB", idle, None, false)
            .judged(&[Bound::AtMost(SERVER_IDLE_MIB)]),
    );
    Ok(rows)
}
