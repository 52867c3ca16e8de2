use std::time::Duration;

use agenthold_proto::{ErrorCode, ExecRequest, Frame, FrameCodec, Request, RunAs};
use futures::{SinkExt, StreamExt};
use tokio_util::codec::Framed;

use crate::harness::{collect, eventually, exec_req, group_alive, Harness, BOOT_ENV, IMAGE_PATH};

#[tokio::test]
async fn stdout_stderr_stdin_and_exit_code() {
    let h = Harness::start().await;
    let out = h
        .exec(
            exec_req(&["sh", "-c", "cat; echo oops >&2; exit 3"]),
            b"hello stdin",
        )
        .await;
    assert_eq!(out.stdout, b"hello stdin");
    assert_eq!(out.stderr, b"oops\n");
    assert_eq!(out.exit.exit_code, 3);
    assert!(!out.exit.timed_out && !out.exit.truncated);
}

#[tokio::test]
async fn runs_in_the_home_with_a_clean_environment() {
    let h = Harness::start().await;
    let mut req = exec_req(&[
        "sh",
        "-c",
        "pwd; echo $HOME; echo $LANG; echo ${CARGO:-unset}; echo $EXTRA; echo $HTTP_PROXY; echo $FROM_BOOT_TOO",
    ]);
    // The request's own variables come after boot.json's, so they win.
    req.env = vec![
        ("EXTRA".into(), "yes".into()),
        ("FROM_BOOT_TOO".into(), "request".into()),
    ];
    let out = h.exec(req, b"").await;
    let home = h.home.path().canonicalize().unwrap();
    let lines: Vec<String> = out.stdout_str().lines().map(String::from).collect();
    assert_eq!(
        std::path::Path::new(&lines[0]).canonicalize().unwrap(),
        home
    );
    assert_eq!(
        lines[2..],
        ["C.UTF-8", "unset", "yes", BOOT_ENV.1, "request"]
    );

    std::fs::create_dir(h.home.path().join("sub")).unwrap();
    let mut req = exec_req(&["pwd"]);
    req.cwd = Some("sub".into());
    assert!(h
        .exec(req, b"")
        .await
        .stdout_str()
        .trim_end()
        .ends_with("/sub"));
    let mut req = exec_req(&["pwd"]);
    req.cwd = Some("missing".into());
    assert_eq!(
        h.refused(&Request::Exec(req)).await.code,
        ErrorCode::NotFound
    );
    assert_eq!(
        h.refused(&Request::Exec(exec_req(&[]))).await.code,
        ErrorCode::Invalid
    );
}

#[tokio::test]
async fn commands_keep_the_images_path_and_virtual_env() {
    let h = Harness::start().await;
    let out = h
        .exec(
            exec_req(&["sh", "-c", "echo $PATH; echo $VIRTUAL_ENV"]),
            b"",
        )
        .await;
    assert_eq!(out.stdout_str(), format!("{IMAGE_PATH}\n/opt/venv\n"));
}

#[tokio::test]
async fn root_runs_as_uid_0_when_sandboxd_is_root_and_is_refused_when_not() {
    let h = Harness::start().await;
    let req = ExecRequest {
        run_as: RunAs::Root,
        ..exec_req(&["sh", "-c", "id -u; echo $HOME $USER"])
    };
    if nix::unistd::geteuid().is_root() {
        let out = h.exec(req, b"").await;
        assert_eq!(out.stdout_str(), "0\n/root root\n", "{}", out.stderr_str());
    } else {
        let refused = h.refused(&Request::Exec(req)).await;
        assert_eq!(refused.code, ErrorCode::PermissionDenied);
        assert!(refused.message.contains("root"), "{}", refused.message);
    }
}

