//! Previews through real containers: the app (`scripts/preview-app.py`, Python's standard library
//! only) runs in a sandbox of the ready agent image and is reached through the preview listener
//! and the tunnel, never the sandbox's network: what listens is listed, pages, WebSockets, a
//! gigabyte down and 256 MiB up arrive intact, a token preview takes out what was agenthold's, a
//! sleeping agent is woken by a request, one agent's preview never reaches another's app, and a
//! deleted preview cuts what is open through it and lets through nothing that was waiting on the
//! sandbox when it went (docs/api.md, "Ports and previews"). The same rules on the fake driver
//! are in `tests/it/previews.rs`. Needs Docker (scripts/docker-setup.sh), the ready agent image
//! (scripts/build-agent-image.sh) and a static sandboxd (scripts/build-sandboxd.sh).
//!
//! Every request goes to the test server's preview listener on loopback with the preview's
//! `Host`, as a browser resolving `*.localhost` sends it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::common::docker::*;
use crate::common::previews::preview;
use crate::common::{wait_for, wait_for_value, TestServer, DEADLINE, TOKEN};
use agenthold::config::AGENT_IMAGE as DEV_IMAGE;

/// The app every test serves, copied into the sandbox's home.
const APP: &str = include_str!("../../../scripts/preview-app.py");
const APP_FILE: &str = "/home/agent/preview-app.py";
/// The pattern of the app's `/bytes`: byte i is i % 251.
const PERIOD: usize = 251;
const GIB: u64 = 1 << 30;

/// The ready agent image (it has python3); its absence fails the test.
async fn dev_agent(s: &TestServer, name: &str) -> String {
    if docker_try(&["image", "inspect", DEV_IMAGE]).is_err() {
        panic!("image {DEV_IMAGE} is missing; run scripts/build-agent-image.sh first");
    }
    s.running_agent((name, DEV_IMAGE)).await
}

/// What listens in agent `id`'s sandbox, as `GET …/ports` answers.
async fn ports(s: &TestServer, id: &str) -> Vec<Value> {
    let listed = s.get_json(&format!("/api/v1/agents/{id}/ports")).await;
    serde_json::from_value(listed).expect("a list of ports")
}

/// The listing's entry for `port`, if it listens.
async fn listed(s: &TestServer, id: &str, port: u16) -> Option<Value> {
    ports(s, id).await.into_iter().find(|p| p["port"] == port)
}

/// Starts `command` as a background process of agent `id` and waits until `port` listens.
async fn serve(s: &TestServer, id: &str, command: &[&str], port: u16) -> Value {
    let (status, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            Some(json!({"command": command, "cwd": "/home/agent"})),
        )
        .await;
    assert_eq!(status, 201, "starting {command:?}: {body}");
    let pid = body["id"].as_str().expect("process id").to_string();
    wait_for_value(&format!("port {port} listening in {id}"), || async {
        if let Some(p) = listed(s, id, port).await {
            return Some(p);
        }
        // A process that ended will never listen: say why.
        let p = s
            .get_json(&format!("/api/v1/agents/{id}/processes/{pid}"))
            .await;
        assert_eq!(p["state"], "running", "{command:?} ended: {p}");
        None
    })
    .await
}

/// Copies the app into agent `id` and serves it on `address` at `port`; the listing's entry.
async fn serve_app(s: &TestServer, id: &str, port: u16, address: &str) -> Value {
    s.write_tree(id, &[("preview-app.py", APP)]).await;
    let port_arg = port.to_string();
    serve(
        s,
        id,
        &["python3", APP_FILE, port_arg.as_str(), address],
        port,
    )
    .await
}

/// The preview listener on loopback (it may be bound to every address).
fn listener(s: &TestServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], s.previews_addr.port()))
}

/// A client that follows no redirect and goes through no proxy; a body may take long, but
/// never a minute without a byte.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// A request for `host` (whatever `Host` a client likes) to the preview listener.
fn to(s: &TestServer, host: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    browser()
        .request(method, format!("http://{}{path}", listener(s)))
        .header("host", host)
}

