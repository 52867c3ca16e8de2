//! Factories: what a test starts from, made through the API as a user makes it (after pueue's
//! `tests/helper/factories`): an agent as the server created it, one running, one sleeping, and a
//! file tree in a running agent's home. Whichever way the server runs, [`Client`] makes them.

use serde_json::{json, Value};

use crate::common::client::{query, Client};

/// What to create an agent from: a name (`"busy"`), a name and an image (`("web", IMAGE)`), or
/// the whole request body (`json!({…})`).
pub trait NewAgent {
    fn body(self) -> Value;
}

impl NewAgent for &str {
    fn body(self) -> Value {
        json!({ "name": self })
    }
}

impl NewAgent for (&str, &str) {
    fn body(self) -> Value {
        json!({ "name": self.0, "image": self.1 })
    }
}

impl NewAgent for Value {
    fn body(self) -> Value {
        self
    }
}

impl Client {
    /// Asks for an agent (expecting 201) and returns it as the server answered, without waiting
    /// for it.
    pub async fn created_agent(&self, new: impl NewAgent) -> Value {
        let body = new.body();
        let r = self.send("POST", "/api/v1/agents", &body).await;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert_eq!(status, 201, "create {body}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("create {body}: {e}: {text}"))
    }

    /// Asks for an agent (expecting 201) and returns its id, without waiting for it.
    pub async fn create_agent(&self, new: impl NewAgent) -> String {
        let agent = self.created_agent(new).await;
        agent["id"].as_str().expect("id").to_string()
    }

    /// Creates an agent and waits until it runs.
    pub async fn running_agent(&self, new: impl NewAgent) -> String {
        let id = self.create_agent(new).await;
        self.wait_state(&id, "running").await;
        id
    }

    /// Creates an agent, waits until it runs, then stops it through the API and waits until it
    /// sleeps.
    pub async fn sleeping_agent(&self, new: impl NewAgent) -> String {
        let id = self.running_agent(new).await;
        self.stop_sleeping(&id).await;
        id
    }

    /// Writes `files` (a path in the home, its contents) into the running agent `id` through the
    /// file API: `mkdir -p` of each one's folder, then the file (each expecting 204).
    pub async fn write_tree(&self, id: &str, files: &[(&str, &str)]) {
        let fs = format!("/api/v1/agents/{id}/fs");
        for (path, contents) in files {
            if let Some((folder, _)) = path.rsplit_once('/') {
                let r = self
                    .post(&format!("{fs}/mkdir?path={}", query(folder)))
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("mkdir {folder}: {e}"));
                assert_eq!(
                    r.status(),
                    204,
                    "mkdir {folder}: {}",
                    r.text().await.unwrap()
                );
            }
            let r = self
                .put(&format!("{fs}/write?path={}", query(path)))
                .body(contents.to_string())
                .send()
                .await
                .unwrap_or_else(|e| panic!("write {path}: {e}"));
            assert_eq!(r.status(), 204, "write {path}: {}", r.text().await.unwrap());
        }
    }
}
