//! The API of a running server as the tests use it, whichever way the server runs (in this
//! process, as a process of its own, in a container): requests with the admin token, agents
//! waited for, lifecycle actions, files and exec. What a test starts from (an agent in a given
//! state, a file tree) is made in [`crate::common::factories`]. [`crate::common::TestServer`] and
//! [`crate::common::process::ServerConfig`] both dereference to one.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{wait_for, TOKEN};

/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(20);

/// A server's API at `base` (`http://host:port`).
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub http: reqwest::Client,
    /// How long a wait of this client may take before it fails the test.
    pub deadline: Duration,
    /// The admin token it sends ([`TOKEN`] unless the server has another).
    pub token: String,
}

/// The states a wait accepts: one (`"running"`) or any of several (`&["error"]`).
pub trait States {
    fn states(&self) -> Vec<&str>;
}

impl States for &str {
    fn states(&self) -> Vec<&str> {
        vec![self]
    }
}

impl States for &[&str] {
    fn states(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl<const N: usize> States for &[&str; N] {
    fn states(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl Client {
    pub fn new(base: String, deadline: Duration) -> Client {
        Client {
            base,
            http: reqwest::Client::new(),
            deadline,
            token: TOKEN.to_string(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(&self.token)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::GET, path)
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::POST, path)
    }

    pub fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::PUT, path)
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::DELETE, path)
    }

    /// `GET path`, which must answer 200, as text.
    pub async fn get_text(&self, path: &str) -> String {
        let r = self
            .get(path)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert_eq!(status, 200, "GET {path}: {text}");
        text
    }

    /// `GET path`, which must answer 200, as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        let text = self.get_text(path).await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {text}"))
    }

