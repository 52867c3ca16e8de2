//! Shared helpers for the integration tests: a real server on loopback ports with the fake
//! driver, a client with the admin token, and waits with deadlines (never fixed sleeps).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthold::config::{Config, DriverKind};
use agenthold::lifecycle::Lifecycle;
use agenthold::server::Server;
use serde_json::{json, Value};

pub use client::Client;
pub use share::{exclusive, free_port, Shared};

pub mod acp;
pub mod client;
pub mod docker;
pub mod engine;
pub mod factories;
pub mod internet;
pub mod previews;
pub mod process;
pub mod procs;
pub mod registry;
pub mod share;
pub mod sse;

pub const TOKEN: &str = "test-admin-token-0123456789";
/// Long enough for a loaded 2-core CI machine, short enough to fail a hung test.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub struct TestServer {
    /// The API, with the admin token (the server dereferences to it).
    pub api: Client,
    pub api_addr: SocketAddr,
    pub tunnel_addr: SocketAddr,
    pub egress_addr: SocketAddr,
    /// The preview listener.
    pub previews_addr: SocketAddr,
    pub lc: Arc<Lifecycle>,
    /// The server's database, to look at or to stage a state no API call makes.
    pub store: agenthold::store::Store,
    pub dir: tempfile::TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// This server's share of the process (see [`exclusive`]), given back when it is dropped.
    share: Option<share::Shared>,
}

impl std::ops::Deref for TestServer {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.api
    }
}

impl std::ops::DerefMut for TestServer {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.api
    }
}

pub fn test_config(dir: &std::path::Path) -> Config {
    let mut c = Config::default();
    c.server.listen = "127.0.0.1:0".parse().unwrap();
    c.server.previews.listen = "127.0.0.1:0".parse().unwrap();
    c.server.data_dir = dir.to_path_buf();
    c.server.admin_token = Some(TOKEN.to_string());
    c.sandbox.driver = DriverKind::Fake;
    c.sandbox.tunnel_listen = "127.0.0.1:0".parse().unwrap();
    // Tests run servers side by side: each proxy on a port of its own.
    c.sandbox.egress.port = 0;
    c.sandbox.egress.dns_port = 0;
    c
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        Self::start_in(tempfile::tempdir().unwrap(), tweak, None).await
    }

    /// Stops this server and starts another on the same data directory, as a restart does.
    /// The old server shuts down as on SIGTERM (its background work ends) before the new one
    /// starts.
    pub async fn restart_with(mut self, tweak: impl FnOnce(&mut Config)) -> TestServer {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            match tokio::time::timeout(DEADLINE, t).await {
                Ok(ended) => {
                    ended
                        .expect("server task")
                        .expect("server shut down cleanly");
                }
                Err(_) => panic!("the server did not shut down within {DEADLINE:?}"),
            }
        }
        // The share passes to the new server: no exclusive test slips in between.
        let share = self.share.take();
        let TestServer { dir, lc, .. } = self;
        drop(lc);
        Self::start_in(dir, tweak, Some(share)).await
    }

    /// `share`: the one the server being restarted held, or `None` to take one.
    async fn start_in(
        dir: tempfile::TempDir,
        tweak: impl FnOnce(&mut Config),
        share: Option<Option<share::Shared>>,
    ) -> TestServer {
        let share = match share {
            Some(held) => held,
            None => share::Shared::take().await,
        };
        let mut config = test_config(dir.path());
        tweak(&mut config);
        let server = Server::bind(config).await.unwrap();
        let api_addr = server.api_addr;
        let tunnel_addr = server.tunnel_addr;
        let egress_addr = server.egress_addr;
        let previews_addr = server.previews_addr;
        let lc = server.lifecycle.clone();
        let store = server.store.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        let s = TestServer {
            api: Client::new(format!("http://{api_addr}"), DEADLINE),
            api_addr,
            tunnel_addr,
            egress_addr,
            previews_addr,
            lc,
            store,
            dir,
            shutdown: Some(tx),
            task: Some(task),
            share,
        };
        wait_for("health", || async {
            s.http.get(s.url("/api/v1/health")).send().await.is_ok()
        })
        .await;
        s
    }

    /// Asserts that agent `id` is still on tunnel connection `conn` (nothing replaced it).
    pub fn assert_same_tunnel(&self, id: &str, conn: u64) {
        assert_eq!(
            self.lc.tunnels().conn_id(id),
            Some(conn),
            "the tunnel was replaced"
        );
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{}", self.api_addr, path)
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Polls `check` until it is true, failing the test after [`DEADLINE`].
pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not true within {DEADLINE:?}");
}

