//! Terminal sessions that outlive their WebSockets: exact replay by offset across drops, a
//! correct screen after a gap too long for the buffer, several viewers, hostile attaches, the
//! session list and kill, and `agenthold shell` reattaching by itself.

use std::process::Stdio;

use crate::common::{TestServer, Ws, DEADLINE, TOKEN};
use futures::{SinkExt, StreamExt};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Opens the terminal WebSocket with `query`; the HTTP status when the upgrade is refused.
async fn connect(s: &TestServer, id: &str, query: &str) -> Result<Ws, u16> {
    let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal?{query}"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("terminal connection failed: {e}"),
    }
}

/// What one message from the server meant.
#[derive(Debug)]
enum Event {
    /// Session output (offset-counted).
    Output(Vec<u8>),
    Redraw {
        offset: u64,
        bytes: Vec<u8>,
    },
    Resize(u16, u16),
    Exit(i32),
    Closed(u16, String),
}

/// A WebSocket client that keeps the session id and offset, as a real client must.
struct Viewer {
    ws: Ws,
    id: String,
    offset: u64,
    cols: u16,
    rows: u16,
    /// The size of the next binary message when it is a redraw.
    pending_redraw: Option<(u64, usize)>,
}

impl Viewer {
    /// Opens a socket and reads up to the `session` message.
    async fn open(s: &TestServer, id: &str, query: &str) -> Viewer {
        let ws = connect(s, id, query)
            .await
            .unwrap_or_else(|status| panic!("terminal {query:?} refused with {status}"));
        Viewer::start(ws).await
    }

    async fn start(mut ws: Ws) -> Viewer {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let msg = tokio::time::timeout_at(deadline, ws.next())
                .await
                .expect("no session message in time");
            match msg {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    assert_eq!(v["type"], "session", "the first control message: {v}");
                    return Viewer {
                        ws,
                        id: v["id"].as_str().unwrap().to_string(),
                        offset: v["offset"].as_u64().unwrap(),
                        cols: v["cols"].as_u64().unwrap() as u16,
                        rows: v["rows"].as_u64().unwrap() as u16,
                        pending_redraw: None,
                    };
                }
                // The server's status text ("Starting the sandbox…") is not session output.
                Some(Ok(Message::Binary(_))) => {}
                Some(Ok(Message::Close(c))) => panic!("closed before the session message: {c:?}"),
                Some(Ok(_)) => {}
                other => panic!("terminal ended before the session message: {other:?}"),
            }
        }
    }

    async fn next(&mut self) -> Event {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("the terminal went quiet");
            match msg {
                Some(Ok(Message::Binary(b))) => {
                    if let Some((offset, len)) = self.pending_redraw.take() {
                        assert_eq!(
                            b.len(),
                            len,
                            "the redraw is one message of the announced size"
                        );
                        self.offset = offset;
                        return Event::Redraw {
                            offset,
                            bytes: b.to_vec(),
                        };
                    }
                    self.offset += b.len() as u64;
                    return Event::Output(b.to_vec());
                }
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    match v["type"].as_str().unwrap() {
                        "redraw" => {
                            let offset = v["offset"].as_u64().unwrap();
                            let len = v["bytes"].as_u64().unwrap() as usize;
                            self.pending_redraw = Some((offset, len));
                        }
                        "resize" => {
                            self.cols = v["cols"].as_u64().unwrap() as u16;
                            self.rows = v["rows"].as_u64().unwrap() as u16;
                            return Event::Resize(self.cols, self.rows);
                        }
                        "exit" => return Event::Exit(v["code"].as_i64().unwrap() as i32),
                        other => panic!("unexpected control message {other}: {v}"),
                    }
                }
                Some(Ok(Message::Close(Some(f)))) => {
                    return Event::Closed(u16::from(f.code), f.reason.to_string())
                }
                Some(Ok(Message::Close(None))) => return Event::Closed(1005, String::new()),
                Some(Ok(_)) => {}
                other => panic!("terminal ended without a close: {other:?}"),
            }
        }
    }

    /// Reads output until `needle` shows up in it, returning the output read.
    async fn read_until(&mut self, needle: &str) -> String {
        let mut seen = String::new();
        loop {
            match self.next().await {
                Event::Output(b) => seen.push_str(&String::from_utf8_lossy(&b)),
                Event::Closed(code, why) => {
                    panic!("closed ({code} {why}) before {needle:?}; got {seen:?}")
                }
                _ => {}
            }
            if seen.contains(needle) {
                return seen;
            }
        }
    }

    async fn type_keys(&mut self, keys: &str) {
        self.ws
            .send(Message::Binary(keys.as_bytes().to_vec().into()))
            .await
            .unwrap();
    }

    async fn resize(&mut self, cols: u16, rows: u16) {
        let msg = serde_json::json!({"type": "resize", "cols": cols, "rows": rows});
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .unwrap();
    }
}

