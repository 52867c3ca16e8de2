//! [`ApiClient`]'s calls for background processes (`/api/v1/agents/{id}/processes…`).

use futures::stream::{BoxStream, StreamExt};
use reqwest::header::ACCEPT;
use reqwest::Method;

use super::client::ApiClient;
use super::error::ClientError;
use crate::api::types::process::{OutputLine, Process, SignalBody, StartProcess, StdinWritten};
use crate::api::types::ErrorBody;

/// One line of a process's output stream, or the error line that ends a stream cut short.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputEvent {
    Line(OutputLine),
    /// The stream was cut (the sandbox connection went); read again from the last offset.
    Cut(String),
}

impl ApiClient {
    pub async fn start_process(
        &self,
        id: &str,
        req: &StartProcess,
    ) -> Result<Process, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", id, "processes"])
                .json(req),
        )
        .await
    }

    pub async fn list_processes(&self, id: &str) -> Result<Vec<Process>, ClientError> {
        self.json(self.request(Method::GET, &["agents", id, "processes"]))
            .await
    }

    pub async fn get_process(&self, id: &str, pid: &str) -> Result<Process, ClientError> {
        self.json(self.request(Method::GET, &["agents", id, "processes", pid]))
            .await
    }

    /// The process's output from `offset`; with `follow`, until it ends.
    pub async fn process_output(
        &self,
        id: &str,
        pid: &str,
        offset: u64,
        follow: bool,
    ) -> Result<BoxStream<'static, Result<OutputEvent, ClientError>>, ClientError> {
        let resp = self
            .send(
                self.request(Method::GET, &["agents", id, "processes", pid, "output"])
                    .query(&[
                        ("offset", offset.to_string()),
                        ("follow", follow.to_string()),
                    ])
                    .header(ACCEPT, "application/x-ndjson"),
            )
            .await?;
        let lines = self.line_stream(resp);
        Ok(Box::pin(async_stream::try_stream! {
            let mut lines = lines;
            while let Some(line) = lines.next().await {
                let line = line?;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if let Ok(err) = serde_json::from_slice::<ErrorBody>(&line) {
                    yield OutputEvent::Cut(err.error.message);
                    continue;
                }
                let parsed: OutputLine = serde_json::from_slice(&line)
                    .map_err(|e| ClientError::Protocol(format!("bad output line: {e}")))?;
                yield OutputEvent::Line(parsed);
            }
        }))
    }

    /// Writes `data` to the process's stdin, closing it after when `eof`.
    pub async fn process_stdin(
        &self,
        id: &str,
        pid: &str,
        data: impl Into<reqwest::Body>,
        eof: bool,
    ) -> Result<StdinWritten, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", id, "processes", pid, "stdin"])
                .query(&[("eof", eof.to_string())])
                .body(data),
        )
        .await
    }

    pub async fn signal_process(
        &self,
        id: &str,
        pid: &str,
        signal: &str,
    ) -> Result<(), ClientError> {
        let body = SignalBody {
            signal: signal.to_string(),
        };
        self.send(
            self.request(Method::POST, &["agents", id, "processes", pid, "signal"])
                .json(&body),
        )
        .await
        .map(drop)
    }

    /// Waits up to `timeout_ms` for the process to end: the process, and whether it has.
    pub async fn wait_process(
        &self,
        id: &str,
        pid: &str,
        timeout_ms: u64,
    ) -> Result<(Process, bool), ClientError> {
        let resp = self
            .request(Method::GET, &["agents", id, "processes", pid, "wait"])
            .query(&[("timeoutMs", timeout_ms.to_string())])
            .send()
            .await
            .map_err(|e| ClientError::from_reqwest(&self.shown(), e))?;
        let status = resp.status().as_u16();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ClientError::from_reqwest(&self.shown(), e))?;
        if status != 200 && status != 408 {
            return Err(ClientError::from_status(status, &body));
        }
        let p = serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((p, status == 200))
    }

    pub async fn delete_process(&self, id: &str, pid: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["agents", id, "processes", pid]))
            .await
            .map(drop)
    }
}
