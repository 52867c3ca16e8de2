//! A real harness from the npm registry, driven by agenthold: Gemini CLI (`@google/gemini-cli
//! --experimental-acp`, the version `scripts/test` pins and installs into
//! `target/harness-smoke`), the harness of a fake-driver server's session, answers `initialize`
//! and `session/new`, so the session gets its `acpSessionId`. No model is called and nothing is
//! reached: the harness runs with a dummy API key in a network namespace of its own (`unshare
//! --net`), and sees its home at `/home/agent` as in a sandbox (the fake driver runs a command in
//! a folder of its data directory but names that folder `/home/agent` in `session/new`, and
//! Gemini CLI refuses a directory that does not exist).
//!
//! Gemini CLI because it opens a session offline at once. Claude Code's harness also answers,
//! after about 20 s of failing lookups of its API; Codex's refuses `session/new` until it is
//! logged in (an ACP `authenticate`, which agenthold does not send, or `~/.codex/auth.json`).
//! The README's "Agent sessions" says what each needs.
//!
//! Without the package (a plain `cargo test` before `scripts/test` installed it), or where this
//! machine cannot give the harness namespaces of its own, the test skips with one line; with
//! `AGENTHOLD_DOCKER_TESTS=require`, as `scripts/test` runs it, it fails instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::acp::Chat;
use crate::common::TestServer;

/// The package, and its bin that speaks ACP with `--experimental-acp`.
const PACKAGE: &str = "@google/gemini-cli";
const BIN: &str = "gemini";

/// Where `scripts/test` installs it: `npm install --prefix $target/harness-smoke`.
fn install_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("harness-smoke")
}

/// `name` on the test's own PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// What the harness entry runs: node, the package's entry script, and `unshare`.
struct Smoke {
    node: PathBuf,
    entry: PathBuf,
    version: String,
    unshare: PathBuf,
}

/// The installed package and the tools to run it without a network, or why the test cannot
/// run (then it skips, or fails where the test is required).
fn find() -> Result<Smoke, String> {
    let dir = install_dir();
    let pkg_dir = dir.join("node_modules").join(PACKAGE);
    let manifest = std::fs::read_to_string(pkg_dir.join("package.json")).map_err(|e| {
        format!(
            "{PACKAGE} is not installed in {} ({e}); scripts/test installs it",
            dir.display()
        )
    })?;
    let manifest: Value =
        serde_json::from_str(&manifest).map_err(|e| format!("{PACKAGE}'s package.json: {e}"))?;
    let entry = manifest["bin"][BIN]
        .as_str()
        .ok_or_else(|| format!("{PACKAGE}'s package.json names no bin {BIN:?}"))?;
    let node = on_path("node").ok_or("no `node` on PATH")?;
    let unshare = on_path("unshare").ok_or("no `unshare` (util-linux) on PATH")?;
    let smoke = Smoke {
        node,
        entry: pkg_dir.join(entry),
        version: manifest["version"].as_str().unwrap_or("?").to_string(),
        unshare,
    };
    // The harness must have no network: namespaces of its own, which this machine must allow.
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let isolated = smoke.isolated(&["true".to_string()]);
    let status = std::process::Command::new(&isolated[0])
        .args(&isolated[1..])
        .current_dir(dir.path())
        .status()
        .map_err(|e| format!("running unshare: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`unshare --net --map-root-user --mount` fails here ({status}); the harness would \
             have a network"
        ));
    }
    Ok(smoke)
}

impl Smoke {
    /// `program` in namespaces of its own: no network, and its working directory (the agent's
    /// home) bound at `/home/agent` over an empty `/home`, where it starts.
    fn isolated(&self, program: &[String]) -> Vec<String> {
        let mut command: Vec<String> = [
            path_str(&self.unshare).as_str(),
            "--net",
            "--map-root-user",
            "--mount",
            "--",
            "/bin/sh",
            "-c",
            "h=$PWD && mount -t tmpfs tmpfs /home && mkdir /home/agent && \
             mount --bind \"$h\" /home/agent && cd /home/agent && exec \"$0\" \"$@\"",
        ]
        .map(str::to_string)
        .into();
        command.extend_from_slice(program);
        command
    }

    /// The harness entry's command: node on the package's entry, as an ACP agent, isolated.
    fn command(&self) -> Vec<String> {
        self.isolated(&[
            path_str(&self.node),
            path_str(&self.entry),
            "--experimental-acp".to_string(),
        ])
    }
}