fn query_attach(id: &str, offset: u64) -> String {
    format!("session={id}&offset={offset}")
}

async fn list(s: &TestServer, id: &str) -> Vec<Value> {
    let r = s
        .get(&format!("/api/v1/agents/{id}/terminals"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn wait_viewers(s: &TestServer, agent: &str, session: &str, want: u64) {
    crate::common::wait_for(&format!("{want} viewers on {session}"), || async {
        list(s, agent)
            .await
            .iter()
            .any(|t| t["id"] == session && t["viewers"] == want)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drops_at_random_points_lose_and_double_nothing() {
    // A buffer larger than the whole output: every reattach is an exact replay, however long
    // the socket was away.
    let s = TestServer::start_with(|c| c.sandbox.terminal_buffer_kb = 64 * 1024).await;
    let id = s.running_agent("seq").await;
    let cmd = "echo START-MARK; seq 1 2000000; echo END-MARK";
    let q = format!(
        "command={}",
        url::form_urlencoded::byte_serialize(cmd.as_bytes()).collect::<String>()
    );
    let mut v = Viewer::open(&s, &id, &q).await;
    assert_eq!(v.offset, 0, "a new session starts at offset 0");
    let session = v.id.clone();
    let mut got: Vec<u8> = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_7e57);
    let mut drops = 0;
    let code = loop {
        // Drop after a random amount of output (the whole output is about 17 MB).
        let budget: usize = rng.random_range(1..3_000_000);
        let mut read = 0;
        let ended = loop {
            match v.next().await {
                Event::Output(b) => {
                    read += b.len();
                    got.extend_from_slice(&b);
                    if read >= budget && drops < 6 {
                        break None;
                    }
                }
                Event::Redraw { .. } => panic!("a replay within the buffer never needs a redraw"),
                Event::Exit(code) => break Some(code),
                Event::Resize(..) => {}
                Event::Closed(code, why) => panic!("closed ({code} {why}) before the exit"),
            }
        };
        if let Some(code) = ended {
            break code;
        }
        drops += 1;
        assert_eq!(v.offset, got.len() as u64);
        drop(v);
        v = Viewer::open(&s, &id, &query_attach(&session, got.len() as u64)).await;
        assert_eq!(v.id, session);
        assert_eq!(
            v.offset,
            got.len() as u64,
            "the attach resumes at our offset"
        );
    };
    assert_eq!(code, 0);
    assert_eq!(drops, 6, "the test dropped the socket as planned");
    let text = String::from_utf8(got).unwrap().replace("\r\n", "\n");
    let start = text.find("START-MARK\n").expect("start marker") + "START-MARK\n".len();
    let end = text.find("END-MARK").expect("end marker");
    let body = &text[start..end];
    let mut want = String::with_capacity(15_000_000);
    for i in 1..=2_000_000 {
        want.push_str(&i.to_string());
        want.push('\n');
    }
    assert!(
        body == want,
        "the output put together differs from seq's ({} vs {} bytes)",
        body.len(),
        want.len()
    );
}

fn screen_of(rows: u16, cols: u16) -> vt100::Parser {
    vt100::Parser::new(
        std::num::NonZeroU16::new(rows).unwrap(),
        std::num::NonZeroU16::new(cols).unwrap(),
        0,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_longer_than_the_buffer_gets_a_correct_screen() {
    let s = TestServer::start_with(|c| c.sandbox.terminal_buffer_kb = 4).await;
    let id = s.running_agent("pager").await;
    let out = s
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "seq -f 'line %g of a long file' 1 5000 > long.txt",
            ],
        )
        .await;
    assert_eq!(out["exitCode"], 0, "{out}");

    // A stays connected throughout and keeps its own picture of the screen.
    let mut a = Viewer::open(&s, &id, "cols=80&rows=24").await;
    let mut a_screen = screen_of(24, 80);
    let session = a.id.clone();
    // B attaches, sees the beginning, and leaves.
    let b = Viewer::open(&s, &id, &query_attach(&session, 0)).await;
    let b_offset = b.offset;
    drop(b);

    a.type_keys("less long.txt\r").await;
    let feed = |a_screen: &mut vt100::Parser, ev: &Event| {
        if let Event::Output(bytes) = ev {
            a_screen.process(bytes);
        }
    };
    // Page on until far more than the 4 KiB buffer has gone by.
    while !a_screen.screen().contents().contains("line 23 of") {
        let ev = a.next().await;
        feed(&mut a_screen, &ev);
    }
    for _ in 0..8 {
        a.type_keys(" ").await;
    }
    while !a_screen.screen().contents().contains("line 207 of") {
        let ev = a.next().await;
        feed(&mut a_screen, &ev);
    }
    assert!(
        a.offset > b_offset + 4 * 1024,
        "the gap must exceed the buffer"
    );

    // B comes back with its old offset, typing nothing.
    let mut b = Viewer::open(&s, &id, &query_attach(&session, b_offset)).await;
    let (redraw_at, redraw) = match b.next().await {
        Event::Redraw { offset, bytes } => (offset, bytes),
        other => panic!("expected a redraw, got {other:?}"),
    };
    assert_eq!(
        b.offset, redraw_at,
        "the session message names the redraw's offset"
    );
    // Bring A's picture to exactly the redraw's offset (nobody types, so nothing follows).
    while a.offset < redraw_at {
        let ev = a.next().await;
        feed(&mut a_screen, &ev);
    }
    assert_eq!(a.offset, redraw_at);
    let mut b_screen = screen_of(24, 80);
    // Whatever B showed before is reset by the redraw.
    b_screen.process(b"stale \x1b[31mjunk\r\n");
    b_screen.process(&redraw);
    assert!(
        a_screen.screen().alternate_screen(),
        "less runs on the alternate screen"
    );
    assert_eq!(
        b_screen.screen().alternate_screen(),
        a_screen.screen().alternate_screen()
    );
    assert_eq!(b_screen.screen().contents(), a_screen.screen().contents());
    assert_eq!(
        b_screen.screen().cursor_position(),
        a_screen.screen().cursor_position()
    );
    assert_eq!(
        b_screen.screen().contents_formatted(),
        a_screen.screen().contents_formatted(),
        "colours and attributes too"
    );

    // And both go on live from there.
    b.type_keys("q").await;
    // A types only once less has gone: keys from two sockets have no order between them, and
    // less would read an early "echo" as its own commands ("h" opens its help).
    while a_screen.screen().alternate_screen() {
        let ev = a.next().await;
        feed(&mut a_screen, &ev);
    }
    a.type_keys("echo after-'less'\r").await;
    b.read_until("after-less").await;
    a.read_until("after-less").await;

    // A new viewer without an offset gets the redraw too.
    let mut c = Viewer::open(&s, &id, &format!("session={session}")).await;
    assert!(matches!(c.next().await, Event::Redraw { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_viewers_share_output_and_hear_of_resizes() {
    let s = TestServer::start().await;
    let id = s.running_agent("pair").await;
    let mut a = Viewer::open(&s, &id, "cols=80&rows=24").await;
    let mut b = Viewer::open(&s, &id, &query_attach(&a.id, 0)).await;
    assert_eq!((b.cols, b.rows), (80, 24));
    wait_viewers(&s, &id, &a.id, 2).await;

    a.type_keys("echo shared-'by'-both\r").await;
    a.read_until("shared-by-both").await;
    b.read_until("shared-by-both").await;

    a.resize(100, 30).await;
    loop {
        if let Event::Resize(c, r) = b.next().await {
            assert_eq!((c, r), (100, 30));
            break;
        }
    }
    b.type_keys("stty size\r").await;
    a.read_until("30 100").await;
    b.read_until("30 100").await;

    // An attach with a size resizes the session, and the others hear of it.
    let mut c = Viewer::open(&s, &id, &format!("session={}&cols=90&rows=20", a.id)).await;
    assert_eq!((c.cols, c.rows), (90, 20));
    loop {
        if let Event::Resize(c, r) = a.next().await {
            assert_eq!((c, r), (90, 20));
            break;
        }
    }
    assert!(matches!(c.next().await, Event::Redraw { .. }));

    // The shell exits: every viewer gets the exit and a 1000 close.
    b.type_keys("exit 7\r").await;
    for v in [&mut a, &mut b, &mut c] {
        let mut exit = None;
        loop {
            match v.next().await {
                Event::Exit(code) => exit = Some(code),
                Event::Closed(code, _) => {
                    assert_eq!(code, 1000);
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(exit, Some(7));
    }
    crate::common::wait_for("the ended session leaves the list", || async {
        list(&s, &id).await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_attaches_get_clear_errors_and_harm_nobody() {
    let s = TestServer::start().await;
    let a = s.running_agent("alpha").await;
    let b = s.running_agent("beta").await;
    let mut va = Viewer::open(&s, &a, "").await;
    let mut vb = Viewer::open(&s, &b, "").await;
    // The end of the output must be known exactly, so the shell's next prompt (which follows
    // the echo, maybe in a later message) is made one to wait for; after it the shell is quiet.
    va.type_keys("PS1='end-of-''output> '; echo alpha-'ready'\r")
        .await;
    va.read_until("end-of-output> ").await;
    let end = va.offset;

    for (query, status) in [
        (format!("session={}&offset={}", va.id, end + 1), 400),
        (format!("session={}&offset=999999999999999", va.id), 400),
        (format!("session={}&offset=-1", va.id), 400),
        (format!("session={}&offset=ten", va.id), 400),
        (
            format!("session={}&offset=18446744073709551616", va.id),
            400,
        ),
        ("offset=5".to_string(), 400),
        (format!("session={}&command=ls", va.id), 400),
        ("command=".to_string(), 400),
        // B's session is not found on A, whatever the offset.
        (format!("session={}", vb.id), 404),
        (format!("session={}&offset=0", vb.id), 404),
        ("session=..%2F..%2Fetc".to_string(), 404),
        ("session=AAAAAAAAAAAAAAAA".to_string(), 404),
        (format!("session={}", "z".repeat(5000)), 404),
    ] {
        assert_eq!(connect(&s, &a, &query).await.err(), Some(status), "{query}");
    }
    // An offset exactly at the end is fine: nothing to replay.
    let at_end = Viewer::open(&s, &a, &query_attach(&va.id, end)).await;
    assert_eq!(at_end.offset, end);
    drop(at_end);

    // 1000 viewers on one session: 32 get in, the rest are refused with 409.
    let attempts = futures::stream::iter(0..1000)
        .map(|_| {
            let q = format!("session={}", va.id);
            let s = &s;
            let a = &a;
            async move { connect(s, a, &q).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let refused = attempts
        .iter()
        .filter(|r| r.as_ref().err() == Some(&409))
        .count();
    let opened: Vec<Ws> = attempts.into_iter().filter_map(Result::ok).collect();
    assert_eq!(opened.len(), 31, "32 viewers at most, counting the first");
    assert_eq!(refused, 969);
    drop(opened);

    // Both sessions still work, and neither shows the other's output.
    va.type_keys("echo still-'alpha'\r").await;
    let seen_a = va.read_until("still-alpha").await;
    vb.type_keys("echo still-'beta'\r").await;
    let seen_b = vb.read_until("still-beta").await;
    assert!(!seen_a.contains("beta") && !seen_b.contains("alpha"));

    // Killing: an unknown or malformed id is 404; a real one ends the shell for its viewers.
    for sid in ["nosuchsession000", "../x", &vb.id] {
        let r = s
            .delete(&format!("/api/v1/agents/{a}/terminals/{sid}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{sid}");
    }
    let r = s
        .delete(&format!("/api/v1/agents/{a}/terminals/{}", va.id))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    loop {
        match va.next().await {
            Event::Closed(code, _) => {
                assert_eq!(code, 1000);
                break;
            }
            _ => continue,
        }
    }
    assert_eq!(
        connect(&s, &a, &format!("session={}", va.id)).await.err(),
        Some(404)
    );
    // B's session is untouched.
    vb.type_keys("echo beta-'lives'\r").await;
    vb.read_until("beta-lives").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_outlive_their_socket_and_end_with_sleep() {
    let s = TestServer::start().await;
    let id = s.running_agent("lister").await;
    assert!(list(&s, &id).await.is_empty());
    let mut v = Viewer::open(&s, &id, "cols=100&rows=30").await;
    let session = v.id.clone();
    assert_eq!(session.len(), 16);
    v.type_keys("KEEP=kept-'value'; echo set\r").await;
    v.read_until("set").await;
    crate::common::wait_for("the agent counts as busy with a viewer", || async {
        s.lc.activity().view(&id).busy
    })
    .await;

    let sessions = list(&s, &id).await;
    assert_eq!(sessions.len(), 1);
    let t = &sessions[0];
    assert_eq!(t["id"], session.as_str());
    assert_eq!(
        (t["cols"].as_u64(), t["rows"].as_u64()),
        (Some(100), Some(30))
    );
    assert_eq!(t["viewers"], 1);
    assert!(t["command"].as_str().unwrap().contains("sh"), "{t}");
    for k in ["createdAt", "lastInputAt"] {
        chrono::DateTime::parse_from_rfc3339(t[k].as_str().unwrap()).unwrap();
    }

    // The socket goes; the shell stays, and the agent is no longer busy on its account.
    let offset = v.offset;
    drop(v);
    wait_viewers(&s, &id, &session, 0).await;
    crate::common::wait_for("no viewer, no busy agent", || async {
        !s.lc.activity().view(&id).busy
    })
    .await;
    let mut v = Viewer::open(&s, &id, &query_attach(&session, offset)).await;
    v.type_keys("echo $KEEP\r").await;
    v.read_until("kept-value").await;
    drop(v);

    // Sleep ends every process: the session is gone, and saying so does not wake the agent.
    s.stop_sleeping(&id).await;
    assert!(list(&s, &id).await.is_empty());
    let r = connect(&s, &id, &format!("session={session}")).await;
    assert_eq!(r.err(), Some(404));
    assert_eq!(s.state(&id).await, "sleeping");
    let r = s
        .delete(&format!("/api/v1/agents/{id}/terminals/{session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_during_a_tunnel_drop_waits_and_the_session_survives() {
    let s = TestServer::start().await;
    let id = s.running_agent("droppy").await;
    let mut v = Viewer::open(&s, &id, "").await;
    let session = v.id.clone();
    v.type_keys("N=before-'drop'; echo ok\r").await;
    v.read_until("ok").await;
    // The server cuts the tunnel: the socket closes with 1011 and sandboxd reconnects.
    s.lc.tunnels().disconnect(&id);
    loop {
        if let Event::Closed(code, _) = v.next().await {
            assert_eq!(code, 1011);
            break;
        }
    }
    let mut v2 = Viewer::open(&s, &id, &query_attach(&session, v.offset)).await;
    v2.type_keys("echo $N\r").await;
    v2.read_until("before-drop").await;
}

/// `agenthold shell` keeps its session when the server drops the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reattaches_by_itself() {
    let s = TestServer::start().await;
    let id = s.running_agent("clire").await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["shell", "clire"])
        .env("AGENTHOLD_URL", &s.base)
        .env("AGENTHOLD_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let err_task = tokio::spawn({
        let err = err.clone();
        async move {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                err.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    });
    let mut out = String::new();
    stdin
        .write_all(b"V=survived-'it'; echo first-'done'\n")
        .await
        .unwrap();
    crate::common::read_output_until(&mut stdout, &mut out, "first-done", DEADLINE).await;

    s.lc.tunnels().disconnect(&id);
    // Keys typed while the CLI reattaches wait for the new socket. (Keys sent into the old
    // socket after the server stopped reading it are lost, so the test waits for the CLI to
    // notice the drop first.)
    crate::common::wait_for("the CLI notices the drop", || async {
        err.lock().unwrap().contains("reattaching")
    })
    .await;
    stdin.write_all(b"echo $V\n").await.unwrap();
    crate::common::read_output_until(&mut stdout, &mut out, "survived-it", DEADLINE).await;
    stdin.write_all(b"exit 0\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    let _ = err_task.await;
    let err = err.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{err}");
    // It was the same session all along.
    crate::common::wait_for("the session ended", || async {
        list(&s, &id).await.is_empty()
    })
    .await;
}

/// Like [`connect`], but a refused upgrade gives its status and JSON error code.
async fn connect_or_error(s: &TestServer, id: &str, query: &str) -> Result<Ws, (u16, String)> {
    let url = s.ws_url(&format!("/api/v1/agents/{id}/terminal?{query}"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap_or_default())
                .unwrap_or(Value::Null);
            let code = body["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            Err((resp.status().as_u16(), code))
        }
        Err(e) => panic!("terminal connection failed: {e}"),
    }
}

/// Reads an upgraded socket to its close, returning the close code and reason.
async fn close_of(ws: &mut Ws) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("the socket did not close in time");
        match msg {
            Some(Ok(Message::Close(Some(f)))) => return (u16::from(f.code), f.reason.to_string()),
            Some(Ok(Message::Close(None))) => return (1005, String::new()),
            Some(Ok(_)) => {}
            other => panic!("the socket ended without a close: {other:?}"),
        }
    }
}

async fn expect_429(resp: reqwest::Response) {
    let msg = crate::common::expect_error(resp, 429, "too_many_requests").await;
    assert!(msg.contains("max_streams_per_agent"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_flood_is_refused_beyond_the_cap_and_the_tunnel_stays_up() {
    const CAP: usize = 16;
    let s = TestServer::start_with(|c| c.sandbox.max_streams_per_agent = CAP).await;
    let id = s.running_agent("flooded").await;
    let conn = s.lc.tunnels().conn_id(&id).expect("the agent's tunnel");
    let mut va = Viewer::open(&s, &id, "").await;
    let vb = Viewer::open(&s, &id, "").await;

    // 40 attaches at once, 20 to each session (within the 32 viewers a session allows): with
    // the two viewers above, 14 fit under the cap; the rest are refused before the upgrade.
    let attempts = futures::future::join_all((0..40).map(|i| {
        let q = format!("session={}", if i % 2 == 0 { &va.id } else { &vb.id });
        let (s, id) = (&s, &id);
        async move { connect_or_error(s, id, &q).await }
    }))
    .await;
    let mut opened = Vec::new();
    let mut refused = 0;
    for r in attempts {
        match r {
            Ok(ws) => opened.push(ws),
            Err((429, code)) => {
                assert_eq!(code, "too_many_requests");
                refused += 1;
            }
            Err(other) => panic!("an attach failed otherwise: {other:?}"),
        }
    }
    assert_eq!(opened.len(), CAP - 2, "attaches that got in");
    assert_eq!(refused, 40 - (CAP - 2), "attaches refused with 429");

    // While the cap is taken: a new session is refused after the upgrade with 4429, and the
    // HTTP routes that open channels answer 429.
    let mut fresh = connect(&s, &id, "").await.expect("a new session upgrades");
    let (code, reason) = close_of(&mut fresh).await;
    assert_eq!(code, 4429, "{reason}");
    expect_429(
        s.send(
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            &serde_json::json!({"command": ["true"]}),
        )
        .await,
    )
    .await;
    expect_429(
        s.get(&format!("/api/v1/agents/{id}/terminals"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    expect_429(
        s.get(&format!("/api/v1/agents/{id}/fs/list"))
            .send()
            .await
            .unwrap(),
    )
    .await;

    // The tunnel never dropped: the viewers that got in work, on the same connection.
    va.type_keys("echo during-'flood'\r").await;
    va.read_until("during-flood").await;
    s.assert_same_tunnel(&id, conn);

    // The flood ends: its streams are given back, and channels open again.
    drop(opened);
    s.wait_exec_works(&id, "after the flood").await;
    let mut again = Viewer::open(&s, &id, &format!("session={}", va.id)).await;
    again.type_keys("echo after-'flood'\r").await;
    again.read_until("after-flood").await;
    s.assert_same_tunnel(&id, conn);
}

/// More channels at once than the tunnel itself can carry (256): the cap refuses the excess
/// and the tunnel, with every channel on it, stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_tunnels_own_limit_leaves_the_tunnel_up() {
    const FLOOD: usize = 300;
    // The flood's HTTP requests come from one address, one connection each: the API's own cap
    // per address (256) must not be what refuses them.
    let s = TestServer::start_with(|c| c.server.max_connections_per_ip = 1024).await;
    let cap = s.lc.config().sandbox.max_streams_per_agent;
    assert!(cap < agenthold_proto::mux::MAX_STREAMS && FLOOD > agenthold_proto::mux::MAX_STREAMS);
    let id = s.running_agent("deluge").await;
    let conn = s.lc.tunnels().conn_id(&id).expect("the agent's tunnel");
    let mut v = Viewer::open(&s, &id, "").await;

    let (running, refused) = crate::common::exec_flood(&s, &id, FLOOD).await;
    // The terminal holds one of the cap's streams.
    assert_eq!(running.len(), cap - 1);
    assert_eq!(refused, FLOOD - (cap - 1));

    v.type_keys("echo through-'it'\r").await;
    v.read_until("through-it").await;
    s.assert_same_tunnel(&id, conn);

    // Closing the requests ends the commands and gives their streams back.
    drop(running);
    s.wait_exec_works(&id, "after the flood").await;
    s.assert_same_tunnel(&id, conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroying_an_agent_closes_its_terminals_as_ended() {
    let s = TestServer::start().await;
    let id = s.running_agent("doomed").await;
    let mut v = Viewer::open(&s, &id, "").await;
    v.type_keys("echo alive\r").await;
    v.read_until("alive").await;
    let r = s
        .delete(&format!("/api/v1/agents/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    loop {
        if let Event::Closed(code, why) = v.next().await {
            assert_eq!(code, 4404, "{why}");
            assert!(why.contains("destroy"), "{why}");
            break;
        }
    }
}
