//! `--case previews`: an app served inside a sandbox, reached through a preview (issue #31). The
//! app is `scripts/preview-app.py` (Python's standard library), so the agent is of the ready
//! image, which has python3 ([`crate::config::AGENT_IMAGE`]). Each figure against a baseline of
//! the same run:
//! - request → first byte of the answer through the preview, against the same request made
//!   inside the sandbox on its loopback ([`first_byte`]);
//! - a 1 GiB file downloaded through the preview (served by `python3 -m http.server`), against
//!   `docker cp` of the same file out of the container;
//! - 100 WebSockets open at once through the preview, each echoing messages one after another:
//!   the round trip ([`websockets`]).
//!
//! The agent, its processes and its preview go at the end, also after a failure.

mod first_byte;
mod websockets;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;

use super::common::until_running;
use super::Ctx;
use crate::api::types::process::StartProcess;
use crate::bench::stats::{percentile, Row};
use crate::bench::target::Bound;
use crate::cli::{ApiClient, CreateAgent, ExecBody};

/// The app, copied into the sandbox's home.
const APP: &str = include_str!("../../../../scripts/preview-app.py");
/// Where the app listens in the sandbox, and where `python3 -m http.server` serves the file.
const APP_PORT: u16 = 8080;
const FILES_PORT: u16 = 8081;
/// The agent's home in the ready image, where everything here runs.
const HOME: &str = "/home/agent";
/// The file downloaded both ways, in the agent's home.
const BIG_FILE: &str = "bench-preview.bin";

/// The most a preview may add to the first byte's time, at p50, in ms.
const ADDS_AT_P50_MS: f64 = 1.0;
/// A download through a preview against `docker cp` out of the container.
const DOWNLOAD: &[Bound] = &[Bound::RatioAtLeast(1.0)];

