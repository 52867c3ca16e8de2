//! Background processes on a real engine, run by the static sandboxd and its shim as the
//! sandbox's `agent` account: output read in pieces across tunnel drops and a server SIGKILL is
//! byte for byte the command's; a kill or a timeout leaves nothing of the tree (setsid
//! included); a gigabyte of output keeps sandboxd's memory flat and reads as gaps, never as a
//! wrong byte; a quiet process lets its agent sleep (and is then `lost`, its output kept) unless
//! it keeps it awake. Needs Docker (scripts/docker-setup.sh) and a static sandboxd
//! (scripts/build-sandboxd.sh).

use crate::common::process;
use crate::common::sse;
use std::time::{Duration, Instant};

use crate::common::docker::*;
use crate::common::procs::{alive_with, Joined, Procs};
use crate::common::{wait_for, TestServer, DEADLINE};
use agenthold::api::output_lines::line_bytes;
use agenthold::api::types::process::{OutputLine, ProcessState};
use agenthold::api::types::OutputStream;
use serde_json::json;

/// Writes `seq 1 2000000` in twenty bursts a fifth of a second apart (so that drops land while
/// it writes), then a marker on stderr.
const SEQ_SCRIPT: &str = "i=0; while [ $i -lt 20 ]; do seq $((i*100000+1)) $((i*100000+100000)); \
                          sleep 0.2; i=$((i+1)); done; echo the-end >&2";

fn seq_output() -> Vec<u8> {
    (1..=2_000_000u32)
        .flat_map(|n| format!("{n}\n").into_bytes())
        .collect()
}

