//! `--case egress`: the egress proxy's throughput against the same download made directly on the
//! host, the time it adds to opening a connection, the server's memory during a transfer, and
//! many connections from many sandboxes at once. "The internet" is servers this process runs on
//! loopback under [`NAME`], which the benchmark server's config maps there.

use std::time::Instant;

use anyhow::{bail, Context};
use tokio::net::TcpListener;

use super::common::{create_all_running_with, RssWatch};
use super::Ctx;
use crate::api::types::EgressRules;
use crate::bench::servers::echo_server;
use crate::bench::stats::{ms, percentile, Row};
use crate::bench::target::Bound;
use crate::cli::ExecBody;

use crate::bench::server_proc::EGRESS_NAME as NAME;

/// Bash functions for the sandbox (the image need have nothing but bash): `proxy_addr` reads
/// `$HTTP_PROXY`, `head` skips an answer's headers on fd 3, `get ADDR PORT TARGET HOST` downloads
/// (through the proxy when ADDR:PORT is the proxy and TARGET a whole URL), `tunnel HOST PORT`
/// downloads through a `CONNECT` tunnel (after `proxy_addr`).
const FNS: &str = r#"
proxy_addr() { local hp="${HTTP_PROXY#http://}"; PH="${hp%:*}"; PP="${hp##*:}"; }
head() { local l; while IFS= read -r l <&3; do [ "${l%$'\r'}" = "" ] && return; done; }
get() { exec 3<>"/dev/tcp/$1/$2" || exit 1; printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$3" "$4" >&3; cat <&3 >/dev/null; exec 3<&-; }
tunnel() { local s; exec 3<>"/dev/tcp/$PH/$PP" || exit 1; printf 'CONNECT %s:%s HTTP/1.1\r\n\r\n' "$1" "$2" >&3; IFS= read -r s <&3; case "$s" in *' 200 '*) ;; *) echo "refused: $s" >&2; exit 1;; esac; head; printf 'GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" >&3; cat <&3 >/dev/null; exec 3<&-; }
"#;

/// The proxy's throughput against the direct download's.
const THROUGHPUT: &[Bound] = &[Bound::RatioAtLeast(0.9)];

