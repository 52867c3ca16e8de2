//! The tunnel endpoint against hostile peers: missing, wrong, foreign and stale tokens, garbage
//! bytes, oversized messages, oversized and unknown channel headers, and a peer that stops
//! answering pings.

use std::time::Duration;

use crate::common::TestServer;
use agenthold::store::hash_token;
use agenthold_proto::mux::{self, Mode};
use agenthold_proto::{self as proto, ErrorCode, Hello, Ping, Reply};
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest, Message};

const KNOWN: &str = "a-boot-token-the-test-knows";

async fn dial(
    s: &TestServer,
    agent: Option<&str>,
    token: Option<&str>,
) -> Result<crate::common::Ws, tungstenite::Error> {
    let mut req = format!("ws://{}/tunnel", s.tunnel_addr)
        .into_client_request()
        .unwrap();
    if let Some(a) = agent {
        req.headers_mut()
            .insert(agenthold_proto::boot::AGENT_HEADER, a.parse().unwrap());
    }
    if let Some(t) = token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

fn status_of(e: tungstenite::Error) -> u16 {
    match e {
        tungstenite::Error::Http(r) => r.status().as_u16(),
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

async fn know_token(s: &TestServer, id: &str) {
    s.store
        .set_boot_token_hash(id, Some(&hash_token(KNOWN)))
        .await
        .unwrap();
}

/// Connects as agent `a` with the known token and says hello, like a sandboxd would.
async fn say_hello(s: &TestServer, a: &str) -> mux::Session {
    let ws = dial(s, Some(a), Some(KNOWN)).await.unwrap();
    let session = mux::spawn(
        agenthold_proto::wsio::WsIo::new(agenthold_proto::wsio::tungstenite_bytes(ws)),
        Mode::Client,
    );
    let mut hello = session.handle.open().await.unwrap();
    let h = Hello {
        agent_id: a.to_string(),
        version: "test".into(),
        user: "root".into(),
        uid: 0,
        home: "/home/agent".into(),
    };
    proto::open(&mut hello, h).await.unwrap();
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_wrong_and_foreign_tokens_are_refused() {
    let s = TestServer::start().await;
    let a = s.running_agent("alpha").await;
    let b = s.running_agent("beta").await;
    know_token(&s, &a).await;
    assert_eq!(status_of(dial(&s, None, None).await.unwrap_err()), 401);
    assert_eq!(status_of(dial(&s, Some(&a), None).await.unwrap_err()), 401);
    assert_eq!(
        status_of(dial(&s, Some(&a), Some("wrong")).await.unwrap_err()),
        401
    );
    // A's token opens no other agent's tunnel.
    assert_eq!(
        status_of(dial(&s, Some(&b), Some(KNOWN)).await.unwrap_err()),
        401
    );
    assert_eq!(
        status_of(
            dial(&s, Some("nosuchagent"), Some(KNOWN))
                .await
                .unwrap_err()
        ),
        401
    );
    assert!(dial(&s, Some(&a), Some(KNOWN)).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_refused_once_the_agent_stopped() {
    let s = TestServer::start().await;
    let a = s.sleeping_agent("gamma").await;
    know_token(&s, &a).await;
    assert_eq!(
        status_of(dial(&s, Some(&a), Some(KNOWN)).await.unwrap_err()),
        409
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_end_only_that_connection() {
    let s = TestServer::start().await;
    let a = s.running_agent("delta").await;
    know_token(&s, &a).await;
    let mut ws = dial(&s, Some(&a), Some(KNOWN)).await.unwrap();
    ws.send(Message::Binary(
        vec![0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 255, 254].into(),
    ))
    .await
    .unwrap();
    ws.send(Message::Text("hello?".into())).await.unwrap();
    let ended = tokio::time::timeout(crate::common::DEADLINE, async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the server kept a garbage connection open");
    // The agent's real session is untouched.
    assert_eq!(s.exec(&a, &["echo", "fine"]).await["stdout"], "fine\n");
    assert_eq!(s.get("/api/v1/health").send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_ends_only_that_connection() {
    let s = TestServer::start().await;
    let a = s.running_agent("zeta").await;
    know_token(&s, &a).await;
    let mut ws = dial(&s, Some(&a), Some(KNOWN)).await.unwrap();
    let huge = vec![0u8; agenthold::tunnel::MAX_WS_MESSAGE + 1];
    // The server may close the connection while the message is still on its way.
    let _ = ws.send(Message::Binary(huge.into())).await;
    let ended = tokio::time::timeout(crate::common::DEADLINE, async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the server kept the connection open");
    assert_eq!(s.exec(&a, &["echo", "fine"]).await["stdout"], "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_headers_fail_their_stream_not_the_session() {
    let s = TestServer::start().await;
    let a = s.running_agent("epsilon").await;
    know_token(&s, &a).await;
    let session = say_hello(&s, &a).await;

    // A header that claims 100 MiB.
    let mut st = session.handle.open().await.unwrap();
    st.write_all(&(100u32 << 20).to_be_bytes()).await.unwrap();
    st.flush().await.unwrap();
    let reply: Reply = proto::read_message(&mut st).await.unwrap();
    match reply {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::TooLarge),
        other => panic!("accepted: {other:?}"),
    }
    // An unknown channel, and malformed JSON.
    for body in [br#"{"channel":"fs.format"}"#.to_vec(), b"{{{".to_vec()] {
        let mut st = session.handle.open().await.unwrap();
        st.write_all(&(body.len() as u32).to_be_bytes())
            .await
            .unwrap();
        st.write_all(&body).await.unwrap();
        st.flush().await.unwrap();
        let reply: Reply = proto::read_message(&mut st).await.unwrap();
        assert!(matches!(reply, Reply::Error(_)), "{body:?} accepted");
    }
    // A stream reset midway.
    let mut st = session.handle.open().await.unwrap();
    st.write_all(&50u32.to_be_bytes()).await.unwrap();
    st.write_all(b"{\"chan").await.unwrap();
    drop(st);
    // The session still serves.
    let mut ping = session.handle.open().await.unwrap();
    proto::open(&mut ping, Ping {}).await.unwrap();
    assert!(s.lc.tunnels().is_connected(&a));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_misses_pings_is_dropped() {
    let s = TestServer::start_with(|c| c.sandbox.ping_interval = Duration::from_millis(300)).await;
    let a = s.running_agent("zeta").await;
    know_token(&s, &a).await;
    // This peer says hello and then never answers anything.
    let session = say_hello(&s, &a).await;
    assert!(s.lc.tunnels().is_connected(&a));
    let driver = session.driver;
    tokio::time::timeout(crate::common::DEADLINE, driver)
        .await
        .expect("the server did not drop a silent peer")
        .unwrap()
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_wrong_tokens_is_counted_and_logged_once_per_window() {
    // The attacker: code in a sandbox that sends wrong tokens to the tunnel as fast as it can,
    // each naming an agent id of its choosing. Each is refused and counted; the log gets a line
    // per address per ten seconds, not a line per attempt.
    const ATTEMPTS: usize = 2000;
    let dir = tempfile::tempdir().unwrap();
    let server = crate::common::process::ServerConfig::write(
        dir.path(),
        "127.0.0.1",
        "  driver: fake\n",
        crate::common::DEADLINE,
    );
    let log = dir.path().join("server.log");
    let _process = server.start_logging_to(&log).await;
    let tunnel = format!("http://127.0.0.1:{}/tunnel", server.tunnel_port);
    let http = reqwest::Client::new();
    let began = std::time::Instant::now();
    for i in 0..ATTEMPTS {
        let r = http
            .get(&tunnel)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header(agenthold_proto::boot::AGENT_HEADER, format!("agent-{i}"))
            .header("authorization", "Bearer not-the-token")
            .send()
            .await
            .expect("the tunnel answers");
        assert_eq!(r.status(), 401);
    }
    let took = began.elapsed();
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics.contains(&format!(
            "agenthold_tunnel_refusals_total{{reason=\"invalid_token\"}} {ATTEMPTS}"
        )),
        "{metrics}"
    );
    let written = std::fs::read_to_string(&log).unwrap();
    let lines = written
        .lines()
        .filter(|l| l.contains("invalid token"))
        .count();
    // One line when the flood began, and one per ten seconds it lasted after that.
    let allowed = 1 + took.as_secs() as usize / 10;
    assert!(
        (1..=allowed).contains(&lines),
        "{lines} lines for {ATTEMPTS} attempts in {took:?}:\n{written}"
    );
}
