//! `agenthold sessions|chat|approvals|approve` against a live server (fake driver) whose one
//! harness is the model-free ACP test agent: each prompt tells it what to do (plain text is
//! echoed, `stream N`, `tool` asks permission with options b7 reject_always, a2 allow_once,
//! c9 reject_once, d4 allow_always, `wait` waits for a cancel; see acp-test-agent/README.md).

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdout};

use crate::cli::{cli, run};
use crate::common::{acp, read_output_until, TestServer, DEADLINE};

/// A server whose one harness, `test`, is the test agent, and its default.
async fn server() -> TestServer {
    let bin = tokio::task::spawn_blocking(acp::test_agent)
        .await
        .expect("building the test agent");
    TestServer::start_with(|c| {
        let harness = acp::harness(&bin.display().to_string(), &[]);
        c.harnesses.insert("test".into(), harness);
        c.sandbox.default_harness = Some("test".into());
    })
    .await
}

/// The agent's sessions, as the CLI's `--json` lists them.
async fn sessions(s: &TestServer, agent: &str) -> Vec<Value> {
    let (code, out, err) = run(s, &["--json", "sessions", agent]).await;
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

async fn pending_approvals(s: &TestServer) -> Vec<Value> {
    let (code, out, err) = run(s, &["--json", "approvals"]).await;
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A `chat` running on its own, its stdout and stderr read as the test goes.
struct Running {
    child: Child,
    stdout: ChildStdout,
    stderr: ChildStderr,
    out: String,
    err: String,
}

impl Running {
    fn spawn(s: &TestServer, args: &[&str], stdin: Stdio) -> Running {
        let mut child = cli(s)
            .args(args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the CLI");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        Running {
            child,
            stdout,
            stderr,
            out: String::new(),
            err: String::new(),
        }
    }

    async fn stderr_until(&mut self, needle: &str) {
        read_output_until(&mut self.stderr, &mut self.err, needle, DEADLINE).await;
    }

    async fn stdout_until(&mut self, needle: &str) {
        read_output_until(&mut self.stdout, &mut self.out, needle, DEADLINE).await;
    }

    async fn write(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().expect("a piped stdin");
        stdin.write_all(text.as_bytes()).await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// Waits for the exit: (code, all of stdout, all of stderr).
    async fn finish(mut self) -> (i32, String, String) {
        async fn rest(from: &mut (impl AsyncRead + Unpin), into: &mut String) {
            let mut buf = Vec::new();
            from.read_to_end(&mut buf).await.expect("read the output");
            into.push_str(&String::from_utf8_lossy(&buf));
        }
        drop(self.child.stdin.take());
        let ended = tokio::time::timeout(DEADLINE, async {
            rest(&mut self.stdout, &mut self.out).await;
            rest(&mut self.stderr, &mut self.err).await;
            self.child.wait().await
        })
        .await;
        let status = match ended {
            Ok(status) => status.expect("wait for the CLI"),
            Err(_) => panic!(
                "the chat did not end:\nstdout: {}\nstderr: {}",
                self.out, self.err
            ),
        };
        (status.code().unwrap_or(-1), self.out, self.err)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_turns_and_sessions_from_the_command_line() {
    let s = server().await;
    let agent_id = s.running_agent("chatty").await;

    // No session yet: chat starts one and says so; the reply is all of stdout.
    let (code, out, err) = run(&s, &["chat", "chatty", "hello"]).await;
    assert_eq!((code, out.as_str()), (0, "hello\n"), "{err}");
    assert!(
        err.contains("chatty had no session: started a new one"),
        "{err}"
    );
    let list = sessions(&s, "chatty").await;
    assert_eq!(list.len(), 1, "{list:?}");
    let first = list[0]["id"].as_str().expect("id").to_string();
    assert_eq!(
        (&list[0]["harness"], &list[0]["state"], &list[0]["turns"]),
        (&Value::from("test"), &Value::from("idle"), &Value::from(1))
    );
    let (code, table, _) = run(&s, &["sessions", "chatty"]).await;
    assert_eq!(code, 0);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains(&first) && table.contains("test") && table.contains("idle"),
        "{table}"
    );

    // --new prints the id; the newest session is the one chat talks in from then on.
    let (code, out, err) = run(
        &s,
        &["sessions", "chatty", "--new", "--title", "second one"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let second = out.trim().to_string();
    assert!(!second.is_empty() && second != first, "{out}");
    let (code, table, _) = run(&s, &["sessions", &agent_id]).await;
    assert_eq!(code, 0);
    assert!(
        table.contains(&second) && table.contains("second one"),
        "{table}"
    );
    let (code, out, err) = run(&s, &["chat", "chatty", "stream", "3"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "chunk 1 of 3\nchunk 2 of 3\nchunk 3 of 3\n");
    assert!(!err.contains("started a new one"), "{err}");
    let turns = |list: &[Value], id: &str| {
        list.iter()
            .find(|s| s["id"] == id)
            .map(|s| s["turns"].clone())
    };
    let list = sessions(&s, "chatty").await;
    assert_eq!(turns(&list, &first), Some(1.into()));
    assert_eq!(turns(&list, &second), Some(1.into()));

    // --session picks one; thoughts and plans go to stderr, prefixed off a terminal.
    let (code, out, err) = run(
        &s,
        &["chat", &agent_id, "--session", &first, "think", "it over"],
    )
    .await;
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(err.contains("[thought] it over"), "{err}");
    let (code, _, err) = run(&s, &["chat", "chatty", "--session", &first, "plan"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("[plan]\n  ["), "{err}");
    assert_eq!(turns(&sessions(&s, "chatty").await, &first), Some(3.into()));

    // Stop reasons other than end_turn are exit codes of their own.
    let (code, _, err) = run(&s, &["chat", "chatty", "stop", "max_tokens"]).await;
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("[turn] ended: max_tokens"), "{err}");
    let (code, _, err) = run(&s, &["chat", "chatty", "fail", "on", "purpose"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("[turn] ended: error"), "{err}");

    let (code, _, err) = run(&s, &["chat", "chatty", "--session", "nosuch", "hi"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no session \"nosuch\""), "{err}");

    let (code, _, err) = run(&s, &["sessions", "chatty", "--delete", &second]).await;
    assert_eq!(code, 0, "{err}");
    let list = sessions(&s, "chatty").await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], first.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_approve_refuses_permissions_at_once() {
    let s = server().await;
    s.running_agent("careful").await;
    let (code, out, err) = run(&s, &["chat", "--no-approve", "careful", "tool"]).await;
    // The tool call failed, and the turn still ended normally.
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(err.contains("[tool] Run the test tool: pending"), "{err}");
    assert!(
        err.contains("refusing to Run the test tool (--no-approve): c9 (Reject once)"),
        "{err}"
    );
    assert!(err.contains("[tool] Run the test tool: failed"), "{err}");
    assert!(pending_approvals(&s).await.is_empty());
    let (code, table, _) = run(&s, &["approvals", "--all", "--agent", "careful"]).await;
    assert_eq!(code, 0);
    assert!(
        table.contains("careful") && table.contains("selected c9 by admin"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_lists_the_question_a_chat_waits_on_and_approve_answers_it() {
    let s = server().await;
    s.running_agent("asker").await;
    // Its stdin is closed, so it cannot ask: it says how to answer, and waits.
    let mut chat = Running::spawn(&s, &["chat", "asker", "tool"], Stdio::null());
    chat.stderr_until("agenthold approve ").await;
    let pending = pending_approvals(&s).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let id = pending[0]["id"].as_str().expect("id").to_string();
    assert!(
        chat.err.contains(&format!("agenthold approve {id} OPTION")),
        "{}",
        chat.err
    );
    let (code, table, _) = run(&s, &["approvals"]).await;
    assert_eq!(code, 0);
    assert!(
        table.contains(&id)
            && table.contains("asker")
            && table.contains("Run the test tool")
            && table.contains("a2=Allow once"),
        "{table}"
    );
    let (code, table, _) = run(&s, &["approvals", "--agent", "asker"]).await;
    assert_eq!(code, 0);
    assert!(table.contains(&id), "{table}");

    let (code, out, err) = run(&s, &["approve", &id, "a2"]).await;
    assert_eq!(
        (code, out.as_str()),
        (0, format!("{id}: a2 (Allow once)\n").as_str()),
        "{err}"
    );
    let (code, out, err) = chat.finish().await;
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(err.contains("answered a2 (Allow once), by admin"), "{err}");
    assert!(err.contains("[tool] Run the test tool: completed"), "{err}");
    assert!(pending_approvals(&s).await.is_empty());

    // The first answer won.
    let (code, _, err) = run(&s, &["approve", &id, "c9"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("conflict"), "{err}");

    // A name serves as well as an id, in any case.
    let mut chat = Running::spawn(&s, &["chat", "asker", "tool"], Stdio::null());
    chat.stderr_until("agenthold approve ").await;
    let pending = pending_approvals(&s).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let id = pending[0]["id"].as_str().expect("id").to_string();
    let (code, _, err) = run(&s, &["approve", &id, "nope"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("none of the options"), "{err}");
    let (code, out, err) = run(&s, &["approve", &id, "REJECT ONCE"]).await;
    assert_eq!(
        (code, out.as_str()),
        (0, format!("{id}: c9 (Reject once)\n").as_str()),
        "{err}"
    );
    let (code, _, err) = chat.finish().await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("[tool] Run the test tool: failed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_asks_on_stdin_and_takes_an_options_name() {
    let s = server().await;
    s.running_agent("tty").await;
    let mut chat = Running::spawn(&s, &["chat", "tty", "tool"], Stdio::piped());
    chat.stderr_until("answer with an option's id or name: ")
        .await;
    for option in [
        "b7  Reject always (reject_always)",
        "a2  Allow once (allow_once)",
    ] {
        assert!(chat.err.contains(option), "{}", chat.err);
    }
    chat.write("maybe\n").await;
    chat.stderr_until("\"maybe\" is none of the options").await;
    chat.write("allow always\n").await;
    let (code, _, err) = chat.finish().await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("answered d4 (Allow always), by admin"),
        "{err}"
    );
    assert!(err.contains("[tool] Run the test tool: completed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_turn() {
    let s = server().await;
    s.running_agent("patient").await;
    let mut chat = Running::spawn(&s, &["chat", "patient", "wait"], Stdio::null());
    chat.stdout_until("waiting for session/cancel").await;
    let pid = nix::unistd::Pid::from_raw(chat.child.id().expect("a pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let (code, _, err) = chat.finish().await;
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("[turn] cancelling"), "{err}");
    assert!(err.contains("[turn] ended: cancelled"), "{err}");
    let list = sessions(&s, "patient").await;
    assert_eq!(list[0]["state"], "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_prompt_each_line_of_stdin_is_one() {
    let s = server().await;
    s.running_agent("lines").await;
    let mut chat = Running::spawn(&s, &["chat", "lines"], Stdio::piped());
    // A permission's answer is the line after the prompt that asked for it.
    chat.write("hello\n\ntool\na2\nstream 2\n").await;
    let (code, out, err) = chat.finish().await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello\nchunk 1 of 2\nchunk 2 of 2\n", "{err}");
    assert!(err.contains("[tool] Run the test tool: completed"), "{err}");
    let list = sessions(&s, "lines").await;
    assert_eq!(list[0]["turns"], 3);
}
