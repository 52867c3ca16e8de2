use std::time::Duration;

use agenthold_proto::{self as proto, ErrorCode, Reply};
use tokio::io::AsyncWriteExt;

use crate::harness::Harness;

async fn raw_header(h: &Harness, bytes: &[u8]) -> Reply {
    let mut s = h.server.open().await.unwrap();
    s.write_all(bytes).await.unwrap();
    s.flush().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), proto::read_message(&mut s))
        .await
        .expect("no reply")
        .unwrap()
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

#[tokio::test]
async fn bad_headers_cost_only_their_stream() {
    let h = Harness::start().await;
    let cases: [(Vec<u8>, ErrorCode); 4] = [
        (
            framed(br#"{"channel":"fs.format","path":"x"}"#),
            ErrorCode::UnknownChannel,
        ),
        (
            (100u32 * 1024 * 1024).to_be_bytes().to_vec(),
            ErrorCode::TooLarge,
        ),
        (framed(b"\xff not json"), ErrorCode::Invalid),
        (framed(br#"{"channel":"hello"}"#), ErrorCode::Invalid),
    ];
    for (bytes, code) in cases {
        match raw_header(&h, &bytes).await {
            Reply::Error(e) => assert_eq!(e.code, code, "{}", e.message),
            Reply::Ok(v) => panic!("accepted: {v}"),
        }
        h.ping().await;
    }
}

#[tokio::test]
async fn hello_comes_first_and_activity_flows() {
    let mut h = Harness::start().await;
    let hello = h.hellos.recv().await.unwrap();
    assert_eq!(hello.agent_id, crate::harness::AGENT_ID);
    assert_eq!(hello.home, "/home/agent");
    assert_eq!(hello.uid, nix::unistd::getuid().as_raw());
    assert_eq!(hello.version, proto::VERSION);

    // A busy command counts; the reported total rises past zero and never falls.
    let busy = agenthold_proto::ExecRequest {
        command: vec!["sh".into(), "-c".into(), "while :; do :; done".into()],
        timeout_ms: Some(3000),
        ..Default::default()
    };
    let (_, dummy) = tokio::sync::mpsc::unbounded_channel();
    let mut activity = std::mem::replace(&mut h.activity, dummy);
    let run = h.exec(busy, b"");
    let watch = async {
        let mut last = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let v = tokio::time::timeout_at(deadline, activity.recv())
                .await
                .expect("no activity above zero")
                .unwrap();
            assert!(v >= last, "activity went down: {v} < {last}");
            last = v;
            if v > 100 {
                return v;
            }
        }
    };
    let (out, cpu) = tokio::join!(run, watch);
    assert!(out.exit.timed_out);
    assert!(cpu > 100);
}

#[tokio::test]
async fn only_headers_that_carry_commands_or_env_may_pass_64_kib() {
    let h = Harness::start().await;
    // The file channels keep the small limit (exec, process starts and terminal opens, which
    // may carry an agent's env, have the large one); the session goes on.
    for body in [
        serde_json::json!({"channel": "fs.list", "path": "x".repeat(100_000)}),
        serde_json::json!({"channel": "fs.write", "path": "p".repeat(100_000)}),
    ] {
        let bytes = framed(body.to_string().as_bytes());
        match raw_header(&h, &bytes).await {
            Reply::Error(e) => {
                assert_eq!(e.code, ErrorCode::TooLarge, "{}", e.message);
                assert!(e.message.contains("65536"), "{}", e.message);
            }
            Reply::Ok(v) => panic!("a 100 KB header was accepted: {v}"),
        }
    }
    let exec = serde_json::json!({"channel": "exec", "command": ["true", "y".repeat(100_000)]});
    let bytes = framed(exec.to_string().as_bytes());
    assert!(matches!(raw_header(&h, &bytes).await, Reply::Ok(_)));
    h.ping().await;
}
