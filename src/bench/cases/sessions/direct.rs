//! The baselines of the session figures: the same test agent driven without the server, through
//! `docker exec -i` in the same container (the harness's own time, with Docker's stdio relay
//! for the tunnel's): `initialize` and `session/new` written to its stdin, then prompts, timed
//! to its first `session/update` line on stdout.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::super::STEP_DEADLINE;
use super::MOUNTED;

/// What marks a `session/update` notification on the agent's stdout (its lines are compact
/// JSON).
const UPDATE: &str = "\"method\":\"session/update\"";

/// The test agent run by hand in a container.
pub struct Direct {
    _child: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
    next_id: i64,
    session: String,
}

impl Direct {
    /// Starts the agent in `container` and opens a session on it. It runs as the image's user
    /// (the harness runs as the agent account, which changes nothing timed here), and keeps its
    /// history in a folder of its own in /tmp, apart from the harness's.
    pub async fn start(container: &str) -> anyhow::Result<Direct> {
        let mut child = Command::new("docker")
            .args(["exec", "-i", container])
            .arg(format!("{MOUNTED}/acp-test-agent"))
            .args(["--state-dir", "/tmp/ahbench-direct"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("running the test agent with docker exec")?;
        let stdin = child.stdin.take().context("the agent's stdin")?;
        let stdout = child.stdout.take().context("the agent's stdout")?;
        let mut d = Direct {
            _child: child,
            stdin,
            out: BufReader::with_capacity(1 << 16, stdout).lines(),
            next_id: 1,
            session: String::new(),
        };
        d.call("initialize", json!({ "protocolVersion": 1 }))
            .await?;
        let opened = d
            .call("session/new", json!({ "cwd": "/tmp", "mcpServers": [] }))
            .await?;
        d.session = opened
            .get("sessionId")
            .and_then(Value::as_str)
            .context("session/new gave no sessionId")?
            .to_string();
        Ok(d)
    }

    async fn send(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params,
        }))?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        Ok(id)
    }

    async fn line(&mut self) -> anyhow::Result<String> {
        match tokio::time::timeout(STEP_DEADLINE, self.out.next_line()).await {
            Ok(Ok(Some(l))) => Ok(l),
            Ok(Ok(None)) => bail!("the test agent (docker exec) ended"),
            Ok(Err(e)) => bail!("reading the test agent: {e}"),
            Err(_) => bail!("the test agent (docker exec) said nothing in time"),
        }
    }

    /// Reads until the answer to request `id`: its result.
    async fn answer(&mut self, id: i64) -> anyhow::Result<Value> {
        loop {
            let line = self.line().await?;
            if line.contains(UPDATE) {
                continue;
            }
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if msg.get("id").and_then(Value::as_i64) != Some(id) {
                continue;
            }
            if let Some(e) = msg.get("error") {
                bail!("the test agent refused request {id}: {e}");
            }
            return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.send(method, params).await?;
        self.answer(id).await
    }

    fn prompt_params(&self, text: &str) -> Value {
        json!({
            "sessionId": self.session,
            "prompt": [{ "type": "text", "text": text }],
        })
    }

    /// Prompt → the first `session/update` line; then reads on to the turn's end.
    pub async fn first_update(&mut self, text: &str) -> anyhow::Result<Duration> {
        let params = self.prompt_params(text);
        let t = Instant::now();
        let id = self.send("session/prompt", params).await?;
        loop {
            let line = self.line().await?;
            if line.contains(UPDATE) {
                break;
            }
            let msg = serde_json::from_str::<Value>(&line).unwrap_or(Value::Null);
            if msg.get("id").and_then(Value::as_i64) == Some(id) {
                bail!("the test agent ended the turn before any update: {line}");
            }
        }
        let took = t.elapsed();
        self.answer(id).await?;
        Ok(took)
    }

    /// `flood n`: how many updates came, and how long from the prompt to the last of them.
    pub async fn flood(&mut self, n: usize) -> anyhow::Result<(usize, Duration)> {
        let params = self.prompt_params(&format!("flood {n}"));
        let t = Instant::now();
        let id = self.send("session/prompt", params).await?;
        let mut seen = 0;
        while seen < n {
            if self.line().await?.contains(UPDATE) {
                seen += 1;
            }
        }
        let took = t.elapsed();
        self.answer(id).await?;
        Ok((seen, took))
    }
}
