//! A terminal session through `terminal.open`, with one viewer that ends it when it leaves.

use std::time::Duration;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{Frame, FrameCodec, Request, TerminalOpen, TerminalOpened};
use futures::{SinkExt, StreamExt};
use tokio_util::codec::Framed;

use crate::harness::{eventually, pid_alive, Harness};

type Term = Framed<MuxStream, FrameCodec>;

async fn open(h: &Harness) -> Term {
    let req = Request::TerminalOpen(TerminalOpen {
        cols: Some(80),
        rows: Some(24),
        term: Some("dumb".into()),
        // The session ends with its one viewer.
        detach_secs: Some(0),
        ..Default::default()
    });
    let (s, r) = h.open(&req).await;
    let opened: TerminalOpened = serde_json::from_value(r.unwrap()).unwrap();
    assert!(opened.created);
    assert_eq!((opened.cols, opened.rows, opened.offset), (80, 24, 0));
    Framed::new(s, FrameCodec::default())
}

async fn type_line(t: &mut Term, line: &str) {
    t.send(Frame::Data(format!("{line}\n").into_bytes().into()))
        .await
        .unwrap();
}

/// Reads the screen until `needle` shows up; returns everything read.
async fn expect(t: &mut Term, needle: &str) -> String {
    let mut screen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !screen.contains(needle) {
        match tokio::time::timeout_at(deadline, t.next()).await {
            Ok(Some(Ok(Frame::Data(b)))) => screen.push_str(&String::from_utf8_lossy(&b)),
            // Every viewer hears of a resize, the one that asked included.
            Ok(Some(Ok(Frame::Resize { .. }))) => {}
            Ok(other) => {
                panic!("unexpected {other:?} while waiting for {needle:?}; screen: {screen}")
            }
            Err(_) => panic!("timed out waiting for {needle:?}; screen: {screen}"),
        }
    }
    screen
}

#[tokio::test]
async fn echo_resize_and_exit_code() {
    let h = Harness::start().await;
    let mut t = open(&h).await;
    // The arithmetic makes the output differ from the echoed keystrokes.
    type_line(&mut t, "echo hi-$((40+2))").await;
    expect(&mut t, "hi-42").await;

    t.send(Frame::Resize {
        cols: 100,
        rows: 40,
    })
    .await
    .unwrap();
    type_line(&mut t, "stty size").await;
    expect(&mut t, "40 100").await;

    type_line(&mut t, "exit 3").await;
    loop {
        match t.next().await {
            Some(Ok(Frame::Data(_) | Frame::Resize { .. })) => continue,
            Some(Ok(Frame::PtyExit(code))) => {
                assert_eq!(code, 3);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(t.next().await.is_none(), "frames after PtyExit");
}

#[tokio::test]
async fn the_shell_is_a_login_shell_in_the_home() {
    let h = Harness::start().await;
    let mut t = open(&h).await;
    type_line(&mut t, "echo \"[$0] [$PWD] [$TERM]\"").await;
    let home = h.home.path().display().to_string();
    let screen = expect(&mut t, &format!("[{home}] [dumb]")).await;
    assert!(screen.contains("[-"), "not a login shell: {screen}");
}

#[tokio::test]
async fn closing_the_terminal_hangs_up_the_shell() {
    let h = Harness::start().await;
    let mut t = open(&h).await;
    type_line(&mut t, "echo pid=$$.").await;
    let screen = expect(&mut t, ".\r\n").await;
    let screen = expect_pid(&mut t, screen).await;
    assert!(pid_alive(screen));
    drop(t);
    eventually(Duration::from_secs(10), "the shell to end", || {
        !pid_alive(screen)
    })
    .await;
}

/// Finds `pid=N.` in the output (not in the echoed command line, which has `$$`).
async fn expect_pid(t: &mut Term, mut screen: String) -> i32 {
    loop {
        if let Some(pid) = screen
            .split("pid=")
            .filter_map(|rest| rest.split('.').next()?.parse::<i32>().ok())
            .next()
        {
            return pid;
        }
        screen.push_str(&expect(t, ".").await);
    }
}