/// A page load, as a browser makes it.
fn page(s: &TestServer, host: &str, path: &str) -> reqwest::RequestBuilder {
    to(s, host, reqwest::Method::GET, path).header("accept", "text/html,*/*;q=0.8")
}

async fn status_and_text(r: reqwest::RequestBuilder) -> (u16, String) {
    let r = r.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// The app's `/headers` answer: the path it got and its headers, names in lower case.
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    async fn read(r: reqwest::Response) -> Seen {
        assert_eq!(r.status(), 200, "the app's /headers");
        let v: Value = r.json().await.expect("the app answers JSON");
        let headers = v["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| {
                (
                    h[0].as_str().expect("name").to_ascii_lowercase(),
                    h[1].as_str().expect("value").to_string(),
                )
            })
            .collect();
        Seen {
            path: v["path"].as_str().expect("path").to_string(),
            headers,
        }
    }

    fn get(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Nothing of agenthold's reached the app: no `Authorization`, no `token` in the query, none
    /// of its cookies.
    fn assert_clean(&self, token: &str) {
        assert!(self.get("authorization").is_empty(), "{:?}", self.headers);
        assert!(!self.path.contains("token"), "{}", self.path);
        for c in self.get("cookie") {
            assert!(
                !c.contains("agenthold_"),
                "agenthold's cookie reached the app: {c}"
            );
        }
        for (n, v) in &self.headers {
            assert!(!v.contains(token), "the token reached the app in {n}: {v}");
            assert!(
                !v.contains(TOKEN),
                "the admin token reached the app in {n}: {v}"
            );
        }
    }
}

/// Checks streamed bytes against the `/bytes` pattern without keeping them.
struct PatternCheck {
    pattern: Vec<u8>,
    seen: u64,
}

impl PatternCheck {
    fn new() -> PatternCheck {
        // Long enough that any chunk of up to 1 MiB fits at any phase of the period.
        let pattern = (0..PERIOD * 4200).map(|i| (i % PERIOD) as u8).collect();
        PatternCheck { pattern, seen: 0 }
    }

    fn take(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let phase = (self.seen % PERIOD as u64) as usize;
            let n = chunk.len().min(self.pattern.len() - phase);
            assert!(
                chunk[..n] == self.pattern[phase..phase + n],
                "the bytes differ from the pattern within {} bytes after offset {}",
                n,
                self.seen
            );
            self.seen += n as u64;
            chunk = &chunk[n..];
        }
    }
}

/// Opens a WebSocket to `path` on the preview `host`.
async fn websocket(
    s: &TestServer,
    host: &str,
    path: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(listener(s))
        .await
        .expect("connect to the preview listener");
    let req = format!("ws://{host}{path}")
        .into_client_request()
        .expect("request");
    let (ws, resp) = tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("the WebSocket upgrade through the preview");
    assert_eq!(resp.status(), 101);
    ws
}

