//! The session calls the benchmark makes (`/api/v1/agents/{id}/sessions…`), straight over HTTP
//! with the benchmark server's token, and a follower of a session's Server-Sent Events that
//! hands out each event as its last line arrives.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::{Method, RequestBuilder};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::super::STEP_DEADLINE;
use crate::api::types::conversation::{
    CreateSession, PromptAccepted, Session, TurnEvent, TurnState,
};
use crate::cli::{SseEvent, SseParser};

/// The benchmark server's session API.
#[derive(Clone)]
pub struct SessionApi {
    http: reqwest::Client,
    base: String,
    auth: String,
}

impl SessionApi {
    pub fn new(base: &str, token: &str) -> anyhow::Result<SessionApi> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(SessionApi {
            http,
            base: base.trim_end_matches('/').to_string(),
            auth: format!("Bearer {token}"),
        })
    }

    fn request(&self, method: Method, agent: &str, rest: &str) -> RequestBuilder {
        let url = format!("{}/api/v1/agents/{agent}/sessions{rest}", self.base);
        self.http
            .request(method, url)
            .header(AUTHORIZATION, &self.auth)
    }

    async fn send(rb: RequestBuilder, what: &str) -> anyhow::Result<reqwest::Response> {
        let resp = rb.send().await.with_context(|| what.to_string())?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            bail!("{what}: {status}: {}", body.trim());
        }
        Ok(resp)
    }

    async fn json<T: DeserializeOwned>(rb: RequestBuilder, what: &str) -> anyhow::Result<T> {
        let body = Self::send(rb, what).await?.bytes().await?;
        serde_json::from_slice(&body).with_context(|| format!("{what}: the answer"))
    }

    /// A new session of `agent` on the server's default harness.
    pub async fn create(&self, agent: &str, title: &str) -> anyhow::Result<Session> {
        let body = CreateSession {
            title: Some(title.to_string()),
            ..Default::default()
        };
        Self::json(
            self.request(Method::POST, agent, "").json(&body),
            "creating a session",
        )
        .await
    }

    pub async fn get(&self, agent: &str, sid: &str) -> anyhow::Result<Session> {
        Self::json(
            self.request(Method::GET, agent, &format!("/{sid}")),
            "reading a session",
        )
        .await
    }

    /// Sends `text` as a prompt: the turn it started.
    pub async fn prompt(&self, agent: &str, sid: &str, text: &str) -> anyhow::Result<u64> {
        let accepted: PromptAccepted = Self::json(
            self.request(Method::POST, agent, &format!("/{sid}/prompt"))
                .json(&json!({ "text": text })),
            "sending a prompt",
        )
        .await?;
        Ok(accepted.turn)
    }

    /// Follows the session's events after `after` (the subscription is live once this
    /// returns).
    pub async fn follow(&self, agent: &str, sid: &str, after: u64) -> anyhow::Result<Follower> {
        let resp = Self::send(
            self.request(Method::GET, agent, &format!("/{sid}/events"))
                .query(&[("after", after)])
                .header(ACCEPT, "text/event-stream"),
            "following a session's events",
        )
        .await?;
        Ok(Follower {
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
            parser: SseParser::new(),
            ready: VecDeque::new(),
        })
    }

    /// Sends `text` and waits for its turn to end, following from the session's last event:
    /// the stop reason.
    pub async fn ask(&self, agent: &str, sid: &str, text: &str) -> anyhow::Result<String> {
        let last = self.get(agent, sid).await?.last_seq;
        let mut events = self.follow(agent, sid, last).await?;
        let turn = self.prompt(agent, sid, text).await?;
        events.turn_end(turn).await
    }
}

/// A session's Server-Sent Events, as they come.
pub struct Follower {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    /// Bytes of a line not yet complete.
    buf: Vec<u8>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
}

