//! The `agenthold` CLI binary against a live server: agents, exec exit codes, cp both ways,
//! and a shell driven through a pipe.

use std::process::Stdio;

use crate::common::{TestServer, TOKEN};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub(crate) fn cli(s: &TestServer) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agenthold"));
    c.env("AGENTHOLD_URL", &s.base)
        .env("AGENTHOLD_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

pub(crate) async fn run(s: &TestServer, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(crate::common::DEADLINE, cli(s).args(args).output())
        .await
        .expect("the CLI hung")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_exec_and_cp_from_the_command_line() {
    let s = TestServer::start().await;
    let (code, _, err) = run(&s, &["agents", "create", "clitest", "--wait"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(&s, &["agents", "list", "--json"]).await;
    assert_eq!(code, 0);
    let agents: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(agents[0]["name"], "clitest");
    assert_eq!(agents[0]["state"], "running");
    let (code, out, _) = run(&s, &["agents", "list"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("clitest") && out.contains("running"), "{out}");

    let (code, out, err) = run(
        &s,
        &[
            "exec",
            "clitest",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
    )
    .await;
    assert_eq!((code, out.as_str(), err.as_str()), (3, "out\n", "err\n"));

    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("up.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let (code, _, err) = run(&s, &["cp", src.to_str().unwrap(), "clitest:up.bin"]).await;
    assert_eq!(code, 0, "{err}");
    let back = dir.path().join("back.bin");
    let (code, _, err) = run(&s, &["cp", "clitest:up.bin", back.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&back).unwrap(), data);

    let (code, _, err) = run(&s, &["cp", "clitest:missing", back.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(err.contains("not_found"), "{err}");
    assert_eq!(
        std::fs::read(&back).unwrap(),
        data,
        "a failed download left the old file alone"
    );

    let (code, _, err) = run(&s, &["agents", "show", "nosuch"]).await;
    assert_eq!(code, 1);
    assert!(!err.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_runs_through_a_pipe() {
    let s = TestServer::start().await;
    s.running_agent("piped").await;
    let mut child = cli(&s)
        .args(["shell", "piped"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"echo through-'the'-pipe; exit\n")
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(crate::common::DEADLINE, child.wait_with_output())
        .await
        .expect("shell did not end")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("through-the-pipe"), "{stdout}");
    assert_eq!(out.status.code(), Some(0));
}

#[tokio::test]
async fn wrong_token_and_no_server_say_what_to_do() {
    let s = TestServer::start().await;
    let out = cli(&s)
        .env("AGENTHOLD_TOKEN", "wrong")
        .args(["agents", "list"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("AGENTHOLD_TOKEN") || err.contains("--token"),
        "{err}"
    );

    // Nothing listens there, and no other test's server can take it meanwhile.
    let port = crate::common::free_port();
    let out = cli(&s)
        .env("AGENTHOLD_URL", format!("http://127.0.0.1:{port}"))
        .args(["agents", "list"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("AGENTHOLD_URL"), "{err}");
}

/// The fake driver pretends to pull images under `pull.invalid/` (see `driver::fake`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_wait_reports_the_image_pull_in_plain_lines_off_a_terminal() {
    let s = TestServer::start().await;
    let image = "pull.invalid/cli-lines:1";
    let (code, _, err) = run(
        &s,
        &["agents", "create", "lines", "--image", image, "--wait"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with(&format!("lines: pulling {image}: 0%")))
        .unwrap_or_else(|| panic!("no first pull line: {err}"));
    let pulled = lines
        .iter()
        .position(|l| l.starts_with(&format!("lines: pulled {image} (")))
        .unwrap_or_else(|| panic!("no pulled line: {err}"));
    assert!(first < pulled, "{err}");
    assert!(
        pulled - first >= 2,
        "no progress between start and end: {err}"
    );
    let running = lines
        .iter()
        .position(|l| l.starts_with("lines: running"))
        .unwrap_or_else(|| panic!("no running line: {err}"));
    assert!(pulled < running, "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");

    let missing = "pull.invalid/missing:1";
    let (code, _, err) = run(
        &s,
        &["agents", "create", "gone", "--image", missing, "--wait"],
    )
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "gone: pulling {missing} failed: the registry has no such image or tag"
        )),
        "{err}"
    );
    assert!(err.contains("agent gone failed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_wait_draws_a_progress_bar_on_a_terminal() {
    use std::io::Read;

    let s = TestServer::start().await;
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let image = "pull.invalid/cli-bar:1";
    let mut child = cli(&s)
        .args(["agents", "create", "barred", "--image", image, "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(pty.slave))
        .spawn()
        .unwrap();
    // Our copy of the terminal's far end went into the child; when the child exits, reading
    // the near end ends (EIO).
    let mut master = std::fs::File::from(pty.master);
    let reader = tokio::task::spawn_blocking(move || {
        let mut screen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            screen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&screen).into_owned()
    });
    let status = tokio::time::timeout(crate::common::DEADLINE, child.wait())
        .await
        .expect("the CLI hung")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let screen = tokio::time::timeout(crate::common::DEADLINE, reader)
        .await
        .expect("the terminal did not close")
        .unwrap();
    assert!(
        screen.contains(&format!("barred: pulling {image} [")),
        "no progress bar: {screen:?}"
    );
    assert!(screen.contains("%"), "{screen:?}");
    assert!(
        screen.contains(&format!("barred: pulled {image} (")),
        "{screen:?}"
    );
    assert!(screen.contains("barred: running"), "{screen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_processes_from_the_command_line() {
    let s = TestServer::start().await;
    let (code, _, err) = run(&s, &["agents", "create", "bg", "--wait"]).await;
    assert_eq!(code, 0, "{err}");
    let script = "echo started; echo warn >&2; read line; echo got $line; exit 5";
    // --detach prints the id and returns at once; the command runs on.
    let (code, out, err) = run(
        &s,
        &[
            "exec",
            "--detach",
            "--tag",
            "job",
            "bg",
            "--",
            "sh",
            "-c",
            "sleep 1000",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let id = out.trim().to_string();
    assert!(agenthold_proto::is_session_id(&id), "{out}");
    let (code, out, _) = run(&s, &["ps", "bg"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains(&id) && out.contains("job") && out.contains("running"),
        "{out}"
    );
    let (code, _, err) = run(&s, &["kill", "bg", "job"]).await;
    assert_eq!(code, 0, "{err}");
    // wait exits as a shell says a TERM'd command did.
    let (code, _, err) = run(&s, &["wait", "bg", &id]).await;
    assert_eq!(code, 143, "{err}");
    let (code, _, err) = run(&s, &["kill", "-s", "NOPE", "bg", &id]).await;
    assert_eq!(code, 1);
    assert!(err.contains("not a signal"), "{err}");

    // logs -f follows to the end and exits with the process's code; streams stay apart.
    let (code, out, _) = run(&s, &["exec", "-d", "bg", "--", "sh", "-c", script]).await;
    assert_eq!(code, 0);
    let id = out.trim().to_string();
    let follower = tokio::spawn({
        let mut c = cli(&s);
        c.args(["logs", "-f", "bg", &id]);
        async move { tokio::time::timeout(crate::common::DEADLINE, c.output()).await }
    });
    // The process has no stdin pipe (exec -d starts it without), so `read` gets EOF at once.
    let out = follower.await.unwrap().expect("logs -f hung").unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\ngot\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "warn\n");
    // From an offset, without -f: the rest so far, exit 0. (Where "got" starts depends on
    // when each pipe was read, so the API says.)
    let agents: Vec<Value> = serde_json::from_value(s.get_json("/api/v1/agents").await).unwrap();
    let agent_id = agents[0]["id"].as_str().unwrap();
    let lines = s
        .get_text(&format!("/api/v1/agents/{agent_id}/processes/{id}/output"))
        .await;
    let offset = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find_map(|l| {
            let at = l["data"].as_str()?.find("got")?;
            Some(l["offset"].as_u64()? + at as u64)
        })
        .unwrap_or_else(|| panic!("no line with got: {lines}"))
        .to_string();
    let (code, out, _) = run(&s, &["logs", "--offset", &offset, "bg", &id]).await;
    assert_eq!((code, out.as_str()), (0, "got\n"));
    let (code, out, _) = run(&s, &["--json", "ps", "bg"]).await;
    assert_eq!(code, 0);
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1]["exitCode"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_and_env_from_the_command_line() {
    let s = TestServer::start_with(|c| {
        c.presets.insert(
            "dev".into(),
            agenthold::agents::preset::Preset {
                description: Some("the tools".into()),
                cpus: Some(1.0),
                env: [("FROM_PRESET".to_string(), "p".to_string())].into(),
                ..Default::default()
            },
        );
        c.presets.insert("minimal".into(), Default::default());
        c.sandbox.default_preset = Some("dev".into());
    })
    .await;
    let (code, out, err) = run(&s, &["presets"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("dev (default)") && out.contains("the tools"),
        "{out}"
    );
    assert!(out.contains("minimal"), "{out}");
    let (code, out, _) = run(&s, &["--json", "presets"]).await;
    assert_eq!(code, 0);
    let presets: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(presets.len(), 2);

    let (code, _, err) = run(
        &s,
        &[
            "agents",
            "create",
            "envy",
            "--preset",
            "minimal",
            "--env",
            "A=1=2",
            "--ttl-minutes",
            "600",
            "--label",
            "team=ml",
            "--wait",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let listed = s.get_json("/api/v1/agents?label=team=ml").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["labels"]["team"], "ml");
    assert!(listed[0]["expiresAt"].is_string(), "{listed}");
    let (code, out, _) = run(
        &s,
        &[
            "exec",
            "envy",
            "--",
            "sh",
            "-c",
            "echo $A-${FROM_PRESET:-none}",
        ],
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "1=2-none\n"));
    let (code, out, _) = run(&s, &["agents", "show", "envy"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("minimal") && out.contains("A=1=2"), "{out}");

    let (code, _, err) = run(&s, &["agents", "create", "x", "--preset", "gpu"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("gpu") && err.contains("dev"), "{err}");
    let (code, _, err) = run(&s, &["agents", "create", "x", "--env", "NOEQUALS"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("NAME=VALUE"), "{err}");
    s.stop().await;
}
