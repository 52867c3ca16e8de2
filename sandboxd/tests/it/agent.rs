use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agenthold_proto::boot::{BootConfig, AGENT_HEADER};
use agenthold_proto::mux;
use agenthold_proto::{self as proto, Frame, FrameCodec, Reply, Request};
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::server::{
    ErrorResponse, Request as HttpRequest, Response,
};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use crate::harness::{eventually, exec_req, group_alive, options};

const TOKEN: &str = "s3cret-token";

#[tokio::test]
// The callback's error type is fixed by tungstenite.
#[allow(clippy::result_large_err)]
async fn run_dials_says_hello_and_cleans_up_on_cancel() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let home = tempfile::tempdir().unwrap();
    let boot = BootConfig {
        agent_id: "a1".into(),
        token: TOKEN.into(),
        tunnel_url: format!("ws://{addr}/tunnel"),
        env: Default::default(),
        ca_certificates: None,
    };
    let shutdown = CancellationToken::new();
    let agent = tokio::spawn(sandboxd::run(boot, options(home.path()), shutdown.clone()));

    // The first upgrade is refused the way a server does before the agent is marked starting;
    // sandboxd must come back.
    let attempts = Arc::new(AtomicUsize::new(0));
    let ws = loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let n = attempts.fetch_add(1, Ordering::SeqCst);
        let check = |req: &HttpRequest, resp: Response| -> Result<Response, ErrorResponse> {
            let auth = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            let agent = req
                .headers()
                .get(AGENT_HEADER)
                .and_then(|v| v.to_str().ok());
            assert_eq!(auth, Some(format!("Bearer {TOKEN}").as_str()));
            assert_eq!(agent, Some("a1"));
            assert_eq!(req.uri().path(), "/tunnel");
            if n == 0 {
                let mut refuse = ErrorResponse::new(None);
                *refuse.status_mut() = StatusCode::UNAUTHORIZED;
                return Err(refuse);
            }
            Ok(resp)
        };
        match tokio_tungstenite::accept_hdr_async(tcp, check).await {
            Ok(ws) => break ws,
            Err(_) => assert_eq!(n, 0, "only the first attempt is refused"),
        }
    };
    let io = agenthold_proto::wsio::WsIo::new(agenthold_proto::wsio::tungstenite_bytes(ws));
    let mut session = mux::spawn(io, mux::Mode::Server);

    let mut hello_stream = session.inbound.recv().await.unwrap();
    match proto::read_request(&mut hello_stream).await.unwrap() {
        Request::Hello(h) => assert_eq!(h.agent_id, "a1"),
        other => panic!("first channel was {other:?}"),
    }
    proto::write_message(&mut hello_stream, &Reply::ok())
        .await
        .unwrap();
    // Keep answering whatever sandboxd opens next (activity, pings).
    let mut inbound = session.inbound;
    tokio::spawn(async move {
        while let Some(mut s) = inbound.recv().await {
            tokio::spawn(async move {
                if proto::read_request(&mut s).await.is_ok() {
                    let _ = proto::write_message(&mut s, &Reply::ok()).await;
                    let mut sink = Vec::new();
                    let _ = tokio::io::AsyncReadExt::read_to_end(&mut s, &mut sink).await;
                }
            });
        }
    });

    // A long-running command with a grandchild, then cancel: both must die.
    let mut s = session.handle.open().await.unwrap();
    let req = exec_req(&["sh", "-c", "echo $$; sleep 100 & sleep 100"]);
    proto::open(&mut s, req).await.unwrap();
    let mut f = Framed::new(s, FrameCodec::default());
    let pgid: i32 = match f.next().await.unwrap().unwrap() {
        Frame::Stdout(b) => String::from_utf8_lossy(&b).trim().parse().unwrap(),
        other => panic!("unexpected {other:?}"),
    };
    assert!(group_alive(pgid));

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), agent)
        .await
        .expect("run did not stop")
        .unwrap()
        .unwrap();
    eventually(Duration::from_secs(5), "the command to be gone", || {
        !group_alive(pgid)
    })
    .await;
}

#[tokio::test]
async fn names_in_the_tunnel_url_are_refused() {
    let boot = BootConfig {
        agent_id: "a1".into(),
        token: TOKEN.into(),
        tunnel_url: "ws://server.example:8090/tunnel".into(),
        env: Default::default(),
        ca_certificates: None,
    };
    let home = tempfile::tempdir().unwrap();
    let err = sandboxd::run(boot, options(home.path()), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("IP address"), "{err}");
}