#[tokio::test]
async fn a_missing_command_exits_127() {
    let h = Harness::start().await;
    let out = h.exec(exec_req(&["no-such-command-agenthold"]), b"").await;
    assert_eq!(out.exit.exit_code, 127);
    assert!(out.stderr_str().contains("no-such-command-agenthold"));
    // A file that may not be executed: 126.
    let plain = h.home.path().join("plain.txt");
    std::fs::write(&plain, "not a program\n").unwrap();
    std::fs::set_permissions(&plain, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = h.exec(exec_req(&[plain.to_str().unwrap()]), b"").await;
    assert_eq!(out.exit.exit_code, 126, "{}", out.stderr_str());
    // An executable file without `#!` is a shell script, as execvp and shells have it.
    let script = h.home.path().join("script");
    std::fs::write(&script, "echo from-sh\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = h.exec(exec_req(&[script.to_str().unwrap()]), b"").await;
    assert_eq!(out.exit.exit_code, 0, "{}", out.stderr_str());
}

#[tokio::test]
async fn the_timeout_kills_the_whole_group() {
    let h = Harness::start().await;
    let req = ExecRequest {
        timeout_ms: Some(500),
        ..exec_req(&["sh", "-c", "echo $$; sleep 100 & sleep 100"])
    };
    let out = h.exec(req, b"").await;
    assert!(out.exit.timed_out);
    assert_eq!(out.exit.exit_code, 137);
    let pgid: i32 = out.stdout_str().trim().parse().unwrap();
    eventually(Duration::from_secs(10), "the group to be gone", || {
        !group_alive(pgid)
    })
    .await;
}

#[tokio::test]
async fn background_children_end_with_the_command() {
    let h = Harness::start().await;
    let out = h
        .exec(
            exec_req(&["sh", "-c", "echo $$; sleep 100 >/dev/null 2>&1 &"]),
            b"",
        )
        .await;
    assert_eq!(out.exit.exit_code, 0);
    let pgid: i32 = out.stdout_str().trim().parse().unwrap();
    eventually(Duration::from_secs(10), "the group to be gone", || {
        !group_alive(pgid)
    })
    .await;
}

#[tokio::test]
async fn output_beyond_the_cap_is_dropped() {
    let h = Harness::start().await;
    let req = ExecRequest {
        output_cap: Some(1000),
        ..exec_req(&["sh", "-c", "head -c 3000000 /dev/zero; echo tail >&2"])
    };
    let out = h.exec(req, b"").await;
    assert_eq!(out.stdout.len(), 1000);
    assert_eq!(out.stderr, b"tail\n");
    assert!(out.exit.truncated);
    assert_eq!(out.exit.exit_code, 0);
}

#[tokio::test]
async fn a_caller_that_goes_away_kills_the_command() {
    let h = Harness::start().await;
    let (s, r) = h
        .open(&Request::Exec(exec_req(&[
            "sh",
            "-c",
            "echo $$; sleep 100 & sleep 100",
        ])))
        .await;
    r.unwrap();
    let mut f = Framed::new(s, FrameCodec::default());
    let pgid: i32 = match f.next().await.unwrap().unwrap() {
        Frame::Stdout(b) => String::from_utf8_lossy(&b).trim().parse().unwrap(),
        other => panic!("unexpected {other:?}"),
    };
    assert!(group_alive(pgid));
    drop(f);
    eventually(Duration::from_secs(10), "the group to be gone", || {
        !group_alive(pgid)
    })
    .await;
    h.ping().await;
}

#[tokio::test]
async fn stdin_closed_cleanly_keeps_the_command_running() {
    let h = Harness::start().await;
    let (s, r) = h
        .open(&Request::Exec(exec_req(&[
            "sh",
            "-c",
            "read x; echo got $x",
        ])))
        .await;
    r.unwrap();
    let mut f = Framed::new(s, FrameCodec::default());
    f.send(Frame::Data("line\n".into())).await.unwrap();
    f.send(Frame::StdinEof).await.unwrap();
    let out = collect(&mut f).await;
    assert_eq!(out.stdout, b"got line\n");
}

#[tokio::test]
async fn commands_run_as_the_account() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to switch accounts");
        return;
    }
    let h = Harness::start_with(|o| {
        o.account = sandboxd::Account {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
            shell: "/bin/sh".into(),
        };
        o.home = std::env::temp_dir();
    })
    .await;
    let out = h
        .exec(
            exec_req(&["sh", "-c", "id -u; id -g; id -G; echo $USER"]),
            b"",
        )
        .await;
    assert_eq!(out.stdout_str(), "65534\n65534\n65534\nnobody\n");
}

/// Arguments of 130,000 bytes (near Linux's 131,071 per string), about 1 MiB in all.
fn megabyte_of_arguments() -> ExecRequest {
    let mut argv = vec!["sh", "-c", "for a; do printf '%s ' ${#a}; done", "sh"];
    let arg = "a".repeat(130_000);
    argv.extend(std::iter::repeat_n(arg.as_str(), 8));
    exec_req(&argv)
}

#[tokio::test]
async fn a_megabyte_command_line_runs() {
    let h = Harness::start().await;
    let req = megabyte_of_arguments();
    assert!(req.check_size().unwrap() > 1_040_000);
    let out = h.exec(req, b"").await;
    assert_eq!(
        out.stdout_str(),
        "130000 ".repeat(8),
        "{}",
        out.stderr_str()
    );
    assert_eq!(out.exit.exit_code, 0);

    let mut req = exec_req(&["sh", "-c", "env | grep -c '^V[0-9]*=x'"]);
    req.env = (0..10_000)
        .map(|i| (format!("V{i}"), "x".repeat(50)))
        .collect();
    let out = h.exec(req, b"").await;
    assert_eq!(out.stdout_str(), "10000\n", "{}", out.stderr_str());
}

#[tokio::test]
async fn a_command_line_over_the_limits_is_refused_with_a_reason() {
    let h = Harness::start().await;
    // A server that did not check gets the reason from sandboxd, not exit code 126 or a
    // refused header.
    let mut req = megabyte_of_arguments();
    req.command.push("b".repeat(10_000));
    let err = h.refused(&Request::Exec(req)).await;
    assert_eq!(err.code, ErrorCode::TooLarge);
    assert!(err.message.contains("1048576"), "{}", err.message);

    let err = h
        .refused(&Request::Exec(exec_req(&[
            "sh",
            "-c",
            &"a".repeat(200_000),
        ])))
        .await;
    assert_eq!(err.code, ErrorCode::TooLarge);
    assert!(err.message.contains("131071"), "{}", err.message);
    h.ping().await;
}