/// Polls `check` until it gives a value, failing the test after [`DEADLINE`].
pub async fn wait_for_value<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not true within {DEADLINE:?}");
}

/// Asserts an API error's status and code, returning its message.
pub async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> String {
    assert_eq!(resp.status().as_u16(), status);
    let body: Value = resp.json().await.expect("error body is JSON");
    assert_eq!(body["error"]["code"], code, "{body}");
    let msg = body["error"]["message"].as_str().unwrap().to_string();
    assert!(!msg.is_empty());
    msg
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl TestServer {
    /// Opens the agent's terminal WebSocket with the admin token.
    pub async fn terminal(&self, id: &str, cols: u16, rows: u16) -> Ws {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = self.ws_url(&format!(
            "/api/v1/agents/{id}/terminal?cols={cols}&rows={rows}"
        ));
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let (ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        ws
    }
}

/// Reads terminal output until `needle` appears, returning everything read.
pub async fn read_until(ws: &mut Ws, needle: &str) -> String {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap_or_else(|_| panic!("{needle:?} did not appear; got {seen:?}"));
        match msg {
            Some(Ok(Message::Binary(b))) => seen.push_str(&String::from_utf8_lossy(&b)),
            Some(Ok(Message::Close(c))) => panic!("closed ({c:?}) before {needle:?}; got {seen:?}"),
            Some(Ok(_)) => {}
            other => panic!("terminal ended ({other:?}) before {needle:?}; got {seen:?}"),
        }
        if seen.contains(needle) {
            return seen;
        }
    }
}

/// Reads `from` (a CLI's stdout) into `out` until `needle` appears, failing after `within`.
pub async fn read_output_until(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    out: &mut String,
    needle: &str,
    within: Duration,
) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    while !out.contains(needle) {
        let n = tokio::time::timeout_at(deadline, from.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{needle:?} did not appear: {out:?}"))
            .expect("reading the output");
        assert!(n > 0, "the output ended before {needle:?}: {out:?}");
        out.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

pub async fn send_keys(ws: &mut Ws, keys: &str) {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    ws.send(Message::Binary(keys.as_bytes().to_vec().into()))
        .await
        .unwrap();
}

/// `n` streaming execs of `sleep 120` at once on agent `id`. Each answers once its channel is
/// open and holds it while its body is read; the ones the stream cap refuses must be `429`
/// naming `sandbox.max_streams_per_agent`. Returns the running ones (drop them to end the
/// commands) and the number refused.
pub async fn exec_flood(s: &TestServer, id: &str, n: usize) -> (Vec<reqwest::Response>, usize) {
    let answers = futures::future::join_all((0..n).map(|_| {
        s.post(&format!("/api/v1/agents/{id}/exec"))
            .header("accept", "application/x-ndjson")
            .json(&json!({"command": ["sleep", "120"]}))
            .send()
    }))
    .await;
    let mut running = Vec::new();
    let mut refused = 0;
    for a in answers {
        let a = a.expect("an exec request failed");
        match a.status().as_u16() {
            200 => running.push(a),
            429 => {
                assert_eq!(
                    a.headers().get("retry-after").and_then(|v| v.to_str().ok()),
                    Some("1"),
                    "a 429 says when to try again"
                );
                let msg = expect_error(a, 429, "too_many_requests").await;
                assert!(msg.contains("max_streams_per_agent"), "{msg}");
                refused += 1;
            }
            other => panic!(
                "exec answered {other}: {}",
                a.text().await.unwrap_or_default()
            ),
        }
    }
    (running, refused)
}

/// Every mount point this process sees (`/proc/self/mountinfo`'s fifth field).
pub fn mount_points() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

/// Bytes free (to an unprivileged user) on the filesystem holding `path`.
pub fn free_bytes(path: &std::path::Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(path).expect("statvfs");
    st.blocks_available() as u64 * st.fragment_size() as u64
}

/// The error `path` answers to a body with `env` = `{name: "x"}`, checked to be a `400` about
/// `env`: its message, to be compared with the other routes'.
pub async fn env_refusal(s: &TestServer, method: &str, path: &str, body: Value) -> String {
    let r = s.send(method, path, &body).await;
    assert_eq!(r.status().as_u16(), 400, "{method} {path}");
    let answer: Value = r.json().await.expect("error body is JSON");
    assert_eq!(answer["error"]["code"], "invalid", "{answer}");
    assert_eq!(answer["error"]["field"], "env", "{answer}");
    answer["error"]["message"].as_str().unwrap().to_string()
}
