//! `--case egress`: the egress proxy's throughput against the same download into a plain
//! container on Docker's default bridge, the time it adds to opening a connection, the server's
//! memory during a transfer, and many connections from many sandboxes at once. "The internet" is
//! servers this process runs on loopback under [`NAME`], which the benchmark server's config maps
//! there.
//!
//! Why the bridge is the baseline: a proxied byte crosses the sandbox's bridge and then a loopback
//! hop through the server, on the same two cores, so a download made on the host from loopback
//! (no bridge at all) is a bound no proxy can approach; a container on Docker's bridge reading
//! from the host pays the bridge once, as a sandbox with a route out would.

use std::time::Instant;

use anyhow::{bail, Context};
use tokio::net::TcpListener;

use super::common::{create_all_running_with, RssWatch};
use super::Ctx;
use crate::api::types::EgressRules;
use crate::bench::docker_cli::docker;
use crate::bench::servers::{echo_server, zeros};
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

/// The proxy's throughput against the download into a container on Docker's bridge.
const THROUGHPUT: &[Bound] = &[Bound::RatioAtLeast(0.55)];

/// Times `script` (bash) between two `$EPOCHREALTIME` readings it prints last, in seconds, so
/// that a download is timed where it runs, without the exec around it.
fn timed_script(script: &str) -> String {
    format!("t0=$EPOCHREALTIME\n{script}\nt1=$EPOCHREALTIME\necho \"took ${{t0/./}} ${{t1/./}}\"")
}

/// The seconds [`timed_script`] printed.
fn took(stdout: &str) -> anyhow::Result<f64> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("took "))
        .context("the timed download printed no time")?;
    let mut f = line.split_whitespace().map(str::parse::<f64>);
    match (f.next(), f.next()) {
        (Some(Ok(a)), Some(Ok(b))) => Ok((b - a) / 1e6),
        _ => bail!("cannot read the download's time from {line:?}"),
    }
}

pub async fn egress(cx: &mut Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let mib: u64 = if cx.quick { 64 } else { 1024 };
    let web = zeros_server("127.0.0.1:0", mib << 20).await?;
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

    // The download through the proxy from the sandbox, same tool as the baseline's.
    let through = format!(
        "{FNS}\nproxy_addr\n{}",
        timed_script(&format!("get \"$PH\" \"$PP\" http://{NAME}:{web}/ {NAME}"))
    );
    let sh = |script: &str| ExecBody {
        command: vec!["bash".into(), "-c".into(), script.into()],
        timeout_ms: Some(600_000),
        ..Default::default()
    };
    let before = cx.server.rss_kib().unwrap_or(0);
    let watch = RssWatch::start(cx.server.pid().context("the server has exited")?);
    let r = client.exec(&id, &sh(&through)).await?;
    let peak = watch.peak_kib();
    if r.exit_code != 0 {
        bail!("the download through the proxy failed: {}", r.stderr);
    }
    let ours_s = took(&r.stdout)?;
    // The same download inside a CONNECT tunnel (how HTTPS, git and most tools go out), which
    // the proxy relays between the two sockets without reading the bytes.
    let tunnelled = format!(
        "{FNS}\nproxy_addr\n{}",
        timed_script(&format!("tunnel {NAME} {web}"))
    );
    let r = client.exec(&id, &sh(&tunnelled)).await?;
    if r.exit_code != 0 {
        bail!("the download through a CONNECT tunnel failed: {}", r.stderr);
    }
    let tunnel_s = took(&r.stdout)?;
    let base_s = bridge_download(cx, mib).await?;
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

/// The first IPv4 address of the host's interface `name`.
fn interface_ipv4(name: &str) -> Option<std::net::Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|i| i.interface_name == name)
        .find_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip()))
}

/// The baseline: the same download, same tool, in a plain container on Docker's default bridge
/// from a server on the host's address on that bridge. Returns its seconds.
async fn bridge_download(cx: &Ctx<'_>, mib: u64) -> anyhow::Result<f64> {
    let gateway = docker(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{range .IPAM.Config}}{{.Gateway}} {{end}}",
    ])
    .await?;
    let listed = gateway
        .split_whitespace()
        .find(|g| g.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string);
    // An engine that found its bridge's interface already up lists no gateway: the host's
    // address on that interface is the gateway all the same.
    let gateway = match listed {
        Some(g) => g,
        None => {
            let iface = docker(&[
                "network",
                "inspect",
                "bridge",
                "--format",
                "{{index .Options \"com.docker.network.bridge.name\"}}",
            ])
            .await?;
            match interface_ipv4(iface.trim()) {
                Some(a) => a.to_string(),
                None => bail!(
                    "Docker's default bridge has no IPv4 gateway ({gateway:?}) and its interface \
                     {iface:?} no IPv4 address: no baseline to measure"
                ),
            }
        }
    };
    let web = zeros_server(&format!("{gateway}:0"), mib << 20).await?;
    let name = format!("{}-base-egress", cx.prefix);
    // One left by a run that was killed would take the name.
    let _ = docker(&["rm", "-f", &name]).await;
    docker(&[
        "run",
        "-d",
        "--init",
        "--network",
        "bridge",
        "--name",
        &name,
        cx.image,
        "sleep",
        "infinity",
    ])
    .await?;
    let script = format!(
        "{FNS}\n{}",
        timed_script(&format!("get {gateway} {web} / {NAME}"))
    );
    let out = docker(&["exec", &name, "bash", "-c", &script]).await;
    let _ = docker(&["rm", "-f", &name]).await;
    took(&out.context("the download into a container on Docker's bridge")?)
}

/// An HTTP server on `addr` answering every request with `bytes` zero bytes, streamed.
async fn zeros_server(addr: &str, bytes: u64) -> anyhow::Result<u16> {
    let listener = TcpListener::bind(addr).await?;
    let port = listener.local_addr()?.port();
    let chunk = bytes::Bytes::from(vec![0u8; 1 << 20]);
    let app = axum::Router::new().fallback(move || {
        let chunk = chunk.clone();
        async move { zeros(chunk, bytes) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(port)
}
