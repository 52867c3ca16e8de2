//! Agent sessions in tests: the repo's model-free ACP agent (`acp-test-agent/`) as the
//! harness, and a session driven through the API as a user drives it.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::common::client::Client;
use crate::common::wait_for_value;

/// The static acp-test-agent (`scripts/build-acp-test-agent.sh`), built once per test run when
/// it is missing (`scripts/test` builds it before the tests).
pub fn test_agent() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let path = target.join("acp-test-agent/acp-test-agent");
        if !path.exists() {
            let status = std::process::Command::new("bash")
                .arg(root.join("scripts/build-acp-test-agent.sh"))
                .current_dir(&root)
                .status()
                .expect("running scripts/build-acp-test-agent.sh");
            assert!(status.success(), "building acp-test-agent failed");
        }
        path
    })
    .clone()
}

/// A harness entry running the test agent with `args`, at `path`.
pub fn harness(path: &str, args: &[&str]) -> agenthold::config::HarnessConfig {
    let mut command = vec![path.to_string()];
    command.extend(args.iter().map(|a| a.to_string()));
    agenthold::config::HarnessConfig {
        command,
        ..Default::default()
    }
}

/// One session of one agent, through the API.
pub struct Chat<'a> {
    pub api: &'a Client,
    pub agent: String,
    pub sid: String,
}

impl<'a> Chat<'a> {
    /// Makes a session on `agent` with `body` (expecting 201).
    pub async fn open(api: &'a Client, agent: &str, body: Value) -> Chat<'a> {
        let (status, s) = api
            .call(
                "POST",
                &format!("/api/v1/agents/{agent}/sessions"),
                Some(body),
            )
            .await;
        assert_eq!(status, 201, "{s}");
        Chat {
            api,
            agent: agent.to_string(),
            sid: s["id"].as_str().expect("id").to_string(),
        }
    }

    pub fn path(&self, rest: &str) -> String {
        format!("/api/v1/agents/{}/sessions/{}{rest}", self.agent, self.sid)
    }

    pub async fn session(&self) -> Value {
        self.api.get_json(&self.path("")).await
    }

    /// Sends a text prompt (expecting 202): the turn's number.
    pub async fn prompt(&self, text: &str) -> u64 {
        let (status, body) = self
            .api
            .call("POST", &self.path("/prompt"), Some(json!({ "text": text })))
            .await;
        assert_eq!(status, 202, "prompt {text:?}: {body}");
        body["turn"].as_u64().expect("turn")
    }

    /// The transcript after `after`, as `(seq, event, data)`.
    pub async fn events(&self, after: u64) -> Vec<(u64, String, Value)> {
        let mut out = Vec::new();
        let mut last = after;
        loop {
            let page = self
                .api
                .get_json(&self.path(&format!("/events?format=json&after={last}&limit=10000")))
                .await;
            let page = page.as_array().expect("array").clone();
            if page.is_empty() {
                return out;
            }
            for e in page {
                last = e["seq"].as_u64().expect("seq");
                out.push((
                    last,
                    e["event"].as_str().expect("event").to_string(),
                    e["data"].clone(),
                ));
            }
        }
    }

    /// Waits for turn `turn` to end: its events (from its prompt on), the last one its end.
    pub async fn turn(&self, turn: u64) -> Vec<(u64, String, Value)> {
        wait_for_value(
            &format!("turn {turn} of session {} ends", self.sid),
            || async {
                let all = self.events(0).await;
                let start = all
                    .iter()
                    .position(|(_, e, d)| e == "prompt" && d["turn"] == turn)?;
                let end = all.iter().position(|(_, e, d)| {
                    e == "turn" && d["turn"] == turn && d["state"] == "ended"
                })?;
                Some(all[start..=end].to_vec())
            },
        )
        .await
    }

    /// The stop reason of a turn's events.
    pub fn stop_reason(events: &[(u64, String, Value)]) -> String {
        let (_, _, d) = events.last().expect("events");
        d["stopReason"].as_str().expect("stopReason").to_string()
    }

    /// Sends `text` and waits for the turn to end.
    pub async fn ask(&self, text: &str) -> Vec<(u64, String, Value)> {
        let turn = self.prompt(text).await;
        self.turn(turn).await
    }

    /// The agent's message text in `events` (its `agent_message_chunk`s joined).
    pub fn text(events: &[(u64, String, Value)]) -> String {
        events
            .iter()
            .filter(|(_, e, d)| e == "update" && d["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|(_, _, d)| d["content"]["text"].as_str())
            .collect()
    }

    /// Waits for a pending approval of this session: its id.
    pub async fn pending_approval(&self) -> Value {
        wait_for_value("a pending approval", || async {
            let list = self
                .api
                .get_json(&format!(
                    "/api/v1/approvals?state=pending&agent={}",
                    self.agent
                ))
                .await;
            list.as_array()?
                .iter()
                .find(|a| a["sessionId"] == self.sid.as_str())
                .cloned()
        })
        .await
    }
}
