//! The background-process API of one agent, typed, for the tests of any server (in-process or a
//! process of its own, fake driver or Docker).

use agenthold::api::output_lines::line_bytes;
use agenthold::api::types::process::{OutputLine, Process};
use agenthold::api::types::OutputStream;
use serde_json::{json, Value};

use crate::common::TOKEN;

/// One agent's processes, through the API at `base` (`http://host:port`).
#[derive(Clone)]
pub struct Procs {
    pub http: reqwest::Client,
    pub base: String,
    pub agent: String,
}

/// A process's output joined from NDJSON lines by offset.
#[derive(Debug, Default)]
pub struct Joined {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Both streams in order.
    pub all: Vec<u8>,
    /// The offset after the last byte read.
    pub end: u64,
    pub gaps: Vec<(u64, u64)>,
    pub exit: Option<Process>,
    /// An error line ended the stream (it was cut).
    pub error: Option<Value>,
}

impl Joined {
    /// Adds `lines`, which must continue exactly where this left off.
    pub fn extend(&mut self, lines: &[Value]) {
        for raw in lines {
            if raw.get("error").is_some() {
                self.error = Some(raw.clone());
                continue;
            }
            let line: OutputLine = serde_json::from_value(raw.clone())
                .unwrap_or_else(|e| panic!("not an output line ({e}): {raw}"));
            match &line {
                OutputLine::Gap { gap } => {
                    assert_eq!(gap.from, self.end, "a gap that does not start where we are");
                    self.gaps.push((gap.from, gap.to));
                    self.end = gap.to;
                }
                OutputLine::Exit { exit } => self.exit = Some((**exit).clone()),
                _ => {
                    let (offset, stream, bytes) = line_bytes(&line).expect("decodable data");
                    assert_eq!(offset, self.end, "a line that does not start where we are");
                    self.end += bytes.len() as u64;
                    match stream {
                        OutputStream::Stdout => self.stdout.extend_from_slice(&bytes),
                        OutputStream::Stderr => self.stderr.extend_from_slice(&bytes),
                    }
                    self.all.extend_from_slice(&bytes);
                }
            }
        }
    }
}

impl Procs {
    pub fn new(http: reqwest::Client, base: &str, agent: &str) -> Procs {
        Procs {
            http,
            base: base.to_string(),
            agent: agent.to_string(),
        }
    }

    pub fn url(&self, rest: &str) -> String {
        format!("{}/api/v1/agents/{}/processes{rest}", self.base, self.agent)
    }

    /// Starts a process from a raw body; the status and the answer.
    pub async fn start_raw(&self, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(""))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("start request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Starts `body` (a start request), expecting 201.
    pub async fn start(&self, body: Value) -> Process {
        let (status, v) = self.start_raw(body.clone()).await;
        assert_eq!(status, 201, "start {body}: {v}");
        serde_json::from_value(v).expect("a Process")
    }

    /// Starts `sh -c script`.
    pub async fn sh(&self, script: &str) -> Process {
        self.start(json!({"command": ["sh", "-c", script]})).await
    }

    pub async fn get(&self, pid: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(&format!("/{pid}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("get request");
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn list(&self) -> Vec<Process> {
        let r = self
            .http
            .get(self.url(""))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("list request");
        assert_eq!(r.status(), 200);
        r.json().await.expect("a list of processes")
    }

    /// The output from `offset` as its lines (the whole response).
    pub async fn output_lines(&self, pid: &str, offset: u64, follow: bool) -> (u16, Vec<Value>) {
        let r = self
            .http
            .get(self.url(&format!("/{pid}/output?offset={offset}&follow={follow}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("output request");
        let status = r.status().as_u16();
        let body = r.bytes().await.unwrap_or_default();
        if status != 200 {
            return (
                status,
                vec![serde_json::from_slice(&body).unwrap_or(Value::Null)],
            );
        }
        let lines = body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("an NDJSON line"))
            .collect();
        (status, lines)
    }

    /// Follows the output from `offset`, handing each line to `each` as it arrives (nothing is
    /// kept here, so a gigabyte costs no memory); returns when the response ends.
    pub async fn follow_each(&self, pid: &str, offset: u64, mut each: impl FnMut(Value)) -> u16 {
        use futures::StreamExt;
        let r = self
            .http
            .get(self.url(&format!("/{pid}/output?offset={offset}&follow=true")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("output request");
        let status = r.status().as_u16();
        if status != 200 {
            return status;
        }
        let mut body = r.bytes_stream();
        let mut partial: Vec<u8> = Vec::new();
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else {
                // Cut off: the caller goes on from where its lines got to.
                break;
            };
            partial.extend_from_slice(&chunk);
            while let Some(nl) = partial.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = partial.drain(..=nl).collect();
                each(serde_json::from_slice(&line[..nl]).expect("an NDJSON line"));
            }
        }
        status
    }

    /// All the output of a process that has ended (followed to its exit line).
    pub async fn output_to_end(&self, pid: &str) -> Joined {
        let (status, lines) = self.output_lines(pid, 0, true).await;
        assert_eq!(status, 200, "{lines:?}");
        let mut j = Joined::default();
        j.extend(&lines);
        assert!(j.exit.is_some(), "no exit line: {:?}", lines.last());
        j
    }

    /// `…/wait`: the status (200 or 408) and the process.
    pub async fn wait(&self, pid: &str, timeout_ms: u64) -> (u16, Process) {
        let r = self
            .http
            .get(self.url(&format!("/{pid}/wait?timeoutMs={timeout_ms}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("wait request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let p = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text}: {e}"));
        (status, p)
    }

    /// Waits for the process to end (within the test deadline).
    pub async fn ended(&self, pid: &str) -> Process {
        let (status, p) = self.wait(pid, 30_000).await;
        assert_eq!(status, 200, "still running: {p:?}");
        p
    }

    pub async fn signal(&self, pid: &str, signal: &str) -> u16 {
        self.http
            .post(self.url(&format!("/{pid}/signal")))
            .bearer_auth(TOKEN)
            .json(&json!({ "signal": signal }))
            .send()
            .await
            .expect("signal request")
            .status()
            .as_u16()
    }

    pub async fn stdin(&self, pid: &str, data: &[u8], eof: bool) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(&format!("/{pid}/stdin?eof={eof}")))
            .bearer_auth(TOKEN)
            .body(data.to_vec())
            .send()
            .await
            .expect("stdin request");
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn remove(&self, pid: &str) -> u16 {
        self.http
            .delete(self.url(&format!("/{pid}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("delete request")
            .status()
            .as_u16()
    }
}

/// True while a process whose command line holds `marker` is alive (not a zombie) on this
/// machine: a container's processes are visible from the host too.
pub fn alive_with(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
            !zombie && String::from_utf8_lossy(&cmd).contains(marker)
        })
}
