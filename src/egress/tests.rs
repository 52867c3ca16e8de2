//! The proxy on real sockets, in-process: "the internet" is servers on loopback under made-up
//! names (`resolve`), and every connection from loopback is agent `a1`'s sandbox.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::SocketAddrOrName;
use super::*;
use crate::bench::servers::{echo_server, hello_server};
use crate::config::EgressConfig;
use crate::events::{AgentEvent, EventHub};
use crate::listener::ConnectionLimiter;

mod intercept;

const AGENT: &str = "a1";
const DEADLINE: Duration = Duration::from_secs(10);

struct OneSandbox {
    rules: Mutex<EgressRules>,
    /// How often the proxy asked whose a connection is (a database look-up in the server).
    lookups: std::sync::atomic::AtomicUsize,
    hub: EventHub,
    granted: Mutex<Arc<Granted>>,
    /// The agent's egress log, as the server keeps it.
    log: EgressLog,
}

#[async_trait::async_trait]
impl Sandboxes for OneSandbox {
    async fn agent_at(&self, _local: IpAddr, peer: IpAddr) -> Option<String> {
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // 127.0.0.2 is no sandbox at all, 127.0.0.3 another agent's; the rest are the agent's.
        match peer {
            IpAddr::V4(v4) if v4.octets() == [127, 0, 0, 2] => None,
            IpAddr::V4(v4) if v4.octets() == [127, 0, 0, 3] => Some("a2".to_string()),
            _ => Some(AGENT.to_string()),
        }
    }
    async fn rules(&self, id: &str) -> Option<(String, EgressRules)> {
        let rules = self.rules.lock().unwrap().clone();
        (id == AGENT).then(|| ("builder".to_string(), rules))
    }
    async fn granted(&self, id: &str) -> Arc<Granted> {
        match id {
            AGENT => self.granted.lock().unwrap().clone(),
            _ => Arc::new(Granted::default()),
        }
    }
    fn publish(&self, event: EgressEvent) {
        self.log.record(&event);
        self.hub.publish(AgentEvent::Egress(Box::new(event)));
    }
    fn record(&self, event: &EgressEvent) {
        self.log.record(event);
    }
}

