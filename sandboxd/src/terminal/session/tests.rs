use super::*;
use crate::sandbox::SandboxOptions;
use crate::terminal::MAX_VIEWERS;

const DEADLINE: Duration = Duration::from_secs(30);

fn sandbox(dir: &tempfile::TempDir) -> Sandbox {
    Sandbox::new(SandboxOptions::fake(dir.path().to_path_buf()))
}

fn config(command: &str, detach_after: Duration, buffer: usize) -> SessionConfig {
    SessionConfig {
        cols: 80,
        rows: 24,
        term: "xterm-256color".into(),
        command: Some(command.into()),
        env: Vec::new(),
        detach_after,
        buffer,
    }
}

/// Reads a viewer to its end: the output (replays and live bytes) and the exit code.
/// `slow` makes it yield between reads, so the reader gets far ahead of it.
async fn drain(v: &mut Viewer, slow: bool) -> (Vec<u8>, i32) {
    let mut out = Vec::new();
    let mut changed = v.subscribe();
    let run = async {
        loop {
            changed.borrow_and_update();
            match v.next_step() {
                Step::Data(d) => out.extend_from_slice(&d),
                Step::Redraw(..) => panic!("a viewer that keeps up never needs a redraw"),
                Step::Resize(..) => {}
                Step::Exit(code) => return code,
                Step::Wait => {
                    let _ = changed.changed().await;
                }
            }
            if slow {
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
            }
        }
    };
    let code = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("the session did not end in time");
    (out, code)
}

/// Reads a viewer until its output holds `needle`.
async fn read_until(v: &mut Viewer, needle: &str) {
    let mut out = Vec::new();
    let mut changed = v.subscribe();
    let run = async {
        while !String::from_utf8_lossy(&out).contains(needle) {
            changed.borrow_and_update();
            match v.next_step() {
                Step::Data(d) => out.extend_from_slice(&d),
                Step::Wait => {
                    let _ = changed.changed().await;
                }
                Step::Redraw(..) | Step::Resize(..) => {}
                Step::Exit(code) => panic!("the session ended ({code}) before {needle:?}"),
            }
        }
    };
    tokio::time::timeout(DEADLINE, run)
        .await
        .unwrap_or_else(|_| panic!("no {needle:?} within {DEADLINE:?}"));
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not true within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_slow_viewer_loses_nothing_through_a_small_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(&dir);
    // About 110 KB of output through a 4 KiB ring: flow control must hold the shell back.
    let mut v = Session::start(&sb, config("seq 1 20000", DEADLINE, 4096)).unwrap();
    let (out, code) = drain(&mut v, true).await;
    assert_eq!(code, 0);
    let text = String::from_utf8(out).unwrap().replace("\r\n", "\n");
    let want: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert!(
        text == want,
        "got {} bytes, want {}",
        text.len(),
        want.len()
    );
    sb.shutdown().await;
}

#[tokio::test]
async fn a_session_without_viewers_ends_after_its_detach_time() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(&dir);
    // As if sandboxd ran under `nohup`: its shells must still take the hang-up. (For the
    // whole test process: every shell and command of these tests is started by sandboxd's
    // code, which gives them the default dispositions back.)
    // SAFETY: no handler is installed, a disposition is set to "ignore".
    unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGHUP,
            nix::sys::signal::SigHandler::SigIgn,
        )
    }
    .expect("ignore SIGHUP");
    let command = "echo ready; exec sleep 600";
    let mut v = Session::start(&sb, config(command, Duration::from_millis(200), 4096)).unwrap();
    let id = v.opened.session.clone();
    let session = v.session.clone();
    assert!(sb.terminals().get(&id).is_some());
    // The hang-up then finds `sleep` running, not a shell still setting up its own handlers.
    read_until(&mut v, "ready\r\n").await;
    drop(v);
    wait_until("the detached session ends", || {
        sb.terminals().get(&id).is_none()
    })
    .await;
    wait_until("its shell was ended", || session.info().exit_code.is_some()).await;
    // SIGHUP ended it: 128 + 1.
    assert_eq!(session.info().exit_code, Some(129));
    let again = session.attach(None, None, false);
    assert!(matches!(again, Err(e) if e.code == ErrorCode::NotFound));
    sb.shutdown().await;
}

#[tokio::test]
async fn a_viewer_that_was_away_still_gets_the_last_bytes_and_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(&dir);
    let v = Session::start(&sb, config("printf last-words; exit 5", DEADLINE, 4096)).unwrap();
    let id = v.opened.session.clone();
    let session = v.session.clone();
    drop(v);
    wait_until("the shell exits", || session.info().exit_code.is_some()).await;
    // Still listed and attachable: nobody has seen the end yet.
    assert_eq!(sb.terminals().list().len(), 1);
    let mut late = session.attach(Some(0), None, false).unwrap();
    let (out, code) = drain(&mut late, false).await;
    assert_eq!(String::from_utf8_lossy(&out), "last-words");
    assert_eq!(code, 5);
    drop(late);
    wait_until("seen, the session goes", || {
        sb.terminals().get(&id).is_none()
    })
    .await;
    sb.shutdown().await;
}

#[tokio::test]
async fn viewers_are_limited_and_offsets_checked() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(&dir);
    let first = Session::start(&sb, config("printf hello; sleep 600", DEADLINE, 4096)).unwrap();
    let s = first.session.clone();
    wait_until("output arrives", || s.info().offset == 5).await;
    let future = s.attach(Some(6), None, false);
    assert!(matches!(future, Err(e) if e.code == ErrorCode::Invalid));
    let mut more = Vec::new();
    for _ in 1..MAX_VIEWERS {
        more.push(s.attach(Some(5), None, false).unwrap());
    }
    let full = s.attach(None, None, false);
    assert!(matches!(full, Err(e) if e.code == ErrorCode::Busy));
    drop(more);
    // A place freed is a place taken; without an offset, a redraw comes first.
    let v = s.attach(None, None, false).unwrap();
    let (at, redraw) = v.first_redraw.clone().unwrap();
    assert_eq!(at, 5);
    assert!(String::from_utf8_lossy(&redraw).contains("hello"));
    assert!(sb.terminals().kill(s.id()));
    wait_until("killed", || s.info().exit_code.is_some()).await;
    sb.shutdown().await;
}
