//! A typed client for the HTTP API in docs/api.md, shared by the CLI and the benchmark.
//!
//! Over 500 lines with its unit tests (about 190 of them): the code is one `ApiClient`, its
//! agent, exec, file and terminal calls over one transport; the process calls are in
//! `process_client.rs`.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION};
use reqwest::{Method, RequestBuilder, Response, Url};
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request as WsRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::error::ClientError;
use super::lines::LineSplitter;
use super::sse::SseParser;
use super::types::{decode_exec_line, AgentAction, ExecEvent, ServerEvent};
use crate::api::types::{
    Agent, CreateAgent, ExecBody, ExecResult, Health, PresetInfo, UpdateAgent,
};

pub type Terminal = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One server, one optional token. Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: Url,
    auth: Option<HeaderValue>,
}

impl ApiClient {
    /// `server` is the server's base URL (`http://host:port`, optionally with a path prefix);
    /// a bare `host:port` is taken as plain http.
    pub fn new(server: &str, token: Option<&str>) -> Result<Self, ClientError> {
        let base = parse_base(server)?;
        let auth = match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    ClientError::Transport("the API token holds characters a header cannot".into())
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            // The WebSocket path never goes through a proxy; HTTP must reach the same place.
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        Ok(Self { http, base, auth })
    }

    pub fn server(&self) -> &Url {
        &self.base
    }

    /// `{server}/api/v1/{segments…}`, each segment percent-encoded.
    pub fn api_url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    /// `{server}/api/v1/agents/{id}/fs/{op}?path=P`.
    pub fn fs_url(&self, id: &str, op: &str, path: &str) -> Url {
        let mut url = self.api_url(&["agents", id, "fs", op]);
        url.query_pairs_mut().append_pair("path", path);
        url
    }

    /// The terminal WebSocket: the server URL with `ws`/`wss` in place of `http`/`https`.
    pub fn terminal_url(&self, id: &str, cols: u16, rows: u16) -> Url {
        let mut url = self.api_url(&["agents", id, "terminal"]);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        // http→ws and https→wss stay within the "special" schemes, which `set_scheme` allows.
        let _ = url.set_scheme(scheme);
        url.query_pairs_mut()
            .append_pair("cols", &cols.to_string())
            .append_pair("rows", &rows.to_string());
        url
    }

    /// The WebSocket upgrade request, carrying the token like every other call.
    pub fn terminal_request(
        &self,
        id: &str,
        cols: u16,
        rows: u16,
    ) -> Result<WsRequest, ClientError> {
        let url = self.terminal_url(id, cols, rows);
        let mut req = url
            .as_str()
            .into_client_request()
            .map_err(|e| ClientError::InvalidUrl {
                url: url.to_string(),
                reason: e.to_string(),
            })?;
        if let Some(auth) = &self.auth {
            req.headers_mut().insert(AUTHORIZATION, auth.clone());
        }
        Ok(req)
    }

    pub async fn health(&self) -> Result<Health, ClientError> {
        self.json(self.request(Method::GET, &["health"])).await
    }

    pub async fn list_agents(&self) -> Result<Vec<Agent>, ClientError> {
        self.json(self.request(Method::GET, &["agents"])).await
    }

    pub async fn list_presets(&self) -> Result<Vec<PresetInfo>, ClientError> {
        self.json(self.request(Method::GET, &["presets"])).await
    }

    pub async fn pool(&self) -> Result<Vec<crate::api::types::PoolInfo>, ClientError> {
        self.json(self.request(Method::GET, &["pool"])).await
    }

    /// Has the server read its config file again (`POST /api/v1/admin/reload`).
    pub async fn reload_config(&self) -> Result<(), ClientError> {
        self.send(self.request(Method::POST, &["admin", "reload"]))
            .await
            .map(drop)
    }

    pub async fn list_users(&self) -> Result<Vec<crate::api::types::User>, ClientError> {
        self.json(self.request(Method::GET, &["users"])).await
    }

    pub async fn create_user(
        &self,
        req: &crate::api::types::CreateUser,
    ) -> Result<crate::api::types::User, ClientError> {
        self.json(self.request(Method::POST, &["users"]).json(req))
            .await
    }