    /// `method path` with `body` as JSON; the response, whatever its status.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: &impl serde::Serialize,
    ) -> reqwest::Response {
        self.request(method.parse().expect("method"), path)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// One request with the token: the status and the JSON body (`null` if none).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let r = match body {
            Some(b) => self.send(method, path, &b).await,
            None => self
                .request(method.parse().expect("method"), path)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: {e}")),
        };
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `PATCH` agent `id` with `body`; the response, whatever its status.
    pub async fn patch_agent(&self, id: &str, body: Value) -> reqwest::Response {
        self.send("PATCH", &format!("/api/v1/agents/{id}"), &body)
            .await
    }

    /// The entries of the folder `path` in the agent (relative to its home), as listed.
    pub async fn list_dir(&self, id: &str, path: &str) -> Vec<Value> {
        let listed = self
            .get_json(&format!("/api/v1/agents/{id}/fs/list?path={}", query(path)))
            .await;
        serde_json::from_value(listed).expect("a listing is an array")
    }

    pub async fn agent(&self, id: &str) -> Value {
        self.get_json(&format!("/api/v1/agents/{id}")).await
    }

    pub async fn state(&self, id: &str) -> String {
        self.agent(id).await["state"]
            .as_str()
            .expect("state")
            .to_string()
    }

    /// Waits until the agent's state is one of `want` and returns the agent; `error` fails the
    /// test unless wanted.
    pub async fn wait_state(&self, id: &str, want: impl States) -> Value {
        let want = want.states();
        let deadline = Instant::now() + self.deadline;
        loop {
            let agent = self.agent(id).await;
            let state = agent["state"].as_str().unwrap_or_default();
            if want.contains(&state) {
                return agent;
            }
            assert_ne!(
                state, "error",
                "agent {id} failed waiting for {want:?}: {agent}"
            );
            assert!(
                Instant::now() < deadline,
                "agent {id} did not reach {want:?} within {:?}: {agent}",
                self.deadline
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the agent is in a settled state and returns it (`None` once it is gone); an
    /// agent in `error` is returned as `error: <message>`.
    pub async fn settled(&self, id: &str) -> Option<String> {
        let deadline = Instant::now() + self.deadline;
        loop {
            let (status, a) = self
                .call("GET", &format!("/api/v1/agents/{id}"), None)
                .await;
            if status == 404 {
                return None;
            }
            let state = a["state"].as_str().unwrap_or_default().to_string();
            match state.as_str() {
                "running" | "paused" | "sleeping" => return Some(state),
                "error" => return Some(format!("error: {}", a["error"])),
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "agent {id} stuck in {state} for {:?}: {a}",
                self.deadline
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the agent is `want` (a settled state); fails on any other settled state.
    pub async fn settles_to(&self, id: &str, want: &str, what: &str) {
        assert_eq!(self.settled(id).await.as_deref(), Some(want), "{what}");
    }

    /// Asks for a lifecycle `action` (`start`, `stop`, `rebuild`, `setup`) and checks it was
    /// accepted.
    pub async fn act(&self, id: &str, action: &str) {
        let (status, body) = self
            .call("POST", &format!("/api/v1/agents/{id}/{action}"), None)
            .await;
        assert_eq!(status, 202, "{action} {id}: {body}");
    }

    /// Stops the agent through the API and waits until it sleeps.
    pub async fn stop_sleeping(&self, id: &str) {
        self.act(id, "stop").await;
        self.wait_state(id, "sleeping").await;
    }

    /// Starts the agent through the API and waits until it runs.
    pub async fn start_running(&self, id: &str) {
        self.act(id, "start").await;
        self.wait_state(id, "running").await;
    }

    /// Destroys the agent through the API and waits until it is gone (`404`).
    pub async fn destroy(&self, id: &str) {
        let (status, body) = self
            .call("DELETE", &format!("/api/v1/agents/{id}"), None)
            .await;
        assert_eq!(status, 202, "destroy {id}: {body}");
        // Until it is gone the agent reads as `destroying`: any other answer is a failure.
        wait_for(&format!("agent {id} gone"), || async {
            match self.get(&format!("/api/v1/agents/{id}")).send().await {
                Ok(r) if r.status() == 404 => true,
                Ok(r) if r.status() == 200 => false,
                Ok(r) => panic!("while destroying {id}: {}", r.status()),
                Err(e) => panic!("while destroying {id}: {e}"),
            }
        })
        .await;
    }

    /// Runs `command` in the agent through the exec API and returns the JSON result.
    pub async fn exec(&self, id: &str, command: &[&str]) -> Value {
        let (status, out) = self
            .call(
                "POST",
                &format!("/api/v1/agents/{id}/exec"),
                Some(json!({"command": command, "timeoutMs": 20000})),
            )
            .await;
        assert_eq!(status, 200, "exec {command:?}: {out}");
        out
    }

    /// stdout of a command that must exit 0.
    pub async fn exec_ok(&self, id: &str, command: &[&str]) -> String {
        let out = self.exec(id, command).await;
        assert_eq!(out["exitCode"], 0, "exec {command:?}: {out}");
        out["stdout"].as_str().unwrap_or_default().to_string()
    }

    /// The pending approval of the held command `command` (its one line), once it is queued.
    pub async fn pending_command(&self, command: &str) -> Value {
        crate::common::wait_for_value(&format!("an approval for {command:?}"), || async {
            let list = self.get_json("/api/v1/approvals?state=pending").await;
            list.as_array()?
                .iter()
                .find(|a| a["kind"] == "command" && a["command"] == command)
                .cloned()
        })
        .await
    }

    /// Answers approval `aid` with `option` (`allow`, `reject`, …): status and body.
    pub async fn answer_approval(&self, aid: &str, option: &str) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/api/v1/approvals/{aid}"),
            Some(json!({ "optionId": option })),
        )
        .await
    }

    /// Pauses agent `id` through the API, expecting `202` with the agent `paused`.
    pub async fn pause(&self, id: &str) {
        let (status, body) = self
            .call("POST", &format!("/api/v1/agents/{id}/pause"), None)
            .await;
        assert_eq!(
            (status, body["state"].as_str()),
            (202, Some("paused")),
            "pause {id}: {body}"
        );
    }

    /// Waits until an exec of `true` answers 200 again (`when`: after what).
    pub async fn wait_exec_works(&self, id: &str, when: &str) {
        wait_for(&format!("exec works again {when}"), || async {
            self.post(&format!("/api/v1/agents/{id}/exec"))
                .json(&json!({"command": ["true"]}))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
    }
}

/// `value` as a query parameter's value.
pub fn query(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
