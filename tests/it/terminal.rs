//! The terminal WebSocket end to end over the real tunnel: prompt, echo, resize, exit.

use crate::common::{read_until, send_keys, TestServer};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_echoes_resizes_and_closes_with_1000_on_exit() {
    let s = TestServer::start().await;
    let id = s.running_agent("term").await;
    let mut ws = s.terminal(&id, 80, 24).await;

    // The quotes keep the typed command from matching its own output.
    send_keys(&mut ws, "echo hello-'from'-the-shell\r").await;
    read_until(&mut ws, "hello-from-the-shell").await;

    send_keys(&mut ws, "stty size\r").await;
    read_until(&mut ws, "24 80").await;

    ws.send(Message::Text(
        r#"{"type":"resize","cols":132,"rows":43}"#.into(),
    ))
    .await
    .unwrap();
    send_keys(&mut ws, "stty size\r").await;
    read_until(&mut ws, "43 132").await;

    // A bad control message is ignored, not fatal.
    ws.send(Message::Text("{not json".into())).await.unwrap();
    send_keys(&mut ws, "echo still-'here'\r").await;
    read_until(&mut ws, "still-here").await;

    send_keys(&mut ws, "exit 3\r").await;
    let deadline = tokio::time::Instant::now() + crate::common::DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), 1000);
                break;
            }
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_wakes_a_sleeping_agent() {
    let s = TestServer::start().await;
    let id = s.sleeping_agent("sleepy").await;

    let mut ws = s.terminal(&id, 80, 24).await;
    read_until(&mut ws, "Starting the sandbox").await;
    send_keys(&mut ws, "echo awake-'now'\r").await;
    read_until(&mut ws, "awake-now").await;
    assert_eq!(s.state(&id).await, "running");
}

#[tokio::test]
async fn bad_terminal_sizes_are_refused() {
    let s = TestServer::start().await;
    let id = s.running_agent("sizes").await;
    for q in [
        "cols=0&rows=10",
        "cols=10&rows=5000",
        "cols=-1&rows=3",
        "cols=x",
    ] {
        let r = s
            .get(&format!("/api/v1/agents/{id}/terminal?{q}"))
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{q}");
    }
}