    pub async fn delete_user(&self, id: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["users", id]))
            .await
            .map(drop)
    }

    pub async fn list_tokens(&self) -> Result<Vec<crate::api::types::Token>, ClientError> {
        self.json(self.request(Method::GET, &["tokens"])).await
    }

    pub async fn create_token(
        &self,
        req: &crate::api::types::CreateToken,
    ) -> Result<crate::api::types::CreatedToken, ClientError> {
        self.json(self.request(Method::POST, &["tokens"]).json(req))
            .await
    }

    pub async fn list_secrets(&self) -> Result<Vec<crate::api::types::Secret>, ClientError> {
        self.json(self.request(Method::GET, &["secrets"])).await
    }

    pub async fn put_secret(
        &self,
        name: &str,
        req: &crate::api::types::PutSecret,
    ) -> Result<crate::api::types::Secret, ClientError> {
        self.json(self.request(Method::PUT, &["secrets", name]).json(req))
            .await
    }

    pub async fn delete_secret(&self, name: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["secrets", name]))
            .await
            .map(drop)
    }

    pub async fn list_members(
        &self,
        agent: &str,
    ) -> Result<Vec<crate::api::types::AgentMember>, ClientError> {
        self.json(self.request(Method::GET, &["agents", agent, "members"]))
            .await
    }

    pub async fn add_member(
        &self,
        agent: &str,
        req: &crate::api::types::AddMember,
    ) -> Result<crate::api::types::AgentMember, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", agent, "members"])
                .json(req),
        )
        .await
    }

    pub async fn remove_member(&self, agent: &str, user: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["agents", agent, "members", user]))
            .await
            .map(drop)
    }

    /// The audit log with the filters `query` (`agent`, `user`, `action`, …).
    pub async fn audit(
        &self,
        query: &[(&str, String)],
    ) -> Result<Vec<crate::api::types::AuditEntry>, ClientError> {
        self.json(self.request(Method::GET, &["audit"]).query(query))
            .await
    }

    pub async fn rotate_access_token(
        &self,
        agent: &str,
    ) -> Result<crate::api::types::AccessToken, ClientError> {
        self.json(self.request(Method::POST, &["agents", agent, "access-token"]))
            .await
    }

    pub async fn join_agent(
        &self,
        agent: &str,
        req: &crate::api::types::JoinAgent,
    ) -> Result<Agent, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", agent, "join"])
                .json(req),
        )
        .await
    }

    pub async fn revoke_token(&self, id: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["tokens", id]))
            .await
            .map(drop)
    }

    pub async fn get_agent(&self, id: &str) -> Result<Agent, ClientError> {
        self.json(self.request(Method::GET, &["agents", id])).await
    }

    /// Finds an agent by id, or else by name. A name still held by an agent being destroyed
    /// counts only when no live agent has it.
    pub async fn find_agent(&self, id_or_name: &str) -> Result<Agent, ClientError> {
        let agents = self.list_agents().await?;
        pick_agent(agents, id_or_name).ok_or_else(|| {
            ClientError::not_found(format!("no agent with the id or name {id_or_name:?}"))
        })
    }

    /// The agent's recent egress decisions, oldest first.
    pub async fn egress_log(
        &self,
        id: &str,
    ) -> Result<Vec<crate::api::types::EgressLogEntry>, ClientError> {
        self.json(self.request(Method::GET, &["agents", id, "egress", "log"]))
            .await
    }

    pub async fn create_agent(&self, req: &CreateAgent) -> Result<Agent, ClientError> {
        self.json(self.request(Method::POST, &["agents"]).json(req))
            .await
    }

    pub async fn update_agent(&self, id: &str, req: &UpdateAgent) -> Result<Agent, ClientError> {
        self.json(self.request(Method::PATCH, &["agents", id]).json(req))
            .await
    }

    pub async fn action(&self, id: &str, action: AgentAction) -> Result<Agent, ClientError> {
        self.json(self.request(Method::POST, &["agents", id, action.as_str()]))
            .await
    }

    pub async fn delete_agent(&self, id: &str) -> Result<Agent, ClientError> {
        self.json(self.request(Method::DELETE, &["agents", id]))
            .await
    }

    /// Follows `GET /api/v1/events`. The subscription is live once this returns, so an
    /// operation started afterwards cannot slip its events past the caller.
    pub async fn events(
        &self,
    ) -> Result<BoxStream<'static, Result<ServerEvent, ClientError>>, ClientError> {
        let resp = self
            .send(
                self.request(Method::GET, &["events"])
                    .header(ACCEPT, "text/event-stream"),
            )
            .await?;
        let lines = self.line_stream(resp);
        Ok(Box::pin(async_stream::try_stream! {
            let mut lines = lines;
            let mut parser = SseParser::new();
            while let Some(line) = lines.next().await {
                let line = line?;
                if let Some(ev) = parser.line(&String::from_utf8_lossy(&line)) {
                    yield ServerEvent::decode(ev)?;
                }
            }
        }))
    }

    /// Runs a command and waits for all of its output.
    pub async fn exec(&self, id: &str, req: &ExecBody) -> Result<ExecResult, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", id, "exec"])
                .header(ACCEPT, "application/json")
                .json(req),
        )
        .await
    }

    /// Runs a command, yielding its output as it comes and its exit last. Dropping the stream
    /// closes the request, which kills the command.
    pub async fn exec_stream(
        &self,
        id: &str,
        req: &ExecBody,
    ) -> Result<BoxStream<'static, Result<ExecEvent, ClientError>>, ClientError> {
        let resp = self
            .send(
                self.request(Method::POST, &["agents", id, "exec"])
                    .header(ACCEPT, "application/x-ndjson")
                    .json(req),
            )
            .await?;
        let lines = self.line_stream(resp);
        Ok(Box::pin(async_stream::try_stream! {
            let mut lines = lines;
            while let Some(line) = lines.next().await {
                if let Some(ev) = decode_exec_line(&line?)? {
                    yield ev;
                }
            }
        }))
    }

    /// The bytes of a file in the agent, streamed.
    pub async fn fs_read(
        &self,
        id: &str,
        path: &str,
    ) -> Result<BoxStream<'static, Result<Bytes, ClientError>>, ClientError> {
        let url = self.fs_url(id, "read", path);
        let resp = self.send(self.authed(self.http.get(url))).await?;
        let server = self.shown();
        Ok(resp
            .bytes_stream()
            .map(move |r| r.map_err(|e| ClientError::from_reqwest(&server, e)))
            .boxed())
    }

    /// Replaces a file in the agent with `body`, which may be a stream
    /// (`reqwest::Body::wrap_stream`); the server applies it whole or not at all.
    pub async fn fs_write(
        &self,
        id: &str,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<(), ClientError> {
        let url = self.fs_url(id, "write", path);
        self.send(self.authed(self.http.put(url)).body(body))
            .await
            .map(drop)
    }

    /// Opens an agent's terminal WebSocket.
    pub async fn connect_terminal(
        &self,
        id: &str,
        cols: u16,
        rows: u16,
    ) -> Result<Terminal, ClientError> {
        use tokio_tungstenite::tungstenite::Error as WsError;
        let req = self.terminal_request(id, cols, rows)?;
        match tokio_tungstenite::connect_async(req).await {
            Ok((ws, _)) => Ok(ws),
            Err(WsError::Http(resp)) => Err(ClientError::from_status(
                resp.status().as_u16(),
                resp.body().as_deref().unwrap_or_default(),
            )),
            Err(WsError::Io(e)) if is_connect_failure(&e) => Err(ClientError::Connect {
                url: self.shown(),
                detail: e.to_string(),
            }),
            Err(e) => Err(ClientError::Transport(format!("terminal connection: {e}"))),
        }
    }

    /// The server URL as a person typed it, for messages.
    pub(super) fn shown(&self) -> String {
        self.base.as_str().trim_end_matches('/').to_string()
    }

    pub(super) fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.authed(self.http.request(method, self.api_url(segments)))
    }

    fn authed(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.auth {
            Some(auth) => rb.header(AUTHORIZATION, auth.clone()),
            None => rb,
        }
    }

    /// Sends, and turns any non-2xx answer into the API's error.
    pub(super) async fn send(&self, rb: RequestBuilder) -> Result<Response, ClientError> {
        let resp = rb
            .send()
            .await
            .map_err(|e| ClientError::from_reqwest(&self.shown(), e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.bytes().await.unwrap_or_default();
        Err(ClientError::from_status(status.as_u16(), &body))
    }

    pub(super) async fn json<T: DeserializeOwned>(
        &self,
        rb: RequestBuilder,
    ) -> Result<T, ClientError> {
        let resp = self.send(rb).await?;
        let body = resp
            .bytes()
            .await
            .map_err(|e| ClientError::from_reqwest(&self.shown(), e))?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub(super) fn line_stream(
        &self,
        resp: Response,
    ) -> BoxStream<'static, Result<Bytes, ClientError>> {
        let server = self.shown();
        Box::pin(async_stream::try_stream! {
            let mut body = resp.bytes_stream();
            let mut splitter = LineSplitter::new();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| ClientError::from_reqwest(&server, e))?;
                let lines = splitter.push(&chunk).map_err(|_| {
                    ClientError::Protocol("a streamed line exceeds the size limit".into())
                })?;
                for line in lines {
                    yield line;
                }
            }
            if let Some(line) = splitter.finish() {
                yield line;
            }
        })
    }
}

