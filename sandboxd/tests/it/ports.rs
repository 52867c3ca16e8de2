//! `ports.list` and `port.connect`: what listens, and a connection to the sandbox's loopback
//! and nowhere else.

use agenthold_proto::{ErrorCode, PortConnect, PortsList, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::Harness;

#[tokio::test]
async fn a_listener_is_listed_and_reached_through_port_connect() {
    let h = Harness::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        if let Ok((mut c, _)) = listener.accept().await {
            let mut buf = [0u8; 5];
            if c.read_exact(&mut buf).await.is_ok() {
                let _ = c.write_all(&buf.map(|b| b.to_ascii_uppercase())).await;
            }
        }
    });
    let (_, listed) = h.open(&Request::PortsList(PortsList {})).await;
    let listed = listed.expect("ports.list");
    assert!(
        listed["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["port"] == port && p["address"] == "127.0.0.1"),
        "{listed}"
    );
    let (mut s, ok) = h.open(&Request::PortConnect(PortConnect { port })).await;
    ok.expect("port.connect");
    s.write_all(b"hello").await.expect("write");
    let mut back = [0u8; 5];
    s.read_exact(&mut back).await.expect("read");
    assert_eq!(&back, b"HELLO");
}

#[tokio::test]
async fn nothing_listening_and_port_zero_are_refused_with_their_codes() {
    let h = Harness::start().await;
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let e = h
        .refused(&Request::PortConnect(PortConnect { port: free }))
        .await;
    assert_eq!(e.code, ErrorCode::Refused, "{e}");
    let e = h
        .refused(&Request::PortConnect(PortConnect { port: 0 }))
        .await;
    assert_eq!(e.code, ErrorCode::Invalid, "{e}");
}
