//! Plain HTTP to the benchmark's server and NDJSON read line by line, for the streams the
//! follow figure decodes itself.

use anyhow::bail;
use futures::StreamExt;

use crate::bench::cases::Ctx;
use crate::cli::ApiClient;

/// Plain HTTP to the benchmark's server, for the streams read with [`Lines`].
pub(super) struct Http {
    http: reqwest::Client,
    client: ApiClient,
    token: String,
}

impl Http {
    pub(super) fn new(cx: &Ctx<'_>, client: &ApiClient) -> anyhow::Result<Http> {
        Ok(Http {
            http: reqwest::Client::builder().no_proxy().build()?,
            client: client.clone(),
            token: cx.server.token.clone(),
        })
    }

    pub(super) fn get(&self, segments: &[&str]) -> reqwest::RequestBuilder {
        self.http
            .get(self.client.api_url(segments))
            .bearer_auth(&self.token)
    }

    pub(super) fn post(&self, segments: &[&str]) -> reqwest::RequestBuilder {
        self.http
            .post(self.client.api_url(segments))
            .bearer_auth(&self.token)
    }

    pub(super) async fn send(
        &self,
        rb: reqwest::RequestBuilder,
    ) -> anyhow::Result<reqwest::Response> {
        let resp = rb.send().await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            bail!("{status}: {body}");
        }
        Ok(resp)
    }
}

/// An NDJSON response, line by line (blank lines skipped).
pub(super) struct Lines {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    /// How much of `buf` was searched for a newline already, without one.
    searched: usize,
}

impl Lines {
    pub(super) fn new(resp: reqwest::Response) -> Lines {
        Lines {
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
            searched: 0,
        }
    }

    pub(super) async fn next(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        loop {
            if let Some(i) = self.buf[self.searched..].iter().position(|&b| b == b'\n') {
                let end = self.searched + i;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                self.searched = 0;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            self.searched = self.buf.len();
            match self.body.next().await {
                Some(chunk) => self.buf.extend_from_slice(&chunk?),
                None if self.buf.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                None => return Ok(Some(std::mem::take(&mut self.buf))),
            }
        }
    }
}