/// Follows the process to its end from wherever `j` got to, again after every cut.
async fn follow_to_end(p: &Procs, pid: &str, j: &mut Joined) -> usize {
    let mut pieces = 0;
    let deadline = Instant::now() + 4 * DEADLINE;
    while j.exit.is_none() {
        assert!(Instant::now() < deadline, "the output did not end: {j:?}");
        pieces += 1;
        let (status, lines) = p.output_lines(pid, j.end, true).await;
        if status == 200 {
            j.error = None;
            j.extend(&lines);
        } else {
            // The agent is reconnecting: its tunnel was just dropped.
            assert!([409, 503].contains(&status), "{status}: {lines:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    pieces
}

fn check_seq(j: &Joined) {
    assert!(j.gaps.is_empty(), "output left the buffer: {:?}", j.gaps);
    assert_eq!(j.stderr, b"the-end\n");
    let expected = seq_output();
    assert_eq!(j.stdout.len(), expected.len());
    assert!(j.stdout == expected, "stdout differs from seq's output");
    let exit = j.exit.as_ref().expect("exit");
    assert_eq!(
        (exit.state, exit.exit_code),
        (ProcessState::Exited, Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_read_across_six_tunnel_drops_is_the_commands_output() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env
        .server_with(false, |c| c.sandbox.process_output_kb = 64 * 1024)
        .await;
    let id = s.running_agent(("drops", AGENT_IMAGE)).await;
    let p = Procs::new(s.http.clone(), &s.base, &id);
    let started = p.sh(SEQ_SCRIPT).await;
    let reader = {
        let p = p.clone();
        let pid = started.id.clone();
        tokio::spawn(async move {
            let mut j = Joined::default();
            let pieces = follow_to_end(&p, &pid, &mut j).await;
            (j, pieces)
        })
    };
    // Six drops at random moments while it writes (about four seconds in all).
    for _ in 0..6 {
        let pause = 100 + rand::random::<u64>() % 400;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        s.lc.tunnels().disconnect(&id);
    }
    let (j, pieces) = reader.await.expect("reader");
    eprintln!("read in {pieces} pieces");
    check_seq(&j);
    // The drops cost sandboxd nothing: the process ran on untouched.
    let info = p.ended(&started.id).await;
    assert_eq!(info.state, ProcessState::Exited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outlives_a_server_sigkill_and_its_output_continues_exactly() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sandbox = process::docker_sandbox_yaml(&env.prefix, &env.pool, AGENT_IMAGE, None);
    sandbox.push_str("  process_output_kb: 65536\n");
    let server =
        process::ServerConfig::write(dir.path(), "0.0.0.0", &sandbox, Duration::from_secs(90));
    let running = server.start().await;
    let id = server.create_agent("sigkill").await;
    server.wait_state(&id, "running").await;
    let p = Procs::new(reqwest::Client::new(), &server.base, &id);
    let started = p.sh(SEQ_SCRIPT).await;
    let mut j = Joined::default();
    wait_for("some output", || {
        let p = p.clone();
        let pid = started.id.clone();
        async move { p.get(&pid).await.1["outputBytes"].as_u64().unwrap_or(0) > 0 }
    })
    .await;
    let (status, lines) = p.output_lines(&started.id, 0, false).await;
    assert_eq!(status, 200);
    j.extend(&lines);
    assert!(j.end > 0);
    running.kill();
    let _running = server.start().await;
    follow_to_end(&p, &started.id, &mut j).await;
    check_seq(&j);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_timeout_leave_nothing_of_the_tree_and_stdin_reaches_the_process() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = env.server(false).await;
    let id = s.running_agent(("tree", AGENT_IMAGE)).await;
    let p = Procs::new(s.http.clone(), &s.base, &id);

    // The tree: a background child, one that left with setsid, and the shell waiting.
    let m = format!("ahdk-tree-{}", std::process::id());
    let script = format!(
        "(exec -a {m}-bg sleep 1000) & setsid bash -c 'exec -a {m}-setsid sleep 1000' & wait"
    );
    let tree = p.start(json!({"command": ["bash", "-c", script]})).await;
    wait_for("the tree to start", || async {
        alive_with(&format!("{m}-bg")) && alive_with(&format!("{m}-setsid"))
    })
    .await;
    assert_eq!(p.signal(&tree.id, "KILL").await, 204);
    let ended = p.ended(&tree.id).await;
    assert_eq!(
        (ended.state, ended.signal.as_deref()),
        (ProcessState::Killed, Some("KILL"))
    );
    wait_for("no process of the tree left", || async { !alive_with(&m) }).await;

    // A timeout ends the tree too, setsid and all, even when the shell ignores TERM.
    let t = format!("ahdk-timeout-{}", std::process::id());
    let script = format!(
        "trap '' TERM; setsid bash -c 'exec -a {t}-setsid sleep 1000' & exec -a {t} sleep 1001"
    );
    let timed = p
        .start(json!({"command": ["bash", "-c", script], "timeoutMs": 500}))
        .await;
    let ended = p.ended(&timed.id).await;
    assert!(ended.timed_out, "{ended:?}");
    assert_eq!(ended.state, ProcessState::Killed);
    wait_for("no process of the timed-out tree left", || async {
        !alive_with(&t)
    })
    .await;

    // It runs as the agent's account; stdin reaches it and eof ends cat.
    let cat = p
        .start(json!({"command": ["sh", "-c", "id -un; exec cat"], "stdin": true}))
        .await;
    let (status, body) = p.stdin(&cat.id, b"through stdin\n", true).await;
    assert_eq!((status, body["written"].clone()), (200, json!(14)));
    let ended = p.ended(&cat.id).await;
    assert_eq!(ended.exit_code, Some(0));
    let out = p.output_to_end(&cat.id).await;
    assert_eq!(out.stdout, b"agent\nthrough stdin\n");
}

fn own_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("own status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// sandboxd's resident memory, read from the host.
fn sandboxd_rss_kib(env: &DockerEnv, id: &str) -> u64 {
    let container = env.container(id);
    let pid = sandboxd_pid(&container)
        .unwrap_or_else(|| panic!("no sandboxd below the init of {container}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("sandboxd status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_processes_and_a_gigabyte_of_output_keep_memory_bounded() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        let s = env.server(false).await;
        let id = s.running_agent(("gigabyte", AGENT_IMAGE)).await;
        let p = Procs::new(s.http.clone(), &s.base, &id);
        let idle = sandboxd_rss_kib(&env, &id);
        // This process is the server (and the reader, which keeps nothing).
        let server_before = own_rss_kib();

        let sleepers = futures::future::join_all((0..100).map(|_| {
            let p = p.clone();
            async move { p.sh("exec sleep 1000").await }
        }))
        .await;
        assert_eq!(
            p.list()
                .await
                .iter()
                .filter(|x| x.state == ProcessState::Running)
                .count(),
            100
        );

        // A gigabyte of a known pattern: every byte read must be the pattern's at its offset.
        const PATTERN: &[u8] = b"abcdefghij\n";
        let big = p.sh("yes abcdefghij | head -c 1073741824").await;
        // Read once it has all been written, so that most of it has surely left the buffer.
        let (status, written) = p.wait(&big.id, 240_000).await;
        assert_eq!(
            status, 200,
            "the gigabyte is still being written: {written:?}"
        );
        let (mut data, mut gaps, mut next, mut exit) = (0u64, 0u64, 0u64, None);
        let deadline = Instant::now() + 6 * DEADLINE;
        while exit.is_none() {
            assert!(Instant::now() < deadline, "the gigabyte did not end");
            let status = p
                .follow_each(&big.id, next, |raw| {
                    if raw.get("error").is_some() {
                        return;
                    }
                    let line: OutputLine = serde_json::from_value(raw).expect("a line");
                    match &line {
                        OutputLine::Gap { gap } => {
                            assert_eq!(gap.from, next);
                            gaps += gap.to - gap.from;
                            next = gap.to;
                        }
                        OutputLine::Exit { exit: e } => exit = Some((**e).clone()),
                        _ => {
                            let (offset, stream, bytes) = line_bytes(&line).expect("data");
                            assert_eq!((offset, stream), (next, OutputStream::Stdout));
                            for (i, b) in bytes.iter().enumerate() {
                                let want =
                                    PATTERN[((offset + i as u64) % PATTERN.len() as u64) as usize];
                                assert_eq!(
                                    *b,
                                    want,
                                    "a wrong byte at offset {}",
                                    offset + i as u64
                                );
                            }
                            data += bytes.len() as u64;
                            next += bytes.len() as u64;
                        }
                    }
                })
                .await;
            assert_eq!(status, 200);
        }
        let exit = exit.expect("exit");
        assert_eq!(exit.exit_code, Some(0));
        assert_eq!(exit.output_bytes, 1 << 30);
        assert_eq!(data + gaps, 1 << 30);
        assert!(gaps > 0, "output past the buffer must read as a gap");
        eprintln!("read {data} bytes, {gaps} left the buffer first");
        let after = sandboxd_rss_kib(&env, &id);
        eprintln!("sandboxd RSS: {idle} KiB idle, {after} KiB with 100 processes after 1 GiB");
        assert!(
            after < idle + 64 * 1024,
            "sandboxd grew from {idle} KiB to {after} KiB"
        );
        let server_after = own_rss_kib();
        eprintln!("server RSS: {server_before} KiB before, {server_after} KiB after");
        assert!(
            server_after < server_before + 256 * 1024,
            "the server grew from {server_before} KiB to {server_after} KiB"
        );
        for x in sleepers {
            assert_eq!(p.remove(&x.id).await, 204);
        }
    })
    .await
}

/// A server whose `idleMinutes` unit is a second, checked every second.
async fn sleepy_server(env: &DockerEnv) -> TestServer {
    env.server_with(false, |c| {
        c.sandbox.idle_minute = Duration::from_secs(1);
        c.sandbox.idle_check_interval = Duration::from_secs(1);
        // Stopped straight away: what a stop does to processes is the point here.
        c.sandbox.default_deep_sleep_minutes = 0;
    })
    .await
}

/// Creates an agent that sleeps after `idle` seconds unused.
async fn idle_agent(s: &TestServer, name: &str, idle: u32) -> String {
    s.running_agent(json!({"name": name, "image": AGENT_IMAGE, "idleMinutes": idle}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_process_lets_its_agent_sleep_and_is_lost_unless_it_keeps_it_awake() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = sleepy_server(&env).await;
    // Longer than sandboxd's activity report interval (5 s), so a keep-awake mark is reported
    // before the idle time is up.
    let idle = 8;
    let quiet_id = idle_agent(&s, "quiet", idle).await;
    let awake_id = idle_agent(&s, "awake", idle).await;
    let quiet = Procs::new(s.http.clone(), &s.base, &quiet_id);
    let awake = Procs::new(s.http.clone(), &s.base, &awake_id);
    let mut events = sse::Events::open(&s).await;
    let q = quiet.sh("echo waiting; exec sleep 1000").await;
    let k = awake
        .start(json!({"command": ["sh", "-c", "exec sleep 1000"], "keepAwake": true}))
        .await;
    assert!(k.keep_awake);

    s.wait_state(&quiet_id, &["sleeping"]).await;
    // Its sleep was announced as the process's end, without waking anything.
    events
        .about_until(&quiet_id, |kind, data| {
            kind == "process"
                && data["process"]["id"] == q.id.as_str()
                && data["process"]["state"] == "lost"
        })
        .await;
    // The keep-awake one stays up, poll after poll, for longer than its idle time again (the
    // state is read from the server, which is no use of the agent).
    let window = Instant::now() + Duration::from_secs(idle as u64 + 3);
    while Instant::now() < window {
        let a = s.agent(&awake_id).await;
        assert_eq!(a["state"], "running", "a kept-awake agent fell asleep: {a}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Asking wakes the sleeper; its process ended with the sandbox and kept its output.
    let after = quiet.ended(&q.id).await;
    assert_eq!(after.state, ProcessState::Lost);
    let out = quiet.output_to_end(&q.id).await;
    assert_eq!(out.stdout, b"waiting\n");
    // Once the keep-awake process ends, its agent sleeps too.
    assert_eq!(awake.remove(&k.id).await, 204);
    s.wait_state(&awake_id, &["sleeping"]).await;
}