pub async fn egress(cx: &mut Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let mib: u64 = if cx.quick { 64 } else { 1024 };
    let web = zeros_server(mib << 20).await?;
    let echo = echo_server("127.0.0.1:0", b"").await?;
    let client = cx.server.client.clone();
    let rules = EgressRules {
        allow: vec![NAME.parse()?],
        deny: vec![],
    };
    let sandboxes = if cx.quick { 2 } else { 10 };
    let names: Vec<String> = (0..sandboxes).map(|i| format!("egress{i}")).collect();
    let ids = create_all_running_with(&client, &names, Some(rules)).await?;
    let id = ids.first().context("no agent")?.clone();

    // The download, through the proxy from the sandbox and directly on the host, same tool.
    let through = format!("{FNS}\nproxy_addr; get \"$PH\" \"$PP\" http://{NAME}:{web}/ {NAME}");
    let direct = format!("{FNS}\nget 127.0.0.1 {web} / {NAME}");
    let sh = |script: &str| ExecBody {
        command: vec!["bash".into(), "-c".into(), script.into()],
        timeout_ms: Some(600_000),
        ..Default::default()
    };
    let before = cx.server.rss_kib().unwrap_or(0);
    let watch = RssWatch::start(cx.server.pid().context("the server has exited")?);
    let t = Instant::now();
    let r = client.exec(&id, &sh(&through)).await?;
    let ours_s = t.elapsed().as_secs_f64();
    let peak = watch.peak_kib();
    if r.exit_code != 0 {
        bail!("the download through the proxy failed: {}", r.stderr);
    }
    // The same download inside a CONNECT tunnel (how HTTPS, git and most tools go out), which
    // the proxy relays between the two sockets without reading the bytes.
    let tunnelled = format!("{FNS}\nproxy_addr; tunnel {NAME} {web}");
    let t = Instant::now();
    let r = client.exec(&id, &sh(&tunnelled)).await?;
    let tunnel_s = t.elapsed().as_secs_f64();
    if r.exit_code != 0 {
        bail!("the download through a CONNECT tunnel failed: {}", r.stderr);
    }
    let t = Instant::now();
    let out = tokio::process::Command::new("bash")
        .args(["-c", &direct])
        .output()
        .await?;
    let base_s = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "the direct download failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mb = mib as f64;
    let download = Row::value(
        &format!("download {mib} MiB through the egress proxy"),
        "MiB/s",
        mb / ours_s,
        Some(mb / base_s),
        true,
    );
    let tunnel = Row::value(
        &format!("download {mib} MiB through a CONNECT tunnel"),
        "MiB/s",
        mb / tunnel_s,
        Some(mb / base_s),
        true,
    );
    let growth_mib = peak.saturating_sub(before) as f64 / 1024.0;

    // The time the proxy adds to opening a connection: CONNECT and its answer, against a bare
    // TCP connect to the proxy, both timed inside the sandbox.
    let n = cx.runs * 20;
    let timing = format!(
        "{FNS}\nproxy_addr\n\
         for i in $(seq {n}); do t0=$EPOCHREALTIME; exec 3<>\"/dev/tcp/$PH/$PP\"; exec 3<&-; t1=$EPOCHREALTIME; echo \"tcp ${{t0/./}} ${{t1/./}}\"; done\n\
         for i in $(seq {n}); do t0=$EPOCHREALTIME; exec 3<>\"/dev/tcp/$PH/$PP\"; printf 'CONNECT {NAME}:{echo} HTTP/1.1\\r\\n\\r\\n' >&3; \
         IFS= read -r s <&3; head; t1=$EPOCHREALTIME; exec 3<&-; \
         case \"$s\" in *' 200 '*) ;; *) echo \"refused: $s\" >&2; exit 1;; esac; echo \"connect ${{t0/./}} ${{t1/./}}\"; done\n"
    );
    let r = client.exec(&id, &sh(&timing)).await?;
    if r.exit_code != 0 {
        bail!("timing connections through the proxy failed: {}", r.stderr);
    }
    let mut tcp = Vec::new();
    let mut connect = Vec::new();
    for line in r.stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(kind), Some(a), Some(b)) = (f.first(), f.get(1), f.get(2)) else {
            continue;
        };
        let us = b.parse::<f64>()? - a.parse::<f64>()?;
        match *kind {
            "tcp" => tcp.push(us / 1000.0),
            _ => connect.push(us / 1000.0),
        }
    }
    let added = percentile(&connect, 0.5) - percentile(&tcp, 0.5);
    let opening = Row::times(
        "open a connection through the proxy (CONNECT)",
        &connect,
        Some(&tcp),
    );

    // Twenty tunnels at once from each sandbox, each carrying a line there and back.
    let burst = format!(
        "{FNS}\nproxy_addr\n\
         for i in $(seq 20); do ( exec 3<>\"/dev/tcp/$PH/$PP\"; printf 'CONNECT {NAME}:{echo} HTTP/1.1\\r\\n\\r\\n' >&3; \
         IFS= read -r s <&3; head; echo hi >&3; IFS= read -r back <&3; [ \"$back\" = hi ] && echo ok ) & done; wait\n"
    );
    let t = Instant::now();
    let burst = sh(&burst);
    let outs = futures::future::try_join_all(ids.iter().map(|id| client.exec(id, &burst))).await?;
    let burst_ms = ms(t.elapsed());
    let ok: usize = outs
        .iter()
        .map(|o| o.stdout.lines().filter(|l| *l == "ok").count())
        .sum();
    let total = sandboxes * 20;
    for id in &ids {
        let _ = client.delete_agent(id).await;
    }
    Ok(vec![
        download.judged(THROUGHPUT),
        tunnel.judged(THROUGHPUT),
        Row::value(
            "server RSS growth during the proxied download",
            "MiB",
            growth_mib,
            None,
            false,
        )
        .judged(&[Bound::AtMost(16.0)]),
        opening
            .judged(&[Bound::AddsAtP50(1.0)])
            .noted(&format!("added {added:.2} ms")),
        Row::value(
            &format!("{total} tunnels at once from {sandboxes} sandboxes"),
            "ms",
            burst_ms,
            None,
            false,
        )
        .judged(&[Bound::All {
            what: "carry data",
            done: ok,
            of: total,
        }]),
    ])
}

/// An HTTP server on loopback answering every request with `bytes` zero bytes, streamed.
async fn zeros_server(bytes: u64) -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let chunk = bytes::Bytes::from(vec![0u8; 1 << 20]);
    let app = axum::Router::new().fallback(move || {
        let chunk = chunk.clone();
        async move {
            let full = bytes / chunk.len() as u64;
            let rest = (bytes % chunk.len() as u64) as usize;
            let mut parts: Vec<bytes::Bytes> = vec![chunk.clone(); full as usize];
            if rest > 0 {
                parts.push(chunk.slice(..rest));
            }
            let stream = futures::stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
            axum::response::Response::builder()
                .header("content-length", bytes)
                .body(axum::body::Body::from_stream(stream))
                .unwrap_or_default()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(port)
}
