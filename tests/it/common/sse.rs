//! `GET /api/v1/events` read event by event, for tests that follow what the server announces.

use std::collections::VecDeque;

use agenthold::cli::{SseEvent, SseParser};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Value;

use crate::common::{TestServer, DEADLINE};

/// `GET /api/v1/events`, read event by event.
pub struct Events {
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: SseParser,
    partial: String,
    ready: VecDeque<SseEvent>,
}

impl Events {
    pub async fn open(s: &TestServer) -> Events {
        Events::open_at(s, "/api/v1/events").await
    }

    /// The stream at `path` (`/api/v1/events?agent=ID`).
    pub async fn open_at(s: &TestServer, path: &str) -> Events {
        let r = s.get(path).send().await.expect("events request");
        assert_eq!(r.status(), 200);
        Events::of(r)
    }

    /// Any Server-Sent Events answer (`fs/watch`, a session's events), read event by event.
    pub fn of(r: reqwest::Response) -> Events {
        Events {
            body: r.bytes_stream().boxed(),
            parser: SseParser::new(),
            partial: String::new(),
            ready: VecDeque::new(),
        }
    }

    /// The next event, as its kind and its data; fails the test at `deadline`.
    pub async fn next(&mut self, deadline: tokio::time::Instant) -> (String, Value) {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                let data = serde_json::from_str(&ev.data)
                    .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", ev.data));
                return (ev.event, data);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .expect("no event before the deadline")
                .expect("the event stream ended")
                .expect("reading the event stream");
            self.partial.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(nl) = self.partial.find('\n') {
                let line: String = self.partial.drain(..=nl).collect();
                let line = line.trim_end_matches(['\n', '\r']);
                if let Some(ev) = self.parser.line(line) {
                    self.ready.push_back(ev);
                }
            }
        }
    }

    /// Reads events about agent `id` until `done` says stop, returning all of them in order.
    pub async fn about_until(
        &mut self,
        id: &str,
        mut done: impl FnMut(&str, &Value) -> bool,
    ) -> Vec<(String, Value)> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let (kind, data) = self.next(deadline).await;
            if data["id"] != id {
                continue;
            }
            let stop = done(&kind, &data);
            seen.push((kind, data));
            if stop {
                return seen;
            }
        }
    }
}

/// The data of the `pull` events among `events`.
pub fn pulls(events: &[(String, Value)]) -> Vec<&Value> {
    events
        .iter()
        .filter(|(k, _)| k == "pull")
        .map(|(_, d)| d)
        .collect()
}

/// The states of the `agent` events among `events`.
pub fn states(events: &[(String, Value)]) -> Vec<String> {
    events
        .iter()
        .filter(|(k, _)| k == "agent")
        .map(|(_, d)| d["state"].as_str().unwrap_or_default().to_string())
        .collect()
}