struct Setup {
    proxy: Arc<Proxy>,
    addr: SocketAddr,
    sandbox: Arc<OneSandbox>,
    events: broadcast::Receiver<AgentEvent>,
    shutdown: CancellationToken,
    /// The installation CA's directory.
    _data: tempfile::TempDir,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn rules(allow: &[&str], deny: &[&str]) -> EgressRules {
    let parse = |l: &[&str]| l.iter().map(|r| r.parse().unwrap()).collect();
    EgressRules {
        allow: parse(allow),
        deny: parse(deny),
    }
}

async fn setup(allow: &[&str], deny: &[&str], tune: impl FnOnce(&mut EgressConfig)) -> Setup {
    setup_with(allow, deny, tune, Granted::default(), None).await
}

/// [`setup`] with secrets granted to the agent, and `roots` (PEM) trusted toward destinations.
async fn setup_with(
    allow: &[&str],
    deny: &[&str],
    tune: impl FnOnce(&mut EgressConfig),
    granted: Granted,
    roots: Option<&str>,
) -> Setup {
    let mut config = EgressConfig {
        resolve: BTreeMap::from([
            ("pypi.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
            (
                "files.hosted.test".to_string(),
                IpAddr::V4(Ipv4Addr::LOCALHOST),
            ),
            ("hosted.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ("evil.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ]),
        ..EgressConfig::default()
    };
    tune(&mut config);
    let sandbox = Arc::new(OneSandbox {
        rules: Mutex::new(rules(allow, deny)),
        lookups: Default::default(),
        hub: EventHub::default(),
        granted: Mutex::new(Arc::new(granted)),
        log: EgressLog::default(),
    });
    let data = tempfile::tempdir().unwrap();
    let ca = Arc::new(InstallationCa::open(data.path()).unwrap());
    let interception = Arc::new(Interception::new(ca, roots).unwrap());
    let events = sandbox.hub.subscribe();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = Proxy::new(
        sandbox.clone(),
        // The proxy's own port stands for the server's ports.
        Dialer::new(config.dial_settings(), vec![], vec![addr.port()]),
        ProxySettings {
            max_connections: config.max_connections,
            limiter: ConnectionLimiter::new(
                "egress",
                config.max_total_connections,
                config.max_connections,
                Vec::new(),
            ),
            header_timeout: config.header_timeout,
            interception,
            secret_guard: config.secret_guard,
            body_budget: config.secret_body_budget_mb * 1024 * 1024,
            body_timeout: config.secret_body_timeout,
        },
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(proxy.clone().serve(listener, shutdown.clone()));
    Setup {
        proxy,
        addr,
        sandbox,
        events,
        shutdown,
        _data: data,
    }
}

impl Setup {
    /// Sets new rules and does what the server does on a PATCH: checks open connections.
    fn set_rules(&self, new: EgressRules) {
        *self.sandbox.rules.lock().unwrap() = new.clone();
        self.proxy.connections().recheck(AGENT, &new);
    }

    async fn next_egress(&mut self) -> EgressEvent {
        loop {
            let ev = tokio::time::timeout(DEADLINE, self.events.recv())
                .await
                .expect("an egress event in time")
                .expect("event hub open");
            if let AgentEvent::Egress(e) = ev {
                return *e;
            }
        }
    }
}

/// Sends `head` and reads the answer's status line and, for a refusal, its body.
async fn ask(proxy: SocketAddr, head: &str) -> (TcpStream, u16, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    tokio::time::timeout(DEADLINE, reader.read_line(&mut line))
        .await
        .expect("an answer in time")
        .unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).await.unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await.unwrap();
    (
        reader.into_inner(),
        status,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

async fn get_via_proxy(proxy: SocketAddr, url: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(format!("http://{proxy}")).unwrap())
        .build()
        .unwrap();
    let resp = client.get(url).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test]
async fn an_allowed_name_is_forwarded_and_others_get_403_naming_the_fix() {
    let mut s = setup(&["pypi.test"], &[], |_| {}).await;
    let port = hello_server("127.0.0.1:0").await.unwrap();
    let (status, body) = get_via_proxy(s.addr, &format!("http://pypi.test:{port}/simple/")).await;
    assert_eq!(
        (status, body.as_str()),
        (200, format!("hello from pypi.test:{port}\n").as_str())
    );
    let opened = s.next_egress().await;
    assert!(opened.allowed && !opened.closed, "{opened:?}");
    assert_eq!((opened.host.as_str(), opened.port), ("pypi.test", port));
    assert_eq!(opened.rule.as_deref(), Some("pypi.test"));
    let closed = s.next_egress().await;
    assert!(
        closed.closed && closed.bytes_down > 0 && closed.bytes_up > 0,
        "{closed:?}"
    );

    let (status, body) = get_via_proxy(s.addr, &format!("http://evil.test:{port}/")).await;
    assert_eq!(status, 403);
    assert_eq!(body.lines().count(), 1, "{body}");
    for part in [
        "builder",
        AGENT,
        &format!("evil.test:{port}"),
        "no allow rule",
        "agenthold egress a1 --allow evil.test",
    ] {
        assert!(body.contains(part), "{part} missing in {body}");
    }
    let refused = s.next_egress().await;
    assert!(!refused.allowed && refused.rule.is_none(), "{refused:?}");
}

#[tokio::test]
async fn wildcards_deny_cidr_and_port_rules_decide_as_written() {
    let port = hello_server("127.0.0.1:0").await.unwrap();
    let other = hello_server("127.0.0.1:0").await.unwrap();
    let s = setup(
        &["*.hosted.test", &format!("127.0.0.0/8:{port}")],
        &["evil.test"],
        |_| {},
    )
    .await;
    let get = |host: &'static str, p: u16| {
        let addr = s.addr;
        async move { get_via_proxy(addr, &format!("http://{host}:{p}/")).await.0 }
    };
    assert_eq!(
        get("files.hosted.test", other).await,
        200,
        "a subdomain matches the wildcard"
    );
    assert_eq!(get("hosted.test", other).await, 403, "the apex does not");
    // The CIDR rule allows the loopback address given as an address, on its port only. (An
    // address is refused as not public unless the operator's own resolve map gave it, so the
    // names here are mapped ones.)
    assert_eq!(
        get("pypi.test", port).await,
        200,
        "the CIDR rule matches the address"
    );
    assert_eq!(get("pypi.test", other).await, 403, "but only on its port");
    assert_eq!(
        get("evil.test", port).await,
        403,
        "deny wins over the CIDR allow"
    );
}

#[tokio::test]
async fn connect_tunnels_and_a_rule_change_closes_it() {
    let echo = echo_server("127.0.0.1:0", b"").await.unwrap();
    let mut s = setup(&["pypi.test"], &[], |_| {}).await;
    let (stream, status, _) = ask(
        s.addr,
        &format!("CONNECT pypi.test:{echo} HTTP/1.1\r\nHost: pypi.test:{echo}\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200);
    let mut stream = stream;
    stream.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(DEADLINE, stream.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"ping");
    assert!(s.next_egress().await.allowed);

    s.set_rules(rules(&["other.test"], &[]));
    let closed = s.next_egress().await;
    assert!(
        closed.closed && closed.bytes_up == 4 && closed.bytes_down == 4,
        "{closed:?}"
    );
    assert!(closed
        .reason
        .unwrap_or_default()
        .contains("no longer allow"));
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(1), stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the tunnel is closed within a second");

    // A new connection follows the new rules at once.
    let (_, status, _) = ask(
        s.addr,
        &format!("CONNECT pypi.test:{echo} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn star_never_reaches_loopback_or_private_addresses() {
    let echo = echo_server("127.0.0.1:0", b"").await.unwrap();
    let s = setup(&["*"], &[], |_| {}).await;
    for target in [
        format!("127.0.0.1:{echo}"),
        format!("localhost:{echo}"),
        format!("[::1]:{echo}"),
        "10.0.0.5:80".to_string(),
        "169.254.169.254:80".to_string(),
        format!("[::ffff:127.0.0.1]:{echo}"),
        // The operator's own names are public destinations to no one: `*` does not reach them
        // (an explicit rule does, see the tests above), nor the server's own port.
        format!("pypi.test:{echo}"),
        format!("pypi.test:{}", s.addr.port()),
    ] {
        let (_, status, body) = ask(s.addr, &format!("CONNECT {target} HTTP/1.1\r\n\r\n")).await;
        assert_eq!(status, 403, "{target}: {body}");
        assert!(body.contains("not a public address"), "{target}: {body}");
    }
}

#[tokio::test]
async fn a_range_that_covers_everything_reaches_no_private_address_either() {
    // The operator allowed `0.0.0.0/0` (or `::/0`) meaning "the public internet"; the sandbox
    // asks for a name the operator maps to a loopback service. Like `*`, the wide range does not
    // open it; only a rule inside the private range (`127.0.0.0/8`) or the name itself does.
    let echo = echo_server("127.0.0.1:0", b"").await.unwrap();
    for wide in [&["0.0.0.0/0"][..], &["0.0.0.0/1"], &["0.0.0.0/0", "::/0"]] {
        let s = setup(wide, &[], |_| {}).await;
        let (_, status, body) = ask(
            s.addr,
            &format!("CONNECT pypi.test:{echo} HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 403, "{wide:?}: {body}");
        assert!(body.contains("not a public address"), "{wide:?}: {body}");
    }
    for narrow in ["127.0.0.0/8", "127.0.0.1", "pypi.test"] {
        let s = setup(&[narrow], &[], |_| {}).await;
        let (_, status, body) = ask(
            s.addr,
            &format!("CONNECT pypi.test:{echo} HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200, "{narrow}: {body}");
    }
}

#[tokio::test]
async fn hostile_requests_get_clear_errors_and_limits() {
    let s = setup(&["pypi.test"], &[], |c| {
        c.max_connections = 4;
        c.header_timeout = Duration::from_millis(500);
    })
    .await;
    // A 100 KiB CONNECT line.
    let huge = format!(
        "CONNECT {}.test:443 HTTP/1.1\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let mut st = TcpStream::connect(s.addr).await.unwrap();
    let _ = st.write_all(huge.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, st.read_to_end(&mut answer))
        .await
        .expect("closed in time");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 414") || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );

    // Headers that never finish: closed after the header timeout.
    let mut slow = TcpStream::connect(s.addr).await.unwrap();
    slow.write_all(b"CONNECT pypi.test:443 HTTP/1.1\r\nX-A: 1\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(DEADLINE, slow.read_to_end(&mut buf))
        .await
        .expect("closed in time")
        .ok();

    // Not a destination at all.
    let (_, status, body) = ask(s.addr, "CONNECT nothing HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, 400, "{body}");
    let (_, status, body) = ask(
        s.addr,
        "GET https://pypi.test/ HTTP/1.1\r\nHost: pypi.test\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("CONNECT"), "{body}");

    // The cap on one agent's connections: the fifth is refused with 429 at once.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        // A request in progress proves the proxy took the connection (and counted it).
        c.write_all(b"GET http://pypi.test:1/ HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(c);
    }
    let counted = async {
        loop {
            let mut c = TcpStream::connect(s.addr).await.unwrap();
            let mut line = String::new();
            let mut r = BufReader::new(&mut c);
            let _ = r.read_line(&mut line).await;
            if line.contains("429") {
                return line;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let line = tokio::time::timeout(DEADLINE, counted)
        .await
        .expect("a 429 once four are held");
    assert!(line.starts_with("HTTP/1.1 429"), "{line}");
}

/// Connects to `to` from the loopback address `source`.
async fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// What a connection reads until the proxy closes it, or `None` if it stays open past `within`.
async fn read_to_close(c: &mut TcpStream, within: Duration) -> Option<String> {
    let mut buf = Vec::new();
    tokio::time::timeout(within, c.read_to_end(&mut buf))
        .await
        .ok()
        .map(|_| String::from_utf8_lossy(&buf).into_owned())
}

#[tokio::test]
async fn a_flood_from_one_address_is_refused_before_any_lookup_and_closed_at_once() {
    // The attacker: a sandbox (or anything on its network) that opens connection after
    // connection with a header that never ends. Its address holds at most its cap; the rest
    // are answered and closed without the server looking up whose they are.
    let s = setup(&["pypi.test"], &[], |c| {
        c.max_connections = 4;
        c.max_total_connections = 6;
        // Long, so that the held ones are still held when the flood comes.
        c.header_timeout = Duration::from_secs(60);
    })
    .await;
    let lookups = || s.sandbox.lookups.load(std::sync::atomic::Ordering::Relaxed);
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = connect_from("127.0.0.2", s.addr).await;
        c.write_all(b"GET http://pypi.test:1/ HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(c);
    }
    // Each of the held ones was looked up once (it is from no sandbox: answered 403 and closed).
    for c in &mut held {
        let answer = read_to_close(c, DEADLINE).await.expect("closed");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }
    assert_eq!(lookups(), 4);
    // Now four that the proxy holds (from the sandbox, with a header that never ends)...
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = connect_from("127.0.0.1", s.addr).await;
        c.write_all(b"GET http://pypi.test:1/ HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(c);
    }
    wait_until("the four are looked up", || lookups() == 8).await;
    // ...and a flood from the same address: each is answered 429 and closed at once, with no
    // lookup, no task and no linger.
    for _ in 0..200 {
        let mut c = connect_from("127.0.0.1", s.addr).await;
        let answer = read_to_close(&mut c, DEADLINE)
            .await
            .expect("closed at once");
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(
            answer.contains("sandbox.egress.max_connections"),
            "{answer}"
        );
    }
    assert_eq!(lookups(), 8, "a refused connection cost a lookup");
    // The proxy's total: two more from another agent fill it, the next gets 503.
    let mut others = Vec::new();
    for _ in 0..2 {
        others.push(connect_from("127.0.0.3", s.addr).await);
    }
    wait_until("the two are looked up", || lookups() == 10).await;
    let mut c = connect_from("127.0.0.4", s.addr).await;
    let answer = read_to_close(&mut c, DEADLINE)
        .await
        .expect("closed at once");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("sandbox.egress.max_total_connections"),
        "{answer}"
    );
    // Once the held ones close, the address is served again.
    drop(held);
    drop(others);
    let served = async {
        loop {
            let (_, status, _) = ask(
                s.addr,
                "GET http://pypi.test:1/ HTTP/1.1\r\nHost: pypi.test:1\r\n\r\n",
            )
            .await;
            if status != 429 {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let status = tokio::time::timeout(DEADLINE, served)
        .await
        .expect("served again");
    assert_eq!(
        status, 502,
        "pypi.test:1 answers nothing: a 502, not a refusal"
    );
}

/// Polls `check` until it holds, failing after [`DEADLINE`].
async fn wait_until(what: &str, check: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_upstream_proxy_carries_allowed_connections() {
    let echo = echo_server("127.0.0.1:0", b"").await.unwrap();
    // A minimal upstream: records the CONNECT target, then splices to the echo server (so no
    // packet goes to the public address the sandbox named).
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_port = upstream.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen_by_upstream = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = upstream.accept().await {
            let seen = seen_by_upstream.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(s);
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                seen.lock().unwrap().push(line.trim().to_string());
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).await.unwrap();
                    if h == "\r\n" {
                        break;
                    }
                }
                let mut client = reader.into_inner();
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                let mut target = TcpStream::connect(("127.0.0.1", echo)).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut target).await;
            });
        }
    });
    let s = setup(&["203.0.113.0/24:443"], &[], |c| {
        c.upstream_proxy = Some(SocketAddrOrName {
            host: "127.0.0.1".into(),
            port: up_port,
        });
    })
    .await;
    let (mut stream, status, body) = ask(s.addr, "CONNECT 203.0.113.9:443 HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, 200, "{body}");
    stream.write_all(b"via").await.unwrap();
    let mut buf = [0u8; 3];
    tokio::time::timeout(DEADLINE, stream.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"via");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["CONNECT 203.0.113.9:443 HTTP/1.1"]
    );
}

#[tokio::test]
async fn open_tunnels_count_against_the_cap_until_they_close() {
    let echo = echo_server("127.0.0.1:0", b"").await.unwrap();
    let s = setup(&["pypi.test"], &[], |c| c.max_connections = 2).await;
    let connect = format!("CONNECT pypi.test:{echo} HTTP/1.1\r\n\r\n");
    let (first, status, _) = ask(s.addr, &connect).await;
    assert_eq!(status, 200);
    let (_second, status, _) = ask(s.addr, &connect).await;
    assert_eq!(status, 200);
    // Both tunnels are past hyper's part of their connections, and still count.
    let (_, status, body) = ask(s.addr, &connect).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("max_connections"), "{body}");
    drop(first);
    let freed = async {
        loop {
            let (_, status, _) = ask(s.addr, &connect).await;
            if status == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(DEADLINE, freed)
        .await
        .expect("a closed tunnel frees its place");
}

/// A tunnel carries a large payload both ways intact, with the bytes the client sent right
/// behind its request head (which the HTTP parser may already have read) first, closes half
/// by half, and reports the byte counts each way.
#[tokio::test]
async fn a_tunnel_carries_a_large_payload_intact_and_tallies_it() {
    let echo = echo_server("127.0.0.1:0", b"").await.unwrap();
    let mut s = setup(&["pypi.test"], &[], |_| {}).await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    stream
        .write_all(format!("CONNECT pypi.test:{echo} HTTP/1.1\r\n\r\nearly").as_bytes())
        .await
        .unwrap();
    // The answer's head, byte by byte so that nothing after it is taken.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        tokio::time::timeout(DEADLINE, stream.read_exact(&mut b))
            .await
            .expect("an answer in time")
            .unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    assert!(s.next_egress().await.allowed);

    let mut payload = b"early".to_vec();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    payload.extend((0..(24 << 20)).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    let (mut r, mut w) = stream.split();
    let body = payload[5..].to_vec();
    let write = async {
        w.write_all(&body).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut back = Vec::new();
    let read = async {
        tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut back))
            .await
            .expect("the echo ends in time")
            .unwrap()
    };
    tokio::join!(write, read);
    assert_eq!(back.len(), payload.len());
    // Compared, not hashed: unoptimised SHA-256 of tens of MiB is seconds of a test's CPU.
    assert!(back == payload, "the bytes came back changed");
    let closed = s.next_egress().await;
    let n = payload.len() as u64;
    assert!(
        closed.closed && closed.bytes_up == n && closed.bytes_down == n && closed.reason.is_none(),
        "{closed:?}"
    );
}
