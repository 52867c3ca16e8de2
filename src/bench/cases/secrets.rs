//! `--case secrets`: what TLS interception for a secret costs. One HTTPS server on loopback (its
//! CA trusted through `sandbox.egress.ca_certificates`) is reached under two names in the same
//! run: [`SECRET_NAME`], which a secret granted to the agent names, so the proxy terminates its TLS
//! and swaps the placeholder; and [`NAME`], spliced untouched, the baseline. Measured with curl in
//! the ready image: a request's first byte on an open connection, the handshake of a new
//! connection, and a large download's throughput.

use anyhow::{bail, Context};

use super::common::until_running;
use super::Ctx;
use crate::api::types::{CreateAgent, EgressRules, ExecBody, PutSecret};
use crate::bench::server_proc::EGRESS_NAME as NAME;
use crate::bench::servers::{https_zeros, SECRET_NAME};
use crate::bench::stats::{percentile, Row};
use crate::bench::target::Bound;

/// The secret's name, as the sandbox's variable holding its placeholder.
const SECRET: &str = "BENCH_API_KEY";

pub async fn secrets(cx: &mut Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let mib: u64 = if cx.quick { 64 } else { 1024 };
    let port = https_zeros(cx.tmp, "127.0.0.1:0", mib << 20).await?;
    let client = cx.client();
    client
        .put_secret(
            SECRET,
            &PutSecret {
                value: "bench-value-never-shown".into(),
                hosts: vec![SECRET_NAME.parse()?],
                header: None,
                format: None,
                in_body: false,
            },
        )
        .await?;
    let mut events = client.events().await?;
    let agent = client
        .create_agent(&CreateAgent {
            name: "secrets".into(),
            image: Some(crate::config::AGENT_IMAGE.into()),
            egress: Some(EgressRules {
                allow: vec![NAME.parse()?, SECRET_NAME.parse()?],
                deny: vec![],
            }),
            secrets: Some(vec![SECRET.into()]),
            ..Default::default()
        })
        .await?;
    until_running(&mut events, &client, std::slice::from_ref(&agent.id)).await?;
    let sh = |script: String| ExecBody {
        command: vec!["bash".into(), "-c".into(), script],
        timeout_ms: Some(600_000),
        ..Default::default()
    };
    let url = |host: &str, path: &str| format!("https://{host}:{port}{path}");
    let auth = format!("-H \"Authorization: Bearer ${SECRET}\"");

    // Each curl opens a connection (its handshake: `time_appconnect`, CONNECT included) and
    // sends a second request on it (its first byte: `time_starttransfer`, no handshake).
    let n = cx.runs * 10;
    let mut timings = Vec::new();
    for host in [SECRET_NAME, NAME] {
        let small = url(host, "/small");
        let script = format!(
            "for i in $(seq {n}); do curl -sS --fail {auth} -o /dev/null -o /dev/null \
             -w '%{{num_connects}} %{{time_appconnect}} %{{time_starttransfer}}\\n' {small} {small} || exit 1; done"
        );
        let r = client.exec(&agent.id, &sh(script)).await?;
        if r.exit_code != 0 {
            bail!("curl to {host} failed: {}", r.stderr);
        }
        let (mut handshake, mut first_byte) = (Vec::new(), Vec::new());
        for line in r.stdout.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(conns), Some(app), Some(start)) = (f.first(), f.get(1), f.get(2)) else {
                continue;
            };
            let (app, start) = (app.parse::<f64>()? * 1e3, start.parse::<f64>()? * 1e3);
            if *conns == "1" {
                handshake.push(app);
            } else {
                first_byte.push(start);
            }
        }
        if handshake.len() != n || first_byte.len() != n {
            bail!("curl to {host} printed {:?}", r.stdout);
        }
        timings.push((handshake, first_byte));
    }
    let [(hs_in, fb_in), (hs_sp, fb_sp)] = <[_; 2]>::try_from(timings)
        .ok()
        .context("two hosts measured")?;

    let mut throughput = Vec::new();
    for host in [SECRET_NAME, NAME] {
        let script = format!(
            "curl -sS --fail {auth} -o /dev/null -w '%{{speed_download}}' {}",
            url(host, "/big")
        );
        let r = client.exec(&agent.id, &sh(script)).await?;
        if r.exit_code != 0 {
            bail!("the download from {host} failed: {}", r.stderr);
        }
        let bytes_per_s: f64 = r.stdout.trim().parse().context("curl's speed")?;
        throughput.push(bytes_per_s / (1024.0 * 1024.0));
    }
    let _ = client.delete_agent(&agent.id).await;
    let _ = client.delete_secret(SECRET).await;
    let added = |ours: &[f64], base: &[f64]| percentile(ours, 0.5) - percentile(base, 0.5);
    Ok(vec![
        Row::times(
            "secrets: request → first byte, intercepted (spliced as baseline)",
            &fb_in,
            Some(&fb_sp),
        )
        .judged(&[Bound::AddsAtP50(2.0)])
        .noted(&format!("added {:.2} ms", added(&fb_in, &fb_sp))),
        Row::times(
            "secrets: a new HTTPS connection's handshake, intercepted (spliced as baseline)",
            &hs_in,
            Some(&hs_sp),
        )
        .noted(&format!("added {:.2} ms", added(&hs_in, &hs_sp))),
        Row::value(
            &format!("secrets: download {mib} MiB through interception (spliced as baseline)"),
            "MiB/s",
            throughput[0],
            Some(throughput[1]),
            true,
        )
        .judged(&[Bound::RatioAtLeast(0.5)]),
    ])
}
