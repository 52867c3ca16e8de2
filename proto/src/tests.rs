//! Hostile and honest peers against the header, channel and frame codecs.

use crate::frame::{K_GAP, K_PROCESS, K_REDRAW, K_RESIZE};
use crate::*;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{FramedRead, FramedWrite};

#[tokio::test]
async fn header_round_trip() {
    let (mut a, mut b) = tokio::io::duplex(1024);
    let req = Request::FsRemove(FsRemove {
        path: "x".into(),
        recursive: true,
    });
    write_message(&mut a, &req).await.unwrap();
    assert_eq!(read_request(&mut b).await.unwrap(), req);
}

#[tokio::test]
async fn oversized_header_is_refused_before_reading() {
    let (mut a, mut b) = tokio::io::duplex(1024);
    a.write_all(&(100u32 * 1024 * 1024).to_be_bytes())
        .await
        .unwrap();
    assert!(matches!(
        read_request(&mut b).await,
        Err(ProtoError::HeaderTooLarge { len, .. }) if len == 100 * 1024 * 1024
    ));
}

/// The worst case for JSON: every byte a control character, escaped as `\u00XX`.
fn worst_exec(total: usize) -> ExecRequest {
    let arg_len = 100 * 1024 - 1;
    let mut command = vec!["sh".to_string()];
    let mut left = total - 3;
    while left > 0 {
        let n = left.min(arg_len + 1);
        command.push("\u{1}".repeat(n - 1));
        left -= n;
    }
    ExecRequest {
        command,
        cwd: Some("d".repeat(MAX_PATH_LEN)),
        timeout_ms: Some(u64::MAX),
        output_cap: Some(u64::MAX),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_exec_header_within_the_limits_reaches_sandboxd_only() {
    let req = Request::Exec(worst_exec(MAX_EXEC_ARGS_LEN));
    let Request::Exec(exec) = &req else {
        unreachable!()
    };
    assert_eq!(exec.check_size(), Ok(MAX_EXEC_ARGS_LEN));
    let sent = serde_json::to_vec(&req).unwrap().len();
    assert!(sent > 6 * 1000 * 1000, "not the worst case: {sent} bytes");

    // sandboxd reads what the server sends with the exec limit...
    let (mut a, mut b) = tokio::io::duplex(1 << 16);
    let (w, r) = tokio::join!(write_request(&mut a, &req), read_server_request(&mut b));
    w.unwrap();
    assert_eq!(r.unwrap(), req);

    // ...the server reads what sandboxd sends with the small one, whatever the channel.
    let (mut a, mut b) = tokio::io::duplex(1 << 16);
    a.write_all(&(sent as u32).to_be_bytes()).await.unwrap();
    assert!(matches!(
        read_request(&mut b).await,
        Err(ProtoError::HeaderTooLarge { len, limit: MAX_HEADER_LEN }) if len == sent
    ));
    assert!(matches!(
        write_message(&mut a, &req).await,
        Err(ProtoError::HeaderTooLarge { .. })
    ));
}

#[tokio::test]
async fn a_terminal_with_a_large_env_reaches_sandboxd() {
    // An agent's env may be 128 values of 4096 characters, six bytes each in JSON at worst.
    let env: Vec<(String, String)> = (0..128)
        .map(|i| (format!("V{i}"), "\u{1}".repeat(4096)))
        .collect();
    let req = Request::TerminalOpen(TerminalOpen {
        env,
        ..Default::default()
    });
    assert!(serde_json::to_vec(&req).unwrap().len() > 3 * 1000 * 1000);
    let (mut a, mut b) = tokio::io::duplex(1 << 16);
    let (w, r) = tokio::join!(write_request(&mut a, &req), read_server_request(&mut b));
    w.unwrap();
    assert_eq!(r.unwrap(), req);
}

#[tokio::test]
async fn other_channels_keep_the_small_header_limit() {
    let big = Request::FsList(FsList {
        path: "x".repeat(MAX_HEADER_LEN),
    });
    let (mut a, _b) = tokio::io::duplex(1024);
    assert!(matches!(
        write_request(&mut a, &big).await,
        Err(ProtoError::HeaderTooLarge {
            limit: MAX_HEADER_LEN,
            ..
        })
    ));
    // Sent anyway (a broken server): refused once its channel is known.
    for req in [
        big,
        Request::FsWrite(FsWrite {
            path: "p".repeat(MAX_HEADER_LEN),
            parents: false,
        }),
    ] {
        let body = serde_json::to_vec(&req).unwrap();
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let write = async {
            a.write_all(&(body.len() as u32).to_be_bytes()).await?;
            a.write_all(&body).await
        };
        let (w, r) = tokio::join!(write, read_server_request(&mut b));
        w.unwrap();
        assert!(matches!(
            r,
            Err(ProtoError::HeaderTooLarge {
                limit: MAX_HEADER_LEN,
                ..
            })
        ));
    }
    // Longer than any exec header: refused before reading.
    let (mut a, mut b) = tokio::io::duplex(1024);
    a.write_all(&((MAX_EXEC_HEADER_LEN + 1) as u32).to_be_bytes())
        .await
        .unwrap();
    assert!(matches!(
        read_server_request(&mut b).await,
        Err(ProtoError::HeaderTooLarge {
            limit: MAX_EXEC_HEADER_LEN,
            ..
        })
    ));
}

#[test]
fn exec_size_limits() {
    assert!(matches!(
        worst_exec(MAX_EXEC_ARGS_LEN + 1).check_size(),
        Err(ExecTooLarge::Total(n)) if n == MAX_EXEC_ARGS_LEN + 1
    ));
    let one = |arg: String| ExecRequest {
        command: vec!["sh".into(), "-c".into(), arg],
        ..Default::default()
    };
    assert_eq!(
        one("a".repeat(MAX_EXEC_ARG_LEN - 1)).check_size(),
        Ok(3 + 3 + MAX_EXEC_ARG_LEN)
    );
    let err = one("a".repeat(200_000)).check_size().unwrap_err();
    assert_eq!(
        err,
        ExecTooLarge::Argument {
            index: 2,
            len: 200_000
        }
    );
    assert!(err.to_string().contains("131071"), "{err}");
    let env = |len: usize| ExecRequest {
        command: vec!["env".into()],
        env: vec![("K".into(), "v".repeat(len))],
        ..Default::default()
    };
    // "K=" and the value make 131071 bytes, the most Linux takes.
    assert!(env(MAX_EXEC_ARG_LEN - 3).check_size().is_ok());
    assert!(matches!(
        env(MAX_EXEC_ARG_LEN - 2).check_size(),
        Err(ExecTooLarge::EnvVar { len, .. }) if len == MAX_EXEC_ARG_LEN
    ));
    // 10,000 variables are fine while their bytes are.
    let many = ExecRequest {
        command: vec!["env".into()],
        env: (0..10_000)
            .map(|i| (format!("V{i}"), "x".repeat(50)))
            .collect(),
        ..Default::default()
    };
    assert!(many.check_size().is_ok());
}

#[tokio::test]
async fn unknown_and_malformed_headers_are_told_apart() {
    assert!(matches!(
        Request::parse(br#"{"channel":"fs.format"}"#),
        Err(ProtoError::UnknownChannel(c)) if c == "fs.format"
    ));
    assert!(matches!(
        Request::parse(b"\xff\x00garbage"),
        Err(ProtoError::Malformed(_))
    ));
    assert!(matches!(
        Request::parse(br#"{"channel":"fs.read"}"#),
        Err(ProtoError::Malformed(_))
    ));
    assert!(matches!(
        Request::parse(br#"{"path":"x"}"#),
        Err(ProtoError::Malformed(_))
    ));
    assert!(matches!(
        Request::parse(br#"{"channel":"terminal.open","offset":-1}"#),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn terminal_headers_round_trip_and_default() {
    let open =
        Request::parse(br#"{"channel":"terminal.open","session":"abc","offset":7}"#).unwrap();
    assert_eq!(
        open,
        Request::TerminalOpen(TerminalOpen {
            session: Some("abc".into()),
            offset: Some(7),
            ..Default::default()
        })
    );
    for req in [
        Request::TerminalList(TerminalList {}),
        Request::TerminalKill(TerminalKill {
            session: "x".into(),
        }),
    ] {
        let json = serde_json::to_vec(&req).unwrap();
        assert_eq!(Request::parse(&json).unwrap(), req);
    }
}

#[tokio::test]
async fn truncated_header_is_eof() {
    let (mut a, mut b) = tokio::io::duplex(1024);
    a.write_all(&10u32.to_be_bytes()).await.unwrap();
    a.write_all(b"{\"ch").await.unwrap();
    drop(a);
    assert!(matches!(read_request(&mut b).await, Err(ProtoError::Eof)));
}

#[tokio::test]
async fn frames_round_trip() {
    let (a, b) = tokio::io::duplex(1 << 20);
    let mut w = FramedWrite::new(a, FrameCodec::default());
    let mut r = FramedRead::new(b, FrameCodec::default());
    let frames = vec![
        Frame::Data(Bytes::from_static(b"hi")),
        Frame::Stdout(Bytes::from(vec![7u8; DATA_CHUNK])),
        Frame::Stderr(Bytes::new()),
        Frame::StdinEof,
        Frame::Resize {
            cols: 120,
            rows: 40,
        },
        Frame::PtyExit(-3),
        Frame::ExecExit(ExecExit {
            exit_code: 2,
            timed_out: true,
            duration_ms: 5,
            truncated: false,
        }),
        Frame::Activity {
            cpu_ms: 1 << 40,
            keep_awake: false,
        },
        Frame::Activity {
            cpu_ms: 3,
            keep_awake: true,
        },
        Frame::Redraw {
            offset: u64::MAX - 1,
            len: 70_000,
        },
        Frame::Gap {
            from: 3,
            to: 1 << 33,
        },
        Frame::Process(Box::new(ProcessInfo {
            id: "p".into(),
            tag: Some("t".into()),
            command: vec!["sleep".into(), "1".into()],
            pid: Some(42),
            state: ProcessState::Killed,
            exit_code: None,
            signal: Some("TERM".into()),
            timed_out: true,
            started_at_ms: 1,
            ended_at_ms: Some(2),
            output_bytes: 10,
            output_start: 4,
            keep_awake: true,
            stdin_open: false,
            run_as: crate::RunAs::Agent,
        })),
    ];
    for f in frames.clone() {
        w.send(f).await.unwrap();
    }
    for f in frames {
        assert_eq!(r.next().await.unwrap().unwrap(), f);
    }
}

#[tokio::test]
async fn hostile_frames_are_errors() {
    for raw in [
        (100u32 * 1024 * 1024).to_be_bytes().to_vec(),
        vec![0, 0, 0, 1, 99],
        vec![0, 0, 0, 2, K_RESIZE, 1],
        vec![0, 0, 0, 5, K_REDRAW, 0, 0, 0, 1],
        vec![0, 0, 0, 9, K_GAP, 0, 0, 0, 0, 0, 0, 0, 1],
        vec![0, 0, 0, 3, K_PROCESS, b'{', b'}'],
        vec![0, 0, 0, 0],
    ] {
        let mut r = FramedRead::new(&raw[..], FrameCodec::default());
        assert!(r.next().await.unwrap().is_err(), "{raw:?} was accepted");
    }
}

#[test]
fn every_channel_is_named_once_and_keeps_its_wire_form() {
    // The header of a channel without parameters is its name alone, as before the table.
    for (req, json) in [
        (Request::from(Ping {}), r#"{"channel":"ping"}"#),
        (Request::from(Activity {}), r#"{"channel":"activity"}"#),
        (
            Request::from(TerminalList {}),
            r#"{"channel":"terminal.list"}"#,
        ),
        (Request::from(PortsList {}), r#"{"channel":"ports.list"}"#),
        (
            Request::from(FsRead { path: "a".into() }),
            r#"{"channel":"fs.read","path":"a"}"#,
        ),
    ] {
        assert_eq!(serde_json::to_string(&req).unwrap(), json);
        assert_eq!(Request::parse(json.as_bytes()).unwrap(), req);
    }
    // Every name in the table parses as its own channel (with the fields it needs).
    let fields = concat!(
        r#""path":"p","session":"s","agentId":"a","version":"v","user":"u","uid":1,"home":"/h","#,
        r#""process":"p","signal":"TERM","timeoutMs":1,"outputBytes":1,"maxRunning":1,"#,
        r#""run":{"command":["true"]},"from":"a","to":"b","context":"default","code":"1""#
    );
    for name in CHANNELS {
        let command = if *name == "exec" {
            r#","command":["true"]"#
        } else {
            ""
        };
        // A port and nothing else: port.connect refuses any other field.
        let json = if *name == "port.connect" {
            r#"{"channel":"port.connect","port":1}"#.to_string()
        } else {
            format!(r#"{{"channel":"{name}",{fields}{command}}}"#)
        };
        let req = Request::parse(json.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(req.channel(), *name);
    }
    let mut sorted = CHANNELS.to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), CHANNELS.len(), "a channel named twice");
}

#[tokio::test]
async fn open_returns_the_channels_own_reply_type() {
    let (mut server, mut sandbox) = tokio::io::duplex(1 << 16);
    let answer = tokio::spawn(async move {
        let req = read_request(&mut sandbox).await.unwrap();
        assert_eq!(req, Request::TerminalList(TerminalList {}));
        let info = TerminalInfo {
            id: "s".into(),
            command: "sh".into(),
            cols: 80,
            rows: 24,
            created_at_ms: 1,
            last_input_at_ms: 2,
            viewers: 0,
            offset: 3,
            exit_code: None,
        };
        write_message(&mut sandbox, &Reply::ok_with(&vec![info]))
            .await
            .unwrap();
        // A reply that is not what the channel promises.
        read_request(&mut sandbox).await.unwrap();
        write_message(&mut sandbox, &Reply::ok_with(&"a string"))
            .await
            .unwrap();
        // A refusal.
        read_request(&mut sandbox).await.unwrap();
        let no = ChannelError::new(ErrorCode::NotFound, "no such file");
        write_message(&mut sandbox, &Reply::Error(no))
            .await
            .unwrap();
    });
    let sessions = open(&mut server, TerminalList {}).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].offset, 3);
    match open(&mut server, FsRead { path: "f".into() }).await {
        Err(OpenError::Proto(ProtoError::BadReply(m))) => assert!(m.starts_with("fs.read"), "{m}"),
        other => panic!("a string taken for a Size: {other:?}"),
    }
    match open(&mut server, FsMkdir { path: "d".into() }).await {
        Err(OpenError::Refused(e)) => assert_eq!(e.code, ErrorCode::NotFound),
        other => panic!("{other:?}"),
    }
    answer.await.unwrap();
}

#[test]
fn port_connect_names_a_port_and_nothing_else() {
    assert_eq!(
        Request::parse(br#"{"channel":"port.connect","port":5173}"#).expect("parses"),
        Request::PortConnect(crate::PortConnect { port: 5173 })
    );
    // No address can be slipped in: the channel dials the sandbox's own loopback only.
    for bad in [
        &br#"{"channel":"port.connect","port":80,"host":"10.0.0.1"}"#[..],
        br#"{"channel":"port.connect","port":80,"address":"169.254.169.254"}"#,
        br#"{"channel":"port.connect","port":65536}"#,
        br#"{"channel":"port.connect","port":-1}"#,
        br#"{"channel":"port.connect","port":"80"}"#,
        br#"{"channel":"port.connect"}"#,
    ] {
        assert!(
            matches!(Request::parse(bad), Err(ProtoError::Malformed(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn exec_user_is_left_out_for_the_account_and_read_as_it_when_absent() {
    // An older sandboxd reads a new server's header for the account unchanged, and a new
    // sandboxd an older server's.
    let plain = ExecRequest {
        command: vec!["true".into()],
        ..Default::default()
    };
    let json = serde_json::to_value(&plain).unwrap_or_default();
    assert!(json.get("runAs").is_none(), "{json}");
    let old: ExecRequest = serde_json::from_str(r#"{"command":["true"]}"#).unwrap_or_default();
    assert_eq!(old.run_as, RunAs::Agent);
    let root = ExecRequest {
        run_as: RunAs::Root,
        ..plain
    };
    let json = serde_json::to_value(&root).unwrap_or_default();
    assert_eq!(json["runAs"], "root");
    let info: serde_json::Value = serde_json::from_str(
        r#"{"id":"a","tag":null,"command":[],"pid":null,"state":"running","exitCode":null,
            "signal":null,"startedAtMs":0,"endedAtMs":null,"outputBytes":0,"keepAwake":false}"#,
    )
    .unwrap_or_default();
    let info: ProcessInfo = serde_json::from_value(info).expect("an older record");
    assert_eq!(info.run_as, RunAs::Agent);
}

#[tokio::test]
async fn a_code_run_of_the_largest_code_reaches_sandboxd() {
    // Every byte a control character: JSON's worst case, six bytes each.
    let req = Request::from(CodeRun {
        code: "\u{1}".repeat(MAX_CODE_LEN),
        context: Some("default".into()),
        timeout_ms: Some(u64::MAX),
        env: Vec::new(),
    });
    let Request::CodeRun(run) = &req else {
        unreachable!()
    };
    assert_eq!(run.check(), Ok(()));
    let (mut a, mut b) = tokio::io::duplex(1 << 16);
    let (w, r) = tokio::join!(write_request(&mut a, &req), read_server_request(&mut b));
    w.unwrap();
    assert_eq!(r.unwrap(), req);
}

#[test]
fn code_over_the_limit_and_bad_contexts_are_refused() {
    let run = |code: String, context: Option<&str>| CodeRun {
        code,
        context: context.map(String::from),
        timeout_ms: None,
        env: Vec::new(),
    };
    assert_eq!(
        run("x".repeat(MAX_CODE_LEN + 1), None).check(),
        Err(CodeRunInvalid::TooLarge(MAX_CODE_LEN + 1))
    );
    for bad in ["", "Default", "../x", "a b", &"a".repeat(10_000)] {
        assert!(
            run("1".into(), Some(bad)).check().is_err(),
            "{bad:?} was accepted"
        );
    }
    let id = "abcdefghjkmnpqrs";
    assert!(is_session_id(id), "test id is not an id");
    assert_eq!(run("1".into(), Some(id)).check(), Ok(()));
}

#[tokio::test]
async fn code_events_round_trip_in_their_wire_form() {
    let mut result = serde_json::Map::new();
    result.insert("text/plain".into(), "42".into());
    let events = [
        (CodeEvent::Stdout("hi\n".into()), r#"{"stdout":"hi\n"}"#),
        (
            CodeEvent::Result(result),
            r#"{"result":{"text/plain":"42"}}"#,
        ),
        (
            CodeEvent::Error(CodeError {
                name: "ZeroDivisionError".into(),
                value: "division by zero".into(),
                traceback: "tb".into(),
            }),
            r#"{"error":{"name":"ZeroDivisionError","value":"division by zero","traceback":"tb"}}"#,
        ),
        (
            CodeEvent::Done(CodeDone {
                execution_count: Some(3),
                truncated: false,
            }),
            r#"{"done":{"executionCount":3,"truncated":false}}"#,
        ),
    ];
    for (event, json) in events {
        assert_eq!(serde_json::to_string(&event).unwrap(), json);
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_code_event(&mut a, &event).await.unwrap();
        assert_eq!(read_code_event(&mut b).await.unwrap(), event);
    }
}

#[tokio::test]
async fn an_oversized_code_event_is_refused_before_reading() {
    let (mut a, mut b) = tokio::io::duplex(1024);
    let len = (MAX_CODE_EVENT_LEN + 1) as u32;
    a.write_all(&len.to_be_bytes()).await.unwrap();
    assert!(matches!(
        read_code_event(&mut b).await,
        Err(ProtoError::HeaderTooLarge {
            limit: MAX_CODE_EVENT_LEN,
            ..
        })
    ));
    // And one that is not an event at all is malformed, not a panic.
    let (mut a, mut b) = tokio::io::duplex(1024);
    write_message(&mut a, &serde_json::json!({"shout": "x"}))
        .await
        .unwrap();
    assert!(matches!(
        read_code_event(&mut b).await,
        Err(ProtoError::Malformed(_))
    ));
}