/// The smoke test's harness, or `None` when the test should end at once: without the package a
/// plain `cargo test` skips it, saying so; `AGENTHOLD_DOCKER_TESTS=require` (scripts/test)
/// fails it.
fn smoke_or_skip() -> Option<Smoke> {
    match find() {
        Ok(s) => Some(s),
        Err(why) if std::env::var("AGENTHOLD_DOCKER_TESTS").as_deref() == Ok("require") => {
            panic!("the real-harness smoke test cannot run: {why}")
        }
        Err(why) => {
            use std::io::Write;
            // Past the test harness's capture, so that it shows in a passing run.
            let _ = writeln!(
                std::io::stderr(),
                "skipping the real-harness smoke test: {why}"
            );
            None
        }
    }
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_string()
}

/// Gemini CLI (Node on a bundle of some 70 MB) takes seconds to start on a loaded 2-core
/// machine; a harness that opens no session in this time has hung.
const START: Duration = Duration::from_secs(120);

#[tokio::test]
async fn gemini_cli_from_npm_answers_initialize_and_session_new_offline() {
    let Some(smoke) = smoke_or_skip() else {
        return;
    };
    let s = TestServer::start_with(|c| {
        let command = smoke.command();
        // A key it takes for its own: with it, session/new needs no login (and no network).
        let env = [("GEMINI_API_KEY".to_string(), "dummy-key".to_string())].into();
        c.harnesses.insert(
            "gemini".into(),
            agenthold::config::HarnessConfig {
                command,
                env,
                description: Some("Gemini CLI (the smoke test's)".into()),
            },
        );
        c.sessions.start_timeout = START;
    })
    .await;
    let id = s.running_agent("gemini-smoke").await;
    let chat = Chat::open(&s, &id, serde_json::json!({"harness": "gemini"})).await;
    assert_eq!(chat.session().await["acpSessionId"], Value::Null);

    // The first prompt starts the harness: initialize, then session/new, then the prompt,
    // which would go to the model and cannot (no network): the turn is cancelled.
    let turn = chat.prompt("Say hello.").await;
    let deadline = tokio::time::Instant::now() + START;
    let session = loop {
        let session = chat.session().await;
        if session["acpSessionId"].as_str().is_some() {
            break session;
        }
        // A turn that ended first failed to start the harness: its notices say why.
        let events = chat.events(0).await;
        let ended = events
            .iter()
            .any(|(_, e, d)| e == "turn" && d["turn"] == turn && d["state"] == "ended");
        if ended || tokio::time::Instant::now() >= deadline {
            let log = match session["processId"].as_str() {
                Some(p) => {
                    s.get_text(&format!("/api/v1/agents/{id}/processes/{p}/output"))
                        .await
                }
                None => "(no process)".to_string(),
            };
            panic!(
                "{PACKAGE} {} opened no ACP session (turn ended: {ended}); session: {session}\n\
                 transcript: {events:?}\nharness log: {log}",
                smoke.version
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let acp = session["acpSessionId"].as_str().expect("acpSessionId");
    assert!(!acp.is_empty() && acp.len() <= 1024, "{acp:?}");
    assert_eq!(
        session["restore"],
        Value::Null,
        "a fresh session: {session}"
    );
    assert!(session["processId"].as_str().is_some(), "{session}");

    // Cancel the turn: the harness ends it, or is stopped 5 s later.
    let (status, body) = s.call("POST", &chat.path("/cancel"), None).await;
    // 409: the turn already ended by itself (the harness gave up on the model at once).
    assert!(status == 202 || status == 409, "cancel: {status} {body}");
    let events = chat.turn(turn).await;
    let reason = Chat::stop_reason(&events);
    assert!(
        reason == "cancelled" || reason == "error",
        "the turn ended {reason:?}: {events:?}"
    );
    // No error of the harness's start: initialize and session/new were answered.
    for (_, e, d) in &events {
        if e == "notice" && d["kind"] == "error" {
            let text = d["text"].as_str().unwrap_or_default();
            assert!(
                !text.contains("initialize") && !text.contains("session/new"),
                "{text}"
            );
        }
    }
    let session = chat.session().await;
    assert_eq!(session["state"], "idle", "{session}");
    assert_eq!(session["acpSessionId"].as_str(), Some(acp));
}
