//! Background processes over the real tunnel (fake driver): output by offset with both streams
//! told apart, exit codes and signals, stdin, whole-tree kills and timeouts, wait, events, the
//! output budget's gap, retention, limits, and hostile input. The same on real Docker, with
//! tunnel drops, a server SIGKILL and sleep, is in `docker::processes`.

use crate::common::procs;
use crate::common::sse;
use std::time::Duration;

use crate::common::procs::{alive_with, Procs};
use crate::common::{env_refusal, expect_error, wait_for, TestServer};
use agenthold::api::types::process::ProcessState;
use serde_json::{json, Value};

async fn agent(s: &TestServer, name: &str) -> Procs {
    let id = s.running_agent(name).await;
    Procs::new(s.http.clone(), &s.base, &id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_by_offset_exit_code_and_wait() {
    let s = TestServer::start().await;
    let p = agent(&s, "procs").await;
    let started = p
        .start(json!({"command": ["sh", "-c", "printf 'out1\\n'; printf 'err1\\n' >&2; sleep 0.2; printf 'out2\\n'; exit 4"], "tag": "job"}))
        .await;
    assert_eq!(started.state, ProcessState::Running);
    assert_eq!(started.tag.as_deref(), Some("job"));
    assert!(started.pid.is_some());

    let ended = p.ended("job").await;
    assert_eq!(ended.state, ProcessState::Exited);
    assert_eq!(ended.exit_code, Some(4));
    assert_eq!(ended.output_bytes, 15);
    assert!(ended.ended_at.is_some());

    let all = p.output_to_end(&started.id).await;
    assert_eq!(all.stdout, b"out1\nout2\n");
    assert_eq!(all.stderr, b"err1\n");
    assert_eq!(all.end, 15);
    assert_eq!(all.exit.as_ref().and_then(|e| e.exit_code), Some(4));

    // From the middle of a piece, by id: exactly the rest, streams kept.
    let (status, lines) = p.output_lines(&started.id, 7, false).await;
    assert_eq!(status, 200);
    let mut rest = procs::Joined {
        end: 7,
        ..Default::default()
    };
    rest.extend(&lines);
    assert_eq!(rest.all, all.all[7..]);
    // At the very end: only the exit line.
    let (_, lines) = p.output_lines("job", 15, false).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].get("exit").is_some());

    let listed = p.list().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, started.id);
    let (status, got) = p.get(&started.id).await;
    assert_eq!((status, got["exitCode"].clone()), (200, json!(4)));

    // A program that is not there has exited with 127 and says why.
    let missing = p.start(json!({"command": ["no-such-program-here"]})).await;
    assert_eq!(missing.state, ProcessState::Exited);
    assert_eq!(missing.exit_code, Some(127));
    let said = p.output_to_end(&missing.id).await;
    assert!(
        String::from_utf8_lossy(&said.stderr).contains("no-such-program-here"),
        "{said:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_delivers_output_as_it_comes_and_wait_times_out_with_408() {
    let s = TestServer::start().await;
    let p = agent(&s, "follow").await;
    let proc_ = p.start(json!({"command": ["cat"], "stdin": true})).await;
    assert!(proc_.stdin_open);
    let (status, still) = p.wait(&proc_.id, 50).await;
    assert_eq!(status, 408);
    assert_eq!(still.state, ProcessState::Running);

    let follower = {
        let p = p.clone();
        let id = proc_.id.clone();
        tokio::spawn(async move { p.output_lines(&id, 0, true).await })
    };
    let (status, written) = p.stdin(&proc_.id, b"first ", false).await;
    assert_eq!((status, written["written"].clone()), (200, json!(6)));
    // What cat echoed is there before stdin closes.
    wait_for("cat's echo", || {
        let p = p.clone();
        let id = proc_.id.clone();
        async move { p.get(&id).await.1["outputBytes"] == 6 }
    })
    .await;
    let (status, _) = p.stdin(&proc_.id, b"second", true).await;
    assert_eq!(status, 200);
    let ended = p.ended(&proc_.id).await;
    assert_eq!(ended.exit_code, Some(0));
    assert!(!ended.stdin_open);
    let (status, lines) = follower.await.unwrap();
    assert_eq!(status, 200);
    let mut j = procs::Joined::default();
    j.extend(&lines);
    assert_eq!(j.stdout, b"first second");
    assert!(j.exit.is_some());

    // stdin of one that has ended, or that was started without it.
    let (status, body) = p.stdin(&proc_.id, b"late", false).await;
    assert_eq!(status, 400, "{body}");
    let no_pipe = p.sh("sleep 1000").await;
    let (status, body) = p.stdin(&no_pipe.id, b"x", false).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("stdin"));
    assert_eq!(p.remove(&no_pipe.id).await, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_or_a_timeout_ends_the_whole_tree() {
    let s = TestServer::start().await;
    let p = agent(&s, "tree").await;
    let marker = format!("ah-proc-tree-{}", std::process::id());
    // (What escapes with setsid after its parent died is the shim's to catch: the agenthold
    // and sandboxd binaries have one, a test binary's in-process sandboxes do not; see
    // `docker::processes`.)
    let script = format!(
        "(exec -a {marker}-a sleep 1000) & (exec -a {marker}-b sleep 1000) & exec -a {marker}-c sleep 1000"
    );
    let killed = p
        .start(json!({"command": ["bash", "-c", script], "tag": "t"}))
        .await;
    wait_for("the tree to start", || async {
        alive_with(&format!("{marker}-a"))
            && alive_with(&format!("{marker}-b"))
            && alive_with(&format!("{marker}-c"))
    })
    .await;
    assert_eq!(p.signal("t", "TERM").await, 204);
    let ended = p.ended(&killed.id).await;
    assert_eq!(ended.state, ProcessState::Killed);
    assert_eq!(ended.signal.as_deref(), Some("TERM"));
    assert_eq!(ended.exit_code, None);
    wait_for("no process of the tree left", || async {
        !alive_with(&marker)
    })
    .await;
    // Signalling one that has ended is refused.
    assert_eq!(p.signal("t", "TERM").await, 400);

    let slow_marker = format!("ah-proc-timeout-{}", std::process::id());
    let script =
        format!("(exec -a {slow_marker}-bg sleep 1000) & exec -a {slow_marker} sleep 1001");
    let timed = p
        .start(json!({"command": ["bash", "-c", script], "timeoutMs": 300}))
        .await;
    let ended = p.ended(&timed.id).await;
    assert!(ended.timed_out, "{ended:?}");
    assert_eq!(ended.state, ProcessState::Killed);
    assert_eq!(ended.signal.as_deref(), Some("KILL"));
    wait_for("no process of the timed-out tree left", || async {
        !alive_with(&slow_marker)
    })
    .await;

    // DELETE kills a running one and forgets it.
    let running = p.sh("sleep 1000").await;
    assert_eq!(p.remove(&running.id).await, 204);
    assert_eq!(p.get(&running.id).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_events_arrive_for_start_and_end() {
    let s = TestServer::start().await;
    let p = agent(&s, "events").await;
    let mut events = sse::Events::open(&s).await;
    let started = p.sh("sleep 0.2; exit 2").await;
    let seen = events
        .about_until(&p.agent, |kind, data| {
            kind == "process" && data["process"]["state"] == "exited"
        })
        .await;
    let ours: Vec<&Value> = seen
        .iter()
        .filter(|(k, d)| k == "process" && d["process"]["id"] == started.id.as_str())
        .map(|(_, d)| d)
        .collect();
    assert_eq!(ours.len(), 2, "{seen:?}");
    assert_eq!(ours[0]["process"]["state"], "running");
    assert_eq!(ours[1]["process"]["exitCode"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_past_the_budget_reads_as_a_gap_never_a_wrong_byte() {
    let s = TestServer::start_with(|c| c.sandbox.process_output_kb = 64).await;
    let p = agent(&s, "budget").await;
    // 1 MiB of numbered lines, far more than the 64 KiB kept.
    let big = p.sh("seq 1 150000").await;
    let ended = p.ended(&big.id).await;
    let expected: Vec<u8> = (1..=150000)
        .flat_map(|n| format!("{n}\n").into_bytes())
        .collect();
    assert_eq!(ended.output_bytes, expected.len() as u64);
    assert!(ended.output_start > 0);
    let j = p.output_to_end(&big.id).await;
    assert_eq!(j.gaps.len(), 1, "{:?}", j.gaps);
    let (from, to) = j.gaps[0];
    assert_eq!((from, to), (0, ended.output_start));
    assert_eq!(j.all, expected[to as usize..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_tags_and_retention() {
    let s = TestServer::start_with(|c| {
        c.sandbox.max_processes = 3;
        c.sandbox.process_retention = Duration::from_secs(1);
    })
    .await;
    let p = agent(&s, "limits").await;
    let first = p
        .start(json!({"command": ["sleep", "1000"], "tag": "web"}))
        .await;
    // A running process's tag is taken.
    let (status, body) = p
        .start_raw(json!({"command": ["sleep", "1000"], "tag": "web"}))
        .await;
    assert_eq!(status, 409, "{body}");
    p.sh("sleep 1000").await;
    p.sh("sleep 1000").await;
    let (status, body) = p.start_raw(json!({"command": ["true"]})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sandbox.max_processes"));
    // Ending one frees its place and its tag.
    assert_eq!(p.signal("web", "KILL").await, 204);
    p.ended(&first.id).await;
    let second = p
        .start(json!({"command": ["sh", "-c", "exit 0"], "tag": "web"}))
        .await;
    p.ended(&second.id).await;
    // The tag now names the newest; a finished one is forgotten after the retention.
    assert_eq!(p.get("web").await.1["id"], second.id.as_str());
    wait_for("finished processes to be forgotten", || {
        let p = p.clone();
        async move {
            p.list()
                .await
                .iter()
                .all(|x| x.state == ProcessState::Running)
        }
    })
    .await;
    assert_eq!(p.get(&first.id).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_processes_at_once() {
    let s = TestServer::start().await;
    let p = agent(&s, "hundred").await;
    let started = futures::future::join_all((0..100).map(|i| {
        let p = p.clone();
        async move { p.sh(&format!("echo {i}; exec sleep 1000")).await }
    }))
    .await;
    let listed = p.list().await;
    assert_eq!(listed.len(), 100);
    assert!(listed.iter().all(|x| x.state == ProcessState::Running));
    for (i, proc_) in started.iter().enumerate() {
        let want = format!("{i}\n");
        wait_for("each one's output", || {
            let p = p.clone();
            let id = proc_.id.clone();
            let want = want.clone();
            async move {
                let (_, lines) = p.output_lines(&id, 0, false).await;
                let mut j = procs::Joined::default();
                j.extend(&lines);
                j.stdout == want.as_bytes()
            }
        })
        .await;
    }
    for proc_ in &started {
        assert_eq!(p.remove(&proc_.id).await, 204);
    }
    assert!(p.list().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_running_at_a_server_restart_are_lost_with_their_output_kept() {
    // The fake driver's sandboxes end with their server (a Docker sandbox outlives it: see
    // `docker::processes`); what ran is then `lost`, and what it wrote stays readable.
    let s = TestServer::start().await;
    let p = agent(&s, "restart").await;
    let running = p.sh("echo before; exec sleep 1000").await;
    wait_for("its first output", || {
        let p = p.clone();
        let id = running.id.clone();
        async move { p.get(&id).await.1["outputBytes"] == 7 }
    })
    .await;
    let s = s.restart_with(|_| {}).await;
    let p = Procs::new(s.http.clone(), &s.base, &p.agent);
    let after = p.ended(&running.id).await;
    assert_eq!(after.state, ProcessState::Lost);
    assert!(after.ended_at.is_some());
    let j = p.output_to_end(&running.id).await;
    assert_eq!(j.stdout, b"before\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_clear_errors_and_nothing_of_another_agent() {
    let s = TestServer::start().await;
    let p = agent(&s, "host").await;
    let other = agent(&s, "other").await;
    let theirs = other
        .start(json!({"command": ["sleep", "1000"], "tag": "secret"}))
        .await;
    let ours = p.sh("echo hi").await;
    p.ended(&ours.id).await;
    let base = p.url("");

    // Unknown ids and tags, another agent's process by id or tag.
    for name in [
        "aaaaaaaaaaaaaaaa",
        "secret",
        theirs.id.as_str(),
        "a.b",
        "a%20b",
    ] {
        let r = s
            .http
            .get(format!("{base}/{name}"))
            .bearer_auth(crate::common::TOKEN)
            .send()
            .await
            .unwrap();
        expect_error(r, 404, "not_found").await;
    }
    assert_eq!(p.signal(&theirs.id, "KILL").await, 404);
    assert_eq!(p.remove("secret").await, 404);
    assert_eq!(other.get(&theirs.id).await.1["state"], "running");

    // Offsets: negative, past the output, not a number.
    for q in ["offset=-1", "offset=999", "offset=x", "follow=maybe"] {
        let r = s
            .http
            .get(format!("{base}/{}/output?{q}", ours.id))
            .bearer_auth(crate::common::TOKEN)
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "invalid").await;
    }
    let (status, _) = p.wait(&ours.id, 0).await;
    assert_eq!(status, 200);
    let r = s
        .http
        .get(format!("{base}/{}/wait?timeoutMs=999999999999", ours.id))
        .bearer_auth(crate::common::TOKEN)
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "invalid").await;

    // Bodies.
    let bad = [
        (json!({"command": []}), 400),
        (json!({"command": [""]}), 400),
        (json!({"command": ["a\u{0}b"]}), 400),
        (json!({"command": ["true"], "tag": "no spaces"}), 400),
        (json!({"command": ["true"], "tag": "x".repeat(65)}), 400),
        (json!({"command": ["true"], "timeoutMs": 0}), 400),
        (json!({"command": ["true"], "unknown": 1}), 400),
        (json!({"command": ["x".repeat(1 << 20)]}), 413),
    ];
    for (body, want) in bad {
        let (status, answer) = p.start_raw(body.clone()).await;
        let shown: String = body.to_string().chars().take(80).collect();
        assert_eq!(status, want, "{shown}: {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    let env: serde_json::Map<String, Value> =
        (0..10_000).map(|i| (format!("V{i}"), json!("x"))).collect();
    let (status, answer) = p.start_raw(json!({"command": ["true"], "env": env})).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "env");
    for signal in ["NOPE", "0", "999", ""] {
        let r = s
            .http
            .post(format!("{base}/{}/signal", ours.id))
            .bearer_auth(crate::common::TOKEN)
            .json(&json!({ "signal": signal }))
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "invalid").await;
    }
    // Nothing of that started anything, and the server still answers.
    assert_eq!(p.list().await.len(), 1);
    assert_eq!(other.list().await.len(), 1);
}

/// A background process's `env` meets an agent's `env`'s rule for names, with its message; the
/// refused process never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_refuses_reserved_env_names_as_agents_do() {
    let s = TestServer::start().await;
    let p = agent(&s, "env").await;
    let id = &p.agent;
    for name in ["HTTPS_PROXY", "all_proxy", "AGENTHOLD_X", "A=B"] {
        let env = json!({ name: "x" });
        let agent = env_refusal(
            &s,
            "PATCH",
            &format!("/api/v1/agents/{id}"),
            json!({ "env": env }),
        )
        .await;
        let process = env_refusal(
            &s,
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            json!({"command": ["true"], "env": env}),
        )
        .await;
        assert_eq!(process, agent, "{name}");
    }
    assert!(p.list().await.is_empty(), "a refused process never starts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tag_one_running_process_even_when_started_at_once() {
    let s = TestServer::start().await;
    let p = agent(&s, "tagrace").await;
    let answers = futures::future::join_all((0..10).map(|_| {
        let p = p.clone();
        async move {
            p.start_raw(json!({"command": ["sleep", "1000"], "tag": "dup"}))
                .await
                .0
        }
    }))
    .await;
    assert_eq!(
        answers.iter().filter(|s| **s == 201).count(),
        1,
        "{answers:?}"
    );
    assert!(
        answers.iter().all(|s| [201, 409].contains(s)),
        "{answers:?}"
    );
    let running = p.list().await;
    assert_eq!(running.len(), 1);
}

/// A request body that sends `first` and then never ends.
fn endless_body(first: &'static [u8]) -> reqwest::Body {
    let once = futures::stream::once(async move { Ok::<_, std::io::Error>(first.to_vec()) });
    reqwest::Body::wrap_stream(futures::StreamExt::chain(once, futures::stream::pending()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdin_write_that_never_ends_does_not_hide_the_end_or_block_others() {
    let s = TestServer::start().await;
    let p = agent(&s, "stdin").await;
    // It never reads its stdin and ends by itself while an upload to it is still open.
    let quick = p
        .start(json!({"command": ["sh", "-c", "sleep 0.5; echo bye"], "stdin": true}))
        .await;
    let upload = tokio::spawn(
        s.http
            .post(p.url(&format!("/{}/stdin", quick.id)))
            .bearer_auth(crate::common::TOKEN)
            .body(endless_body(b"hello"))
            .send(),
    );
    let ended = p.ended(&quick.id).await;
    assert_eq!(
        (ended.state, ended.exit_code),
        (ProcessState::Exited, Some(0))
    );
    let answer = upload.await.unwrap().unwrap();
    assert_eq!(answer.status(), 400, "the write ends with the process");

    // A write the process does not take holds no one else up: a second is refused at once,
    // and removing the process ends the first.
    let deaf = p
        .start(json!({"command": ["sleep", "1000"], "stdin": true}))
        .await;
    let big: &'static [u8] = Box::leak(vec![b'x'; 1 << 20].into_boxed_slice());
    let big_write = || {
        tokio::spawn(
            s.http
                .post(p.url(&format!("/{}/stdin", deaf.id)))
                .bearer_auth(crate::common::TOKEN)
                .body(endless_body(big))
                .send(),
        )
    };
    let mut stuck = big_write();
    // An empty write that does not close stdin goes through until the big one holds on. The
    // two race for the pipe: a big write that came second is itself refused, and sent again.
    let deadline = tokio::time::Instant::now() + crate::common::DEADLINE;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a second write was never refused while the first waited"
        );
        if stuck.is_finished() {
            let lost = stuck.await.unwrap().unwrap();
            assert_eq!(lost.status(), 409, "a big write ended early");
            stuck = big_write();
        }
        if p.stdin(&deaf.id, b"", false).await.0 == 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(p.remove(&deaf.id).await, 204);
    let answer = stuck.await.unwrap().unwrap();
    assert_eq!(answer.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_their_callers_gave_up_on_cost_the_tunnel_nothing() {
    let s = TestServer::start().await;
    let p = agent(&s, "waits").await;
    let long = p.sh("exec sleep 1000").await;
    // Far more than the tunnel's 256 streams, each abandoned by its caller.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    for _ in 0..6 {
        futures::future::join_all((0..50).map(|_| {
            impatient
                .get(p.url(&format!("/{}/wait?timeoutMs=3600000", long.id)))
                .bearer_auth(crate::common::TOKEN)
                .send()
        }))
        .await;
    }
    // The agent's tunnel is the one it had: an exec and the process still answer.
    let r = s.exec(&p.agent, &["echo", "still here"]).await;
    assert_eq!(r["stdout"], "still here\n");
    assert_eq!(p.get(&long.id).await.1["state"], "running");
}

/// Reads an attach's output until its stdout holds `want`.
async fn attached_stdout_until(output: &mut agenthold::tunnel::conn::AttachedOutput, want: &[u8]) {
    use agenthold::tunnel::conn::OutputPiece;
    let mut got = Vec::new();
    while got.len() < want.len() {
        match tokio::time::timeout(crate::common::DEADLINE, output.next()).await {
            Ok(Some(Ok(OutputPiece::Stdout(b)))) => got.extend_from_slice(&b),
            other => panic!("expected stdout, got {other:?}"),
        }
    }
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_caller_talks_to_a_process_over_one_stream_beside_the_api() {
    use agenthold::tunnel::conn::{ConnError, OutputPiece, ProcessName};
    let s = TestServer::start().await;
    let p = agent(&s, "attach").await;
    let cat = p
        .start(json!({"command": ["cat"], "stdin": true, "tag": "talk"}))
        .await;
    let conn = s.lc.wake_conn(&p.agent).await.unwrap();
    let talk = ProcessName::parse("talk".into()).unwrap();
    let mut attached = conn.attach(&talk, 0).await.unwrap();
    assert_eq!(attached.info.id, cat.id);
    assert!(attached.info.stdin_open);

    attached.stdin.write(b"over the attach\n").await.unwrap();
    attached_stdout_until(&mut attached.output, b"over the attach\n").await;
    // A write through the API goes to the same stdin and comes back on the attach.
    let (status, _) = p.stdin(&cat.id, b"over the API\n", false).await;
    assert_eq!(status, 200);
    attached_stdout_until(&mut attached.output, b"over the API\n").await;
    attached.stdin.close().await.unwrap();
    match tokio::time::timeout(crate::common::DEADLINE, attached.output.next()).await {
        Ok(Some(Ok(OutputPiece::End(end)))) => {
            assert_eq!(end.exit_code, Some(0));
            assert!(!end.stdin_open);
        }
        other => panic!("expected the end, got {other:?}"),
    }
    assert!(attached.output.next().await.is_none());
    let all = p.output_to_end(&cat.id).await;
    assert_eq!(all.stdout, b"over the attach\nover the API\n");

    // A process without stdin: once the reader has seen sandboxd say so, writes are refused.
    let quiet = p.sh("sleep 30").await;
    let name = ProcessName::parse(quiet.id.clone()).unwrap();
    let mut attached = conn.attach(&name, 0).await.unwrap();
    assert!(!attached.info.stdin_open);
    let read = tokio::time::timeout(Duration::from_millis(500), attached.output.next()).await;
    assert!(read.is_err(), "nothing to read yet: {read:?}");
    assert!(matches!(
        attached.stdin.write(b"nobody reads this").await,
        Err(ConnError::StdinClosed)
    ));
    // Leaving the attach leaves the process running.
    drop(attached);
    assert_eq!(p.get(&quiet.id).await.1["state"], "running");
}
