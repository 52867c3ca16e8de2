//! `process.attach`: a background process's output and its stdin on one stream, beside the
//! channels that take them one call at a time.

use std::time::Duration;

use agenthold_proto::process::MIN_OUTPUT;
use agenthold_proto::{
    ErrorCode, ExecRequest, Frame, FrameCodec, ProcessAttach, ProcessInfo, ProcessStart,
    ProcessState, ProcessStdin, Request,
};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::Framed;

use crate::harness::{exec_req, Harness};

/// How long a test waits for a frame before it fails.
const FRAME_WAIT: Duration = Duration::from_secs(10);

type Attached = Framed<agenthold_proto::mux::MuxStream, FrameCodec>;

/// A harness whose sandboxd runs background processes (their records in a directory of
/// their own, dropped with the test).
async fn harness() -> (Harness, tempfile::TempDir) {
    let records = tempfile::tempdir().unwrap();
    let dir = records.path().join("processes");
    let h = Harness::start_with(|o| o.process_dir = Some(dir)).await;
    (h, records)
}

async fn start(h: &Harness, run: ExecRequest, stdin: bool) -> ProcessInfo {
    let req = Request::ProcessStart(ProcessStart {
        run,
        stdin,
        output_bytes: MIN_OUTPUT,
        max_running: 8,
        ..Default::default()
    });
    let (_, reply) = h.open(&req).await;
    serde_json::from_value(reply.unwrap()).unwrap()
}

async fn attach(h: &Harness, process: &str, offset: u64) -> (ProcessInfo, Attached) {
    let req = Request::ProcessAttach(ProcessAttach {
        process: process.into(),
        offset,
    });
    let (s, reply) = h.open(&req).await;
    let info = serde_json::from_value(reply.unwrap()).unwrap();
    (info, Framed::new(s, FrameCodec::default()))
}

async fn next(f: &mut Attached) -> Option<Frame> {
    tokio::time::timeout(FRAME_WAIT, f.next())
        .await
        .expect("a frame in time")
        .map(|r| r.unwrap())
}

/// Reads stdout until it holds `want`, failing on anything else.
async fn stdout_until(f: &mut Attached, want: &[u8]) {
    let mut got = Vec::new();
    while got.len() < want.len() {
        match next(f).await {
            Some(Frame::Stdout(b)) => got.extend_from_slice(&b),
            other => panic!("expected stdout, got {other:?}"),
        }
    }
    assert_eq!(got, want);
}

#[tokio::test]
async fn one_stream_carries_stdin_in_and_output_out_until_the_end() {
    let (h, _records) = harness().await;
    let cat = start(&h, exec_req(&["cat"]), true).await;
    let (info, mut f) = attach(&h, &cat.id, 0).await;
    assert_eq!(info.state, ProcessState::Running);
    assert!(info.stdin_open);

    // A conversation: each answer comes back on the same stream before the next line goes.
    for line in ["hello\n", "second line\n"] {
        f.send(Frame::Data(Bytes::from(line))).await.unwrap();
        stdout_until(&mut f, line.as_bytes()).await;
    }
    f.send(Frame::StdinEof).await.unwrap();
    match next(&mut f).await {
        Some(Frame::Process(end)) => {
            assert_eq!(end.state, ProcessState::Exited);
            assert_eq!(end.exit_code, Some(0));
            assert_eq!(end.output_bytes, 18);
            assert!(!end.stdin_open);
        }
        other => panic!("expected the process's end, got {other:?}"),
    }
    assert!(next(&mut f).await.is_none(), "frames after the end");

    // Attached again after the end, from an offset: the rest of the output, then the end.
    let (_, mut again) = attach(&h, &cat.id, 6).await;
    assert_eq!(next(&mut again).await, Some(Frame::StdinEof));
    stdout_until(&mut again, b"second line\n").await;
    assert!(matches!(next(&mut again).await, Some(Frame::Process(_))));
}

#[tokio::test]
async fn a_stdin_that_is_not_open_is_said_once_and_what_is_sent_is_dropped() {
    let (h, _records) = harness().await;
    let p = start(&h, exec_req(&["sh", "-c", "read line; echo late"]), false).await;
    let (info, mut f) = attach(&h, &p.id, 0).await;
    assert!(!info.stdin_open);
    assert_eq!(next(&mut f).await, Some(Frame::StdinEof));
    f.send(Frame::Data(Bytes::from("ignored\n"))).await.unwrap();
    f.send(Frame::StdinEof).await.unwrap();
    // `read` meets /dev/null's end at once: only its own output and the end follow.
    stdout_until(&mut f, b"late\n").await;
    match next(&mut f).await {
        Some(Frame::Process(end)) => assert_eq!(end.state, ProcessState::Exited),
        other => panic!("expected the process's end, got {other:?}"),
    }
}

#[tokio::test]
async fn attached_writes_wait_behind_a_stdin_call_instead_of_failing() {
    let (h, _records) = harness().await;
    let cat = start(&h, exec_req(&["cat"]), true).await;
    let (_, mut f) = attach(&h, &cat.id, 0).await;
    // A `process.stdin` call that holds the pipe until it half-closes.
    let (mut call, reply) = h
        .open(&Request::ProcessStdin(ProcessStdin {
            process: cat.id.clone(),
            eof: false,
        }))
        .await;
    reply.unwrap();
    call.write_all(b"first\n").await.unwrap();
    stdout_until(&mut f, b"first\n").await;
    f.send(Frame::Data(Bytes::from("second\n"))).await.unwrap();
    call.shutdown().await.unwrap();
    stdout_until(&mut f, b"second\n").await;
}

#[tokio::test]
async fn refusals_and_a_server_that_leaves() {
    let (h, _records) = harness().await;
    let missing = h
        .refused(&Request::ProcessAttach(ProcessAttach {
            process: "nothing-here".into(),
            offset: 0,
        }))
        .await;
    assert_eq!(missing.code, ErrorCode::NotFound);
    let cat = start(&h, exec_req(&["cat"]), true).await;
    let past = h
        .refused(&Request::ProcessAttach(ProcessAttach {
            process: cat.id.clone(),
            offset: 1,
        }))
        .await;
    assert_eq!(past.code, ErrorCode::Invalid, "{past:?}");

    // The server leaving ends the attach, not the process, nor its stdin.
    let (_, f) = attach(&h, &cat.id, 0).await;
    drop(f);
    let (info, mut f) = attach(&h, &cat.id, 0).await;
    assert_eq!(info.state, ProcessState::Running);
    assert!(info.stdin_open);
    f.send(Frame::Data(Bytes::from("still here\n")))
        .await
        .unwrap();
    stdout_until(&mut f, b"still here\n").await;
}