impl Follower {
    /// The next event; fails when none comes within the step deadline or the stream ends.
    pub async fn next(&mut self) -> anyhow::Result<SseEvent> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Ok(e);
            }
            let chunk = tokio::time::timeout(STEP_DEADLINE, self.body.next())
                .await
                .context("no session event in time")?;
            match chunk {
                Some(Ok(bytes)) => self.take(&bytes),
                Some(Err(e)) => bail!("the session's event stream failed: {e}"),
                None => bail!("the session's event stream ended"),
            }
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(i) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let mut line = &self.buf[start..start + i];
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            if let Some(e) = self.parser.line(&String::from_utf8_lossy(line)) {
                self.ready.push_back(e);
            }
            start += i + 1;
        }
        self.buf.drain(..start);
    }

    /// Reads on until the next `update` event.
    pub async fn first_update(&mut self) -> anyhow::Result<()> {
        loop {
            let e = self.next().await?;
            match e.event.as_str() {
                "update" => return Ok(()),
                "turn" => ended_early(&e)?,
                _ => {}
            }
        }
    }

    /// Counts `update` events until `n` came, or a turn ended first: how many came, and the time
    /// from `since` to the last of them.
    pub async fn updates(&mut self, n: usize, since: Instant) -> anyhow::Result<(usize, Duration)> {
        let mut seen = 0;
        let mut last = since;
        while seen < n {
            let e = self.next().await?;
            match e.event.as_str() {
                "update" => {
                    seen += 1;
                    last = Instant::now();
                }
                "turn" => {
                    let t: TurnEvent = serde_json::from_str(&e.data).context("a turn event")?;
                    if t.state == TurnState::Ended {
                        // Put back for whoever waits for the turn's end.
                        self.ready.push_front(e);
                        break;
                    }
                }
                _ => {}
            }
        }
        Ok((seen, last.duration_since(since)))
    }

    /// Reads on until turn `turn` ends: its stop reason.
    pub async fn turn_end(&mut self, turn: u64) -> anyhow::Result<String> {
        loop {
            let e = self.next().await?;
            if e.event != "turn" {
                continue;
            }
            let t: TurnEvent = serde_json::from_str(&e.data).context("a turn event")?;
            if t.turn == turn && t.state == TurnState::Ended {
                return Ok(t.stop_reason.unwrap_or_default());
            }
        }
    }
}

/// A `turn` event that ends a turn before the update waited for came.
fn ended_early(e: &SseEvent) -> anyhow::Result<()> {
    let t: TurnEvent = serde_json::from_str(&e.data).context("a turn event")?;
    if t.state == TurnState::Ended {
        bail!(
            "turn {} ended ({}) before any update came",
            t.turn,
            t.stop_reason.unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower(chunks: &[&'static str]) -> Follower {
        let body = futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, reqwest::Error>(Bytes::from_static(c.as_bytes())))
                .collect::<Vec<_>>(),
        );
        Follower {
            body: body.boxed(),
            buf: Vec::new(),
            parser: SseParser::new(),
            ready: VecDeque::new(),
        }
    }

    #[tokio::test]
    async fn events_are_cut_out_whatever_the_chunks() {
        let mut f = follower(&[
            "id: 3\nevent: prompt\ndata: {}\n\nid: 4\nev",
            "ent: update\r\ndata: {\"a\":1}\r\n",
            "\r\n: keep-alive\n\nid: 5\nevent: turn\ndata: ",
            "{\"turn\":1,\"state\":\"ended\",\"stopReason\":\"end_turn\"}\n\n",
        ]);
        f.first_update().await.expect("an update");
        assert_eq!(f.turn_end(1).await.expect("the end"), "end_turn");
        assert!(f.next().await.is_err(), "the stream ended");
    }

    #[tokio::test]
    async fn a_count_of_updates_stops_at_the_turns_end() {
        let mut f = follower(&[
            "event: update\ndata: 1\n\nevent: update\ndata: 2\n\n",
            "event: turn\ndata: {\"turn\":2,\"state\":\"ended\",\"stopReason\":\"error\"}\n\n",
        ]);
        let (seen, _) = f.updates(5, Instant::now()).await.expect("counted");
        assert_eq!(seen, 2);
        assert_eq!(f.turn_end(2).await.expect("the end"), "error");
    }
}