async fn next_message(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> Message {
    loop {
        let m = tokio::time::timeout(DEADLINE, ws.next())
            .await
            .expect("no answer on the WebSocket")
            .expect("the WebSocket ended")
            .expect("a WebSocket error");
        if !matches!(m, Message::Ping(_) | Message::Pong(_)) {
            return m;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_lists_the_apps_listeners_with_their_process_and_nothing_while_asleep() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "ports").await;
    assert_eq!(listed(&s, &id, 8123).await, None);

    let on_loopback = serve_app(&s, &id, 8123, "127.0.0.1").await;
    assert_eq!(
        on_loopback,
        json!({"port": 8123, "address": "127.0.0.1", "process": "python3"})
    );
    let on_all = serve_app(&s, &id, 8124, "0.0.0.0").await;
    assert_eq!(
        on_all,
        json!({"port": 8124, "address": "0.0.0.0", "process": "python3"})
    );
    // By port, each (port, address) once.
    let all = ports(&s, &id).await;
    let listed_ports: Vec<u64> = all
        .iter()
        .map(|p| p["port"].as_u64().expect("port"))
        .collect();
    let mut sorted = listed_ports.clone();
    sorted.sort_unstable();
    assert_eq!(listed_ports, sorted, "{all:?}");

    // Asleep: nothing is listed, and the listing does not wake the agent.
    s.stop_sleeping(&id).await;
    assert_eq!(ports(&s, &id).await, Vec::<Value>::new());
    assert_eq!(s.state(&id).await, "sleeping");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_python_http_server_opens_through_its_preview() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "site").await;
    let html = "<!doctype html><title>site</title><h1 id=\"made\">made in the sandbox</h1>\n";
    s.write_tree(&id, &[("site/index.html", html)]).await;
    serve(
        &s,
        &id,
        &[
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "127.0.0.1",
            "--directory",
            "/home/agent/site",
        ],
        8000,
    )
    .await;

    // Public: anyone who reaches the listener.
    let p = preview(&s, &id, 8000, "public").await;
    assert_eq!(
        p.host,
        format!("8000-site.localhost:{}", s.previews_addr.port())
    );
    let r = page(&s, &p.host, "/").send().await.expect("page");
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/html"),
        "{:?}",
        r.headers()
    );
    assert_eq!(r.text().await.expect("body"), html);
    // The server's own pages: a file it does not have.
    let (status, _) = status_and_text(page(&s, &p.host, "/missing.html")).await;
    assert_eq!(status, 404);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_echoes_text_and_binary_through_a_preview() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "ws").await;
    serve_app(&s, &id, 8200, "127.0.0.1").await;
    let p = preview(&s, &id, 8200, "public").await;

    let mut ws = websocket(&s, &p.host, "/ws").await;
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let sent = vec![
        Message::text("hello"),
        Message::binary(vec![0u8, 1, 2, 255]),
        Message::text("ünïcödé ✓"),
        Message::binary(big),
        Message::text(""),
        Message::text("x".repeat(70_000)),
    ];
    for m in &sent {
        ws.send(m.clone()).await.expect("send");
        assert_eq!(&next_message(&mut ws).await, m);
    }
    // Several in flight at once come back in order.
    for i in 0..50 {
        ws.send(Message::text(format!("message {i}")))
            .await
            .expect("send");
    }
    for i in 0..50 {
        assert_eq!(
            next_message(&mut ws).await,
            Message::text(format!("message {i}"))
        );
    }
    ws.close(None).await.expect("close");
    // The app answers the close, and the connection ends.
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "the WebSocket did not end");
        match tokio::time::timeout(DEADLINE, ws.next()).await {
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) => break,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => panic!("the close failed: {e}"),
            Err(_) => panic!("no close came back"),
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_down_and_256_mib_up_arrive_intact_through_a_preview() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| c.sandbox.default_memory_mb = 512)
        .await;
    let id = dev_agent(&s, "bulk").await;
    serve_app(&s, &id, 8300, "127.0.0.1").await;
    let p = preview(&s, &id, 8300, "public").await;

    // Down: checked and counted as it streams, never kept.
    let r = to(
        &s,
        &p.host,
        reqwest::Method::GET,
        &format!("/bytes?n={GIB}"),
    )
    .send()
    .await
    .expect("download");
    assert_eq!(r.status(), 200);
    assert_eq!(r.content_length(), Some(GIB));
    let mut check = PatternCheck::new();
    let mut body = r.bytes_stream();
    let t = Instant::now();
    while let Some(chunk) = body.next().await {
        check.take(&chunk.expect("the download broke off"));
    }
    assert_eq!(check.seen, GIB, "the download ended early");
    eprintln!("1 GiB down through the preview in {:?}", t.elapsed());

    // Up: 256 MiB made as it is sent (chunked: its length is not said), hashed on the way.
    const MIB: usize = 1 << 20;
    const CHUNKS: u64 = 256;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let block: Vec<u8> = (0..MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let hasher = std::sync::Arc::new(std::sync::Mutex::new(Sha256::new()));
    let h = hasher.clone();
    let chunks = futures::stream::iter(0..CHUNKS).map(move |i| {
        let mut chunk = block.clone();
        chunk[..8].copy_from_slice(&i.to_le_bytes());
        h.lock().expect("hasher").update(&chunk);
        Ok::<_, std::io::Error>(bytes::Bytes::from(chunk))
    });
    let t = Instant::now();
    let r = to(&s, &p.host, reqwest::Method::POST, "/upload")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .expect("upload");
    assert_eq!(r.status(), 200);
    let got: Value = r.json().await.expect("the app's answer");
    eprintln!("256 MiB up through the preview in {:?}", t.elapsed());
    let want = hex::encode(std::mem::take(&mut *hasher.lock().expect("hasher")).finalize());
    assert_eq!(got, json!({"length": CHUNKS * MIB as u64, "sha256": want}));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_preview_lets_in_its_token_alone_and_the_app_never_sees_it() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "tok").await;
    serve_app(&s, &id, 8400, "127.0.0.1").await;
    let p = preview(&s, &id, 8400, "token").await;
    let token = p.token.clone().expect("a token preview's token, once");
    let get = |path: &str| to(&s, &p.host, reqwest::Method::GET, path);

    // Without it, or with a wrong one: 401, whichever way it is sent.
    for r in [
        get("/headers"),
        get("/headers").bearer_auth("not-the-token"),
        get("/headers?token=not-the-token"),
        get("/headers").header("cookie", "agenthold_preview=forged.1.x"),
    ] {
        let r = r.send().await.expect("request");
        assert_eq!(r.status(), 401);
        assert!(r.headers().contains_key("www-authenticate"));
    }
    // The token of another preview does not open this one.
    serve_app(&s, &id, 8401, "127.0.0.1").await;
    let other = preview(&s, &id, 8401, "token").await;
    let (status, _) =
        status_and_text(get("/headers").bearer_auth(other.token.as_deref().expect("token"))).await;
    assert_eq!(status, 401);

    // A program: `Authorization: Bearer`, taken out with agenthold's cookies; the app's own
    // cookie and query stay.
    let seen = Seen::read(
        get("/headers?x=1")
            .bearer_auth(&token)
            .header(
                "cookie",
                "app=kept; agenthold_session=s3ss10n; agenthold_preview=x.1.y",
            )
            .send()
            .await
            .expect("request"),
    )
    .await;
    seen.assert_clean(&token);
    assert_eq!(seen.path, "/headers?x=1");
    assert_eq!(seen.get("cookie"), vec!["app=kept"]);
    assert_eq!(seen.get("host"), vec![p.host.as_str()]);
    assert_eq!(seen.get("x-forwarded-host"), vec![p.host.as_str()]);
    assert_eq!(seen.get("x-forwarded-proto"), vec!["http"]);
    assert_eq!(seen.get("x-forwarded-for"), vec!["127.0.0.1"]);
    // The admin token opens it too, and is taken out likewise.
    let seen = Seen::read(
        get("/headers")
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("request"),
    )
    .await;
    seen.assert_clean(&token);

    // A browser: `?token=` on a GET is answered with a redirect to the same address without it
    // and a cookie for this host; with the cookie the app answers, and never sees either.
    let r = get(&format!("/headers?x=1&token={token}&y=2"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "/headers?x=1&y=2");
    let set = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_string();
    assert!(set.starts_with("agenthold_preview="), "{set}");
    assert!(
        set.contains("HttpOnly") && !set.contains("Domain="),
        "{set}"
    );
    let grant = set.split(';').next().expect("name=value").to_string();
    let seen = Seen::read(
        get("/headers?x=1&y=2")
            .header("cookie", format!("theme=dark; {grant}"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    seen.assert_clean(&token);
    assert_eq!(seen.get("cookie"), vec!["theme=dark"]);
    // The cookie opens this preview only.
    let (status, _) = status_and_text(
        to(&s, &other.host, reqwest::Method::GET, "/headers").header("cookie", grant.clone()),
    )
    .await;
    assert_eq!(status, 401);
    // Any other method with `?token=` is passed on without it.
    let seen = Seen::read(
        to(
            &s,
            &p.host,
            reqwest::Method::POST,
            &format!("/headers?token={token}&z=3"),
        )
        .body("form=data")
        .send()
        .await
        .expect("request"),
    )
    .await;
    seen.assert_clean(&token);
    assert_eq!(seen.path, "/headers?z=3");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_sleeping_agent_wakes_it() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "nap").await;
    serve_app(&s, &id, 8500, "127.0.0.1").await;
    let p = preview(&s, &id, 8500, "public").await;
    let (status, _) = status_and_text(page(&s, &p.host, "/")).await;
    assert_eq!(status, 200);
    s.stop_sleeping(&id).await;

    // A page load starts the sandbox and says so, asking to be reloaded in a second.
    let r = page(&s, &p.host, "/").send().await.expect("page");
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(r
        .text()
        .await
        .expect("body")
        .contains("Starting the sandbox"));
    // Reloaded until the sandbox runs. Its processes ended when it slept, so what answers
    // then is the listener's page naming the port nothing listens on.
    let (status, text) = wait_for_value("the page to load after the wake", || async {
        let (status, text) = status_and_text(page(&s, &p.host, "/")).await;
        (status != 503).then_some((status, text))
    })
    .await;
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("Nothing listens on port 8500"), "{text}");
    assert_eq!(s.state(&id).await, "running");
    // Served again, the page opens.
    serve_app(&s, &id, 8500, "127.0.0.1").await;
    let (status, text) = status_and_text(page(&s, &p.host, "/")).await;
    assert_eq!(status, 200, "{text}");

    // Any other request waits for the wake and gets the sandbox's answer.
    s.stop_sleeping(&id).await;
    let t = Instant::now();
    let (status, text) = status_and_text(
        to(&s, &p.host, reqwest::Method::GET, "/headers").header("accept", "application/json"),
    )
    .await;
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("Nothing listens on port 8500"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_eq!(s.state(&id).await, "running");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_reaches_its_own_sandbox_alone() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // The preview listener on every address, so it is on the agents' gateways too.
    let s = env
        .server_with(false, |c| {
            c.server.previews.listen = "0.0.0.0:0".parse().expect("addr")
        })
        .await;
    let a = dev_agent(&s, "a").await;
    let b = dev_agent(&s, "b").await;
    // B serves on every address of its sandbox; A serves nothing on that port.
    serve_app(&s, &b, 8600, "0.0.0.0").await;
    let pa = preview(&s, &a, 8600, "public").await;
    let pb = preview(&s, &b, 8600, "public").await;
    let (status, text) = status_and_text(page(&s, &pb.host, "/")).await;
    assert_eq!(status, 200, "B's own preview: {text}");
    assert!(text.contains("Hello from the preview app"));
    let (status, text) = status_and_text(page(&s, &pa.host, "/")).await;
    assert_eq!(status, 502, "A's preview reached something: {text}");
    assert!(text.contains("Nothing listens on port 8600"), "{text}");
    assert!(!text.contains("Hello from the preview app"), "{text}");

    // From inside A the preview listener cannot be reached at all: not on A's gateway, not on
    // B's, not on any host address (the firewall drops what a sandbox sends the host).
    let port = s.previews_addr.port();
    let mut addrs = vec![
        format!("{}:{port}", network_gateway(&env.network(&a))),
        format!("{}:{port}", network_gateway(&env.network(&b))),
        format!("127.0.0.1:{port}"),
    ];
    addrs.extend(host_addresses().iter().map(|h| format!("{h}:{port}")));
    let open = reachable(&s, &a, &addrs).await;
    for (addr, open) in addrs.iter().zip(open) {
        assert!(!open, "the sandbox reaches the preview listener at {addr}");
    }
    // And a request that comes from the sandbox network's addresses (here the host's own end
    // of A's network, the one address of it the test can send from) is refused.
    let gw = network_gateway(&env.network(&a));
    let r = browser()
        .get(format!("http://{gw}:{port}/"))
        .header("host", &pb.host)
        .send()
        .await
        .expect("request from the gateway's address");
    assert_eq!(r.status(), 403);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_preview_cuts_its_download_and_websocket_and_its_url_is_gone() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "cut").await;
    serve_app(&s, &id, 8700, "127.0.0.1").await;
    let p = preview(&s, &id, 8700, "public").await;

    let mut ws = websocket(&s, &p.host, "/ws").await;
    ws.send(Message::text("before")).await.expect("send");
    assert_eq!(next_message(&mut ws).await, Message::text("before"));

    let r = to(
        &s,
        &p.host,
        reqwest::Method::GET,
        &format!("/bytes?n={GIB}"),
    )
    .send()
    .await
    .expect("download");
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let mut check = PatternCheck::new();
    while check.seen < 8 << 20 {
        let chunk = body
            .next()
            .await
            .expect("more")
            .expect("the download broke off");
        check.take(&chunk);
    }
    let (status, _) = s
        .call(
            "DELETE",
            &format!("/api/v1/agents/{id}/previews/{}", p.id),
            None,
        )
        .await;
    assert_eq!(status, 204);

    // The download ends short (an error, or an end before its length), and soon: what was
    // in flight when it was cut, not the rest of the gigabyte.
    let t = Instant::now();
    let mut broke = false;
    while let Some(chunk) = tokio::time::timeout(DEADLINE, body.next())
        .await
        .expect("the download went on after the delete")
    {
        match chunk {
            Ok(c) => check.take(&c),
            Err(_) => {
                broke = true;
                break;
            }
        }
    }
    assert!(
        check.seen < GIB,
        "the whole gigabyte arrived after the delete"
    );
    eprintln!(
        "cut after {} MiB (error: {broke}) in {:?}",
        check.seen >> 20,
        t.elapsed()
    );

    // The WebSocket ends too.
    let ended = tokio::time::timeout(DEADLINE, async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the WebSocket went on after the delete");

    // The URL answers 410 from now on, pages and programs alike.
    let (status, text) = status_and_text(page(&s, &p.host, "/")).await;
    assert_eq!(status, 410, "{text}");
    let (status, _) = status_and_text(to(&s, &p.host, reqwest::Method::GET, "/headers")).await;
    assert_eq!(status, 410);
    // And no preview is listed.
    wait_for("the preview unlisted", || async {
        s.get_json(&format!("/api/v1/agents/{id}/previews"))
            .await
            .as_array()
            .is_some_and(Vec::is_empty)
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_under_way_when_its_preview_is_deleted_never_reaches_the_app() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = dev_agent(&s, "late").await;
    serve_app(&s, &id, 8800, "127.0.0.1").await;
    let p = preview(&s, &id, 8800, "public").await;
    let container = env.container(&id);

    // sandboxd stopped, a request gets as far as asking it for a connection to the app (it
    // holds the agent in use from then on) and waits there. A `docker pause` would not do: the
    // server takes that in as light sleep, and the request would wake the agent.
    let sandboxd = nix::unistd::Pid::from_raw(sandboxd_pid(&container).expect("sandboxd's pid"));
    nix::sys::signal::kill(sandboxd, nix::sys::signal::Signal::SIGSTOP).expect("stop sandboxd");
    let request = tokio::spawn(
        to(
            &s,
            &p.host,
            reqwest::Method::GET,
            &format!("/bytes?n={GIB}"),
        )
        .send(),
    );
    wait_for("the request to wait on the sandbox", || async {
        s.lc.activity().view(&id).busy
    })
    .await;
    let (status, _) = s
        .call(
            "DELETE",
            &format!("/api/v1/agents/{id}/previews/{}", p.id),
            None,
        )
        .await;
    assert_eq!(status, 204);
    nix::sys::signal::kill(sandboxd, nix::sys::signal::Signal::SIGCONT).expect("wake sandboxd");

    // The deleted preview lets nothing through: the request ends as one made after the delete.
    let r = tokio::time::timeout(DEADLINE, request)
        .await
        .expect("the request did not end")
        .expect("join")
        .expect("an answer");
    assert_eq!(r.status(), 410);
    s.stop().await;
}