/// The API calls of previews, which the CLI's client does not make.
struct PreviewApi {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl PreviewApi {
    fn new(base: &str, token: &str) -> anyhow::Result<PreviewApi> {
        Ok(PreviewApi {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let mut rb = self
            .http
            .request(method.clone(), format!("{}/api/v1/{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!("{method} {path}: {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    }

    /// Waits until `port` listens in agent `id`'s sandbox.
    async fn until_listening(&self, id: &str, port: u16) -> anyhow::Result<()> {
        let deadline = Instant::now() + super::STEP_DEADLINE;
        loop {
            let ports = self
                .call(reqwest::Method::GET, &format!("agents/{id}/ports"), None)
                .await?;
            if ports
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["port"] == port))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("nothing listened on port {port} in the sandbox: {ports}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A public preview of `port`: its host (`{port}-{agent}.localhost:{listener port}`).
    async fn preview(&self, id: &str, port: u16) -> anyhow::Result<String> {
        let p = self
            .call(
                reqwest::Method::POST,
                &format!("agents/{id}/previews"),
                Some(serde_json::json!({"port": port, "access": "public"})),
            )
            .await?;
        let url = p["url"].as_str().context("a preview's url")?;
        url.strip_prefix("http://")
            .and_then(|u| u.strip_suffix('/'))
            .map(str::to_string)
            .with_context(|| format!("a preview URL of the form http://HOST/: {url}"))
    }
}

/// A background process running `command` in the home.
fn start(command: &[&str]) -> StartProcess {
    StartProcess {
        command: command.iter().map(|s| s.to_string()).collect(),
        cwd: Some(HOME.into()),
        ..Default::default()
    }
}

pub async fn previews(cx: &mut Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let client = cx.client();
    let api = PreviewApi::new(&cx.server.base, &cx.server.token)?;
    let mut events = client.events().await?;
    let id = client
        .create_agent(&CreateAgent {
            name: "previews".into(),
            image: Some(crate::config::AGENT_IMAGE.into()),
            ..Default::default()
        })
        .await?
        .id;
    let rows = async {
        until_running(&mut events, &client, std::slice::from_ref(&id)).await?;
        drop(events);
        measure(cx, &client, &api, &id).await
    }
    .await;
    // The agent takes its processes and previews with it.
    let _ = client.delete_agent(&id).await;
    rows
}

async fn measure(
    cx: &mut Ctx<'_>,
    client: &ApiClient,
    api: &PreviewApi,
    id: &str,
) -> anyhow::Result<Vec<Row>> {
    let listener = cx.server.previews;
    client.fs_write(id, "preview-app.py", APP).await?;
    let port = APP_PORT.to_string();
    client
        .start_process(
            id,
            &start(&["python3", "preview-app.py", &port, "127.0.0.1"]),
        )
        .await?;
    api.until_listening(id, APP_PORT).await?;
    let host = api.preview(id, APP_PORT).await?;

    crate::bench::progress("previews: first byte, through the preview and inside the sandbox");
    let samples = if cx.quick { 300 } else { 2000 };
    let (ours, inside) =
        first_byte::through_and_inside(client, id, listener, &host, APP_PORT, samples).await?;
    let added = percentile(&ours, 0.5) - percentile(&inside, 0.5);
    let ttfb = Row::times(
        "request → first byte through a preview",
        &ours,
        Some(&inside),
    )
    .judged(&[Bound::AddsAtP50(ADDS_AT_P50_MS)])
    .noted(&format!("added {added:.2} ms"));

    let (sockets, rounds) = if cx.quick { (100, 10) } else { (100, 100) };
    crate::bench::progress(&format!(
        "previews: {sockets} WebSockets at once, {rounds} echoes each"
    ));
    let ws = websockets::echoes(listener, &host, sockets, rounds).await?;

    let mib: u64 = if cx.quick { 128 } else { 1024 };
    crate::bench::progress(&format!(
        "previews: a {mib} MiB file, downloaded and copied out"
    ));
    let download = download(cx, client, api, id, listener, mib).await?;
    Ok(vec![ttfb, ws, download])
}

/// A `mib` MiB file made in the sandbox, downloaded through a preview of `python3 -m
/// http.server` and copied out with `docker cp`, both to nowhere; MiB/s each way.
async fn download(
    cx: &Ctx<'_>,
    client: &ApiClient,
    api: &PreviewApi,
    id: &str,
    listener: SocketAddr,
    mib: u64,
) -> anyhow::Result<Row> {
    let made = client
        .exec(
            id,
            &ExecBody {
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    format!("head -c {mib}M /dev/zero > {BIG_FILE} && sync"),
                ],
                cwd: Some(HOME.into()),
                timeout_ms: Some(600_000),
                ..Default::default()
            },
        )
        .await?;
    if made.exit_code != 0 {
        bail!("making the file failed: {}", made.stderr);
    }
    let port = FILES_PORT.to_string();
    client
        .start_process(
            id,
            &start(&["python3", "-m", "http.server", &port, "--bind", "127.0.0.1"]),
        )
        .await?;
    api.until_listening(id, FILES_PORT).await?;
    let host = api.preview(id, FILES_PORT).await?;

    let http = reqwest::Client::builder().no_proxy().build()?;
    let t = Instant::now();
    let r = http
        .get(format!("http://{listener}/{BIG_FILE}"))
        .header("host", &host)
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("the download through the preview answered {}", r.status());
    }
    let mut body = r.bytes_stream();
    let mut n: u64 = 0;
    while let Some(chunk) = body.next().await {
        n += chunk?.len() as u64;
    }
    let ours_s = t.elapsed().as_secs_f64();
    if n != mib << 20 {
        bail!(
            "the download through the preview brought {n} bytes of {}",
            mib << 20
        );
    }

    // `docker cp` to stdout (a tar stream), read to nowhere: no disk on our side either.
    let container = format!("{}-{id}", cx.prefix);
    let from = format!("{container}:{HOME}/{BIG_FILE}");
    let t = Instant::now();
    let status = tokio::process::Command::new("docker")
        .args(["cp", &from, "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .context("running docker cp")?;
    let base_s = t.elapsed().as_secs_f64();
    if !status.success() {
        bail!("docker cp {from} - failed ({status})");
    }
    let mb = mib as f64;
    Ok(Row::value(
        &format!("download {mib} MiB through a preview"),
        "MiB/s",
        mb / ours_s,
        Some(mb / base_s),
        true,
    )
    .judged(DOWNLOAD))
}