fn parse_base(server: &str) -> Result<Url, ClientError> {
    let server = server.trim();
    let invalid = |reason: &str| ClientError::InvalidUrl {
        url: server.to_string(),
        reason: reason.to_string(),
    };
    let with_scheme = if server.contains("://") {
        server.to_string()
    } else {
        format!("http://{server}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| invalid(&e.to_string()))?;
    match url.scheme() {
        "http" => {}
        // Built without TLS on purpose: the server is reached on loopback or a private network.
        "https" => {
            return Err(invalid(
                "https is not supported by this client; use http:// (put TLS in front of both if needed)",
            ))
        }
        _ => return Err(invalid("the URL must start with http://")),
    }
    if url.host().is_none() {
        return Err(invalid("no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("a server URL has no query or fragment"));
    }
    Ok(url)
}

fn pick_agent(agents: Vec<Agent>, id_or_name: &str) -> Option<Agent> {
    use crate::api::types::AgentState;
    let mut by_name: Option<Agent> = None;
    for agent in agents {
        if agent.id == id_or_name {
            return Some(agent);
        }
        if agent.name == id_or_name {
            let better = match &by_name {
                None => true,
                Some(prev) => prev.state == AgentState::Destroying,
            };
            if better {
                by_name = Some(agent);
            }
        }
    }
    by_name
}

fn is_connect_failure(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable | TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::AgentState;

    fn client(server: &str) -> ApiClient {
        match ApiClient::new(server, Some("t0k")) {
            Ok(c) => c,
            Err(e) => panic!("{server}: {e}"),
        }
    }

    #[test]
    fn api_urls_keep_a_path_prefix_and_encode_segments() {
        let c = client("http://127.0.0.1:8080");
        assert_eq!(
            c.api_url(&["agents", "abc", "start"]).as_str(),
            "http://127.0.0.1:8080/api/v1/agents/abc/start"
        );
        let c = client("http://example.test/hold/");
        assert_eq!(
            c.api_url(&["agents"]).as_str(),
            "http://example.test/hold/api/v1/agents"
        );
        assert_eq!(
            c.api_url(&["agents", "a/b"]).as_str(),
            "http://example.test/hold/api/v1/agents/a%2Fb"
        );
    }

    #[test]
    fn server_urls_are_checked() {
        assert_eq!(
            client("localhost:9000").server().as_str(),
            "http://localhost:9000/"
        );
        for bad in ["https://x", "ftp://x", "http://", "http://x/?a=b"] {
            assert!(
                matches!(
                    ApiClient::new(bad, None),
                    Err(ClientError::InvalidUrl { .. })
                ),
                "{bad}"
            );
        }
        assert!(ApiClient::new("http://x", Some("a\nb")).is_err());
    }

    #[test]
    fn fs_paths_are_percent_encoded_in_the_query() {
        let c = client("http://127.0.0.1:8080");
        let url = c.fs_url("abc", "read", "my dir/a&b=c?#d/caf\u{e9} \u{1F600}.txt");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/api/v1/agents/abc/fs/read?path=my+dir%2Fa%26b%3Dc%3F%23d%2Fcaf%C3%A9+%F0%9F%98%80.txt"
        );
        let back: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            back,
            [(
                "path".to_string(),
                "my dir/a&b=c?#d/caf\u{e9} \u{1F600}.txt".to_string()
            )]
        );
    }

    #[test]
    fn terminal_urls_are_websocket_urls() {
        let c = client("http://127.0.0.1:8080/");
        assert_eq!(
            c.terminal_url("abc", 120, 40).as_str(),
            "ws://127.0.0.1:8080/api/v1/agents/abc/terminal?cols=120&rows=40"
        );
        let req = match c.terminal_request("abc", 80, 24) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            req.headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
            Some("Bearer t0k")
        );
        assert_eq!(req.uri().scheme_str(), Some("ws"));
    }

    fn agent(id: &str, name: &str, state: AgentState) -> Agent {
        Agent {
            id: id.into(),
            name: name.into(),
            image: "img".into(),
            cpus: 1.0,
            memory_mb: 512,
            disk_mb: None,
            runtime: "runc".into(),
            egress: None,
            idle_minutes: 15,
            deep_sleep_minutes: 60,
            state,
            error: None,
            needs_rebuild: false,
            created_at: chrono::DateTime::UNIX_EPOCH,
            last_activity_at: None,
            sleeps_at: None,
            pull: None,
            preset: None,
            env: Default::default(),
            secrets: Vec::new(),
            setup: None,
            ttl_minutes: None,
            expires_at: None,
            labels: Default::default(),
            allow_root: false,
            approvals: Default::default(),
            owner: crate::api::types::AgentOwner {
                id: "admin".into(),
                name: "admin".into(),
            },
            access: Default::default(),
            warm: false,
        }
    }

    #[test]
    fn agents_are_found_by_id_first_then_by_live_name() {
        let agents = vec![
            agent("a1", "web", AgentState::Destroying),
            agent("a2", "web", AgentState::Running),
            agent("web", "other", AgentState::Sleeping),
        ];
        let id = |a: Option<Agent>| a.map(|a| a.id);
        assert_eq!(id(pick_agent(agents.clone(), "web")), Some("web".into()));
        assert_eq!(
            id(pick_agent(agents[..2].to_vec(), "web")),
            Some("a2".into())
        );
        assert_eq!(
            id(pick_agent(agents[..1].to_vec(), "web")),
            Some("a1".into())
        );
        assert_eq!(id(pick_agent(agents, "nope")), None);
    }
}
