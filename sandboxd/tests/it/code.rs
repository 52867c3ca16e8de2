//! `code.*`: contexts, and runs in a kernel over the Jupyter protocol.
//!
//! Without ipykernel on the machine only the refusals run here; the kernel's behaviour is the
//! Docker tests' (`tests/it/docker/code.rs`), and the tests marked `ignore` run it here on a
//! machine that has `python3-ipykernel` (`cargo test -p sandboxd -- --ignored code::`).

use std::os::unix::fs::PermissionsExt;

use agenthold_proto::{
    self as proto, CodeContextCreate, CodeContextList, CodeContextRemove, CodeContextRestart,
    CodeDone, CodeEvent, CodeRun, ErrorCode, Request, MAX_CODE_LEN,
};

use crate::harness::Harness;

fn run(code: &str, context: Option<&str>) -> Request {
    Request::from(CodeRun {
        code: code.into(),
        context: context.map(String::from),
        timeout_ms: None,
        env: Vec::new(),
    })
}

/// Every event of a run, `done` last.
async fn events(h: &Harness, req: &Request) -> Vec<CodeEvent> {
    let (mut s, ok) = h.open(req).await;
    ok.expect("code.run");
    let mut all = Vec::new();
    loop {
        let e = proto::read_code_event(&mut s).await.expect("event");
        let done = matches!(e, CodeEvent::Done(_));
        all.push(e);
        if done {
            return all;
        }
    }
}

fn stdout(events: &[CodeEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            CodeEvent::Stdout(s) => Some(s.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_image_without_ipykernel_is_refused_naming_the_package() {
    // A python3 that has no ipykernel, first on the PATH the kernel starts with.
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("python3");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho '/usr/bin/python3: No module named ipykernel_launcher' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let h = Harness::start_with(|o| o.env.push(("PATH".into(), path))).await;
    let e = h.refused(&run("1+1", None)).await;
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(e.message.contains("python3-ipykernel"), "{}", e.message);
    let e = h
        .refused(&Request::from(CodeContextCreate::default()))
        .await;
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    // Nothing is left behind: no context was kept.
    let (_, list) = h.open(&Request::from(CodeContextList {})).await;
    assert_eq!(list.unwrap(), serde_json::json!([]));
}

#[tokio::test]
async fn oversized_code_and_unknown_contexts_are_refused() {
    let h = Harness::start().await;
    let e = h.refused(&run(&"x".repeat(MAX_CODE_LEN + 1), None)).await;
    assert_eq!(e.code, ErrorCode::TooLarge);
    let e = h.refused(&run("1", Some("../etc"))).await;
    assert_eq!(e.code, ErrorCode::Invalid);
    let e = h.refused(&run("1", Some("abcdefghjkmnpqrs"))).await;
    assert_eq!(e.code, ErrorCode::NotFound);
    let e = h
        .refused(&Request::from(CodeContextRestart {
            context: "abcdefghjkmnpqrs".into(),
            env: Vec::new(),
        }))
        .await;
    assert_eq!(e.code, ErrorCode::NotFound);
    let e = h
        .refused(&Request::from(CodeContextRemove {
            context: "no such".into(),
        }))
        .await;
    assert_eq!(e.code, ErrorCode::Invalid);
}

#[tokio::test]
#[ignore = "needs python3-ipykernel on the machine; the Docker tests run it in the image"]
async fn a_kernel_keeps_state_shows_results_and_errors_and_restarts() {
    let h = Harness::start().await;
    let first = events(&h, &run("x = 41\nprint('hi')\nx + 1", None)).await;
    assert_eq!(stdout(&first), "hi\n", "{first:?}");
    assert!(
        first
            .iter()
            .any(|e| matches!(e, CodeEvent::Result(m) if m["text/plain"] == "42")),
        "{first:?}"
    );
    assert!(matches!(
        first.last(),
        Some(CodeEvent::Done(CodeDone {
            execution_count: Some(1),
            truncated: false
        }))
    ));
    let second = events(&h, &run("1/0", None)).await;
    let err = second
        .iter()
        .find_map(|e| match e {
            CodeEvent::Error(e) => Some(e),
            _ => None,
        })
        .expect("an error");
    assert_eq!(err.name, "ZeroDivisionError");
    assert!(err.traceback.contains("1/0"), "{}", err.traceback);
    assert!(
        !err.traceback.contains('\u{1b}'),
        "colours: {}",
        err.traceback
    );
    let third = events(&h, &run("print(x)", Some("default"))).await;
    assert_eq!(stdout(&third), "41\n");

    // A context of its own does not see the default one's variables; a restart forgets them.
    let (_, made) = h.open(&Request::from(CodeContextCreate::default())).await;
    let id = made.unwrap()["id"].as_str().unwrap().to_string();
    let other = events(&h, &run("print('x' in dir())", Some(&id))).await;
    assert_eq!(stdout(&other), "False\n");
    let (_, list) = h.open(&Request::from(CodeContextList {})).await;
    assert_eq!(list.unwrap().as_array().unwrap().len(), 2);
    let (_, r) = h
        .open(&Request::from(CodeContextRestart {
            context: "default".into(),
            env: Vec::new(),
        }))
        .await;
    assert_eq!(r.unwrap()["executionCount"], 0);
    let after = events(&h, &run("print('x' in dir())", None)).await;
    assert_eq!(stdout(&after), "False\n");
    let (_, r) = h
        .open(&Request::from(CodeContextRemove {
            context: id.clone(),
        }))
        .await;
    r.unwrap();
    let e = h.refused(&run("1", Some(&id))).await;
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[tokio::test]
#[ignore = "needs python3-ipykernel on the machine; the Docker tests run it in the image"]
async fn a_dying_kernel_is_reported_and_the_next_run_starts_anew() {
    let h = Harness::start().await;
    events(&h, &run("x = 1", None)).await;
    let died = events(
        &h,
        &run(
            "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
            None,
        ),
    )
    .await;
    assert!(
        died.iter()
            .any(|e| matches!(e, CodeEvent::Error(e) if e.name == "KernelDied")),
        "{died:?}"
    );
    let next = events(&h, &run("print('x' in dir())", None)).await;
    assert_eq!(stdout(&next), "False\n", "{next:?}");
}

#[tokio::test]
#[ignore = "needs python3-ipykernel on the machine; the Docker tests run it in the image"]
async fn a_run_past_its_timeout_is_interrupted() {
    let h = Harness::start().await;
    let req = Request::from(CodeRun {
        code: "import time\ntime.sleep(60)".into(),
        context: None,
        timeout_ms: Some(500),
        env: Vec::new(),
    });
    let evs = events(&h, &req).await;
    assert!(
        evs.iter()
            .any(|e| matches!(e, CodeEvent::Error(e) if e.name == "TimeoutError")),
        "{evs:?}"
    );
    // The kernel lived through it.
    let next = events(&h, &run("print(1)", None)).await;
    assert_eq!(stdout(&next), "1\n", "{next:?}");
}
