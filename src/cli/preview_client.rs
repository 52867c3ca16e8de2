//! [`ApiClient`]'s calls for what listens in a sandbox and its previews
//! (`/api/v1/agents/{id}/ports`, `…/previews`, `/api/v1/previews/{pid}/open`).

use reqwest::{Method, Url};

use super::client::ApiClient;
use super::error::ClientError;
use crate::api::types::{CreatePreview, ListeningPort, Preview};

impl ApiClient {
    /// The TCP ports listening in the agent's sandbox; empty while it sleeps (this never
    /// wakes it).
    pub async fn list_ports(&self, agent: &str) -> Result<Vec<ListeningPort>, ClientError> {
        self.json(self.request(Method::GET, &["agents", agent, "ports"]))
            .await
    }

    /// Makes a preview; `409` when the port has one already (or the agent has the most it may).
    pub async fn create_preview(
        &self,
        agent: &str,
        req: &CreatePreview,
    ) -> Result<Preview, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", agent, "previews"])
                .json(req),
        )
        .await
    }

    /// The agent's live previews, by port (without their tokens).
    pub async fn list_previews(&self, agent: &str) -> Result<Vec<Preview>, ClientError> {
        self.json(self.request(Method::GET, &["agents", agent, "previews"]))
            .await
    }

    pub async fn delete_preview(&self, agent: &str, pid: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["agents", agent, "previews", pid]))
            .await
            .map(drop)
    }

    /// Where a browser starts a private preview: the API's hand-off, which sends a person
    /// signed in to the web UI on to the preview with a one-time code (and anyone else to the
    /// sign-in first). The admin token cannot go along: a browser has its own credentials.
    pub fn preview_open_url(&self, pid: &str) -> Url {
        self.api_url(&["previews", pid, "open"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_off_is_under_the_api_and_encodes_the_id() {
        let c = match ApiClient::new("http://127.0.0.1:8080/hold", None) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            c.preview_open_url("pk3m9x0b2c4d").as_str(),
            "http://127.0.0.1:8080/hold/api/v1/previews/pk3m9x0b2c4d/open"
        );
        assert_eq!(
            c.preview_open_url("a/b").as_str(),
            "http://127.0.0.1:8080/hold/api/v1/previews/a%2Fb/open"
        );
    }
}
