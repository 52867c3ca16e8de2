//! `--case code`: `run_code("1+1")` in the agent's kernel, against `exec python3 -c 1+1` in
//! the same agent, the way to run Python without a kernel. The agent is of the ready image
//! ([`crate::config::AGENT_IMAGE`]), which has python3-ipykernel; the bench's `--image` has
//! none.

use std::time::Instant;

use anyhow::bail;

use super::common::until_running;
use super::Ctx;
use crate::api::types::RunCode;
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;
use crate::cli::{ApiClient, CreateAgent, ExecBody};

const TARGET: &[Bound] = &[Bound::AtMost(10.0)];
const CODE: &str = "1+1";

pub async fn code(cx: &mut Ctx<'_>) -> anyhow::Result<Row> {
    let client = cx.client();
    let mut events = client.events().await?;
    let id = client
        .create_agent(&CreateAgent {
            name: "code".into(),
            image: Some(crate::config::AGENT_IMAGE.into()),
            ..Default::default()
        })
        .await?
        .id;
    let row = async {
        until_running(&mut events, &client, std::slice::from_ref(&id)).await?;
        drop(events);
        measure(&client, &id, cx.runs * 10).await
    }
    .await;
    // The agent takes its kernels with it.
    let _ = client.delete_agent(&id).await;
    row
}

async fn measure(client: &ApiClient, id: &str, n: usize) -> anyhow::Result<Row> {
    let req = RunCode {
        code: CODE.into(),
        language: None,
        context: None,
        timeout_ms: None,
    };
    // The first run starts the kernel: a warm-up, as exec's first call is.
    run_once(client, id, &req).await?;
    let mut ours = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        run_once(client, id, &req).await?;
        ours.push(ms(t.elapsed()));
    }
    let exec = ExecBody {
        command: vec!["python3".into(), "-c".into(), CODE.into()],
        ..Default::default()
    };
    client.exec(id, &exec).await?;
    let mut base = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client.exec(id, &exec).await?;
        base.push(ms(t.elapsed()));
        if r.exit_code != 0 {
            bail!(
                "`python3 -c {CODE}` exited with {}: {}",
                r.exit_code,
                r.stderr
            );
        }
    }
    Ok(Row::times("run_code(\"1+1\") (vs exec python3 -c)", &ours, Some(&base)).judged(TARGET))
}

async fn run_once(client: &ApiClient, id: &str, req: &RunCode) -> anyhow::Result<()> {
    let out = client.run_code(id, req).await?;
    if let Some(e) = out.error {
        bail!("run_code({CODE:?}) raised {}: {}", e.name, e.value);
    }
    let text = out.results.first().and_then(|r| r.get("text/plain"));
    if text.and_then(|t| t.as_str()) != Some("2") {
        bail!("run_code({CODE:?}) gave {:?}, not 2", out.results);
    }
    Ok(())
}
