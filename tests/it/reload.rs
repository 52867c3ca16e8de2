//! The config read again while the server runs: the real binary on the fake driver, its file
//! changed under it, then `SIGHUP` or `POST /api/v1/admin/reload`. What can change at runtime
//! changes for the agents made after it, the ones running keep running as they were made, the
//! process is the same one throughout, keys that need a restart are named and kept, and an
//! invalid file changes nothing. `agenthold config check` checks a file alone.

use std::path::Path;
use std::process::{Command, Output};

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::common::process::{ServerConfig, ServerProcess};
use crate::common::{expect_error, wait_for, TestServer, DEADLINE};

/// The lines under `sandbox:` (the first one continues `sandbox.egress`), then the presets.
const SANDBOX: &str = "    default: {allow: [one.example]}\n  driver: fake\n  \
                       max_streams_per_agent: 128\npresets:\n  web:\n    description: first\n    \
                       memoryMb: 256\n";

/// What [`change_the_file`] changes that a reload applies.
const APPLIED: [&str; 4] = [
    "presets.web.description",
    "presets.web.memoryMb",
    "sandbox.egress.default.allow",
    "server.log_level",
];
/// What it changes that waits for a restart.
const NEEDS_RESTART: &str = "sandbox.max_streams_per_agent";

/// A server process on [`SANDBOX`] at log level `warn`, logging to `dir/server.log`.
async fn server(dir: &Path) -> (ServerConfig, ServerProcess) {
    let cfg = ServerConfig::write(dir, "127.0.0.1", SANDBOX, DEADLINE);
    edit(&cfg, "  admin_token:", "  log_level: warn\n  admin_token:");
    // The file's level rules the log, not the tests' AGENTHOLD_LOG (empty is unset).
    let p = cfg
        .start_logging_to_with_env(&dir.join("server.log"), &[("AGENTHOLD_LOG", "")])
        .await;
    (cfg, p)
}

/// Replaces the first `from` in the config file with `to`.
fn edit(cfg: &ServerConfig, from: &str, to: &str) {
    let yaml = std::fs::read_to_string(&cfg.path).expect("read the config file");
    assert!(yaml.contains(from), "{from:?} is not in {yaml}");
    std::fs::write(&cfg.path, yaml.replacen(from, to, 1)).expect("write the config file");
}

/// The preset and the egress default changed, the log level raised to `info`, and a key that
/// needs a restart.
fn change_the_file(cfg: &ServerConfig) {
    edit(cfg, "description: first", "description: second");
    edit(cfg, "memoryMb: 256", "memoryMb: 512");
    edit(cfg, "allow: [one.example]", "allow: [two.example]");
    edit(cfg, "log_level: warn", "log_level: info");
    edit(
        cfg,
        "max_streams_per_agent: 128",
        "max_streams_per_agent: 100",
    );
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}

/// A running agent from the preset `web`, as the API shows it.
async fn web_agent(cfg: &ServerConfig, name: &str) -> Value {
    let id = cfg
        .running_agent(json!({"name": name, "preset": "web"}))
        .await;
    cfg.agent(&id).await
}

async fn web_preset(cfg: &ServerConfig) -> Value {
    let presets = cfg.get_json("/api/v1/presets").await;
    assert_eq!(presets[0]["name"], "web", "{presets}");
    presets[0].clone()
}

/// The agent made before the reload runs on as it was made, and answers.
async fn runs_as_made(cfg: &ServerConfig, before: &Value) {
    let id = before["id"].as_str().expect("id");
    let now = cfg.agent(id).await;
    assert_eq!(now["state"], "running", "{now}");
    assert_eq!(now["memoryMb"], 256, "{now}");
    assert_eq!(now["egress"]["allow"], json!(["one.example"]), "{now}");
    assert_eq!(cfg.exec_ok(id, &["echo", "alive"]).await, "alive\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_changes_presets_and_the_egress_default_for_new_agents_only() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, mut p) = server(dir.path()).await;
    let pid = p.pid();
    let before = web_agent(&cfg, "before").await;
    assert_eq!(before["memoryMb"], 256, "{before}");
    assert_eq!(
        before["egress"]["allow"],
        json!(["one.example"]),
        "{before}"
    );
    assert!(
        !log(dir.path()).contains("agenthold is serving"),
        "an info line was logged at level warn:\n{}",
        log(dir.path())
    );

    change_the_file(&cfg);
    p.signal(Signal::SIGHUP);
    wait_for("the preset changed by SIGHUP", || async {
        web_preset(&cfg).await["memoryMb"] == 512
    })
    .await;
    assert_eq!(web_preset(&cfg).await["description"], "second");
    let after = web_agent(&cfg, "after").await;
    assert_eq!(after["memoryMb"], 512, "{after}");
    assert_eq!(after["egress"]["allow"], json!(["two.example"]), "{after}");
    runs_as_made(&cfg, &before).await;

    // The log says what is in force (at info, the new level) and what waits for a restart.
    wait_for("the reload in the log", || async {
        log(dir.path()).contains(NEEDS_RESTART)
    })
    .await;
    let text = log(dir.path());
    let applied = text
        .lines()
        .find(|l| l.contains("in force now"))
        .unwrap_or_else(|| panic!("no line says what is in force:\n{text}"));
    for key in APPLIED {
        assert!(applied.contains(key), "{key} is not in {applied}");
    }
    let restart = text
        .lines()
        .find(|l| l.contains(NEEDS_RESTART))
        .expect("the restart line");
    assert!(
        restart.contains("take effect only at a restart"),
        "{restart}"
    );
    assert!(!applied.contains(NEEDS_RESTART), "{applied}");

    // An invalid file changes nothing, and the log names the key.
    edit(&cfg, "memoryMb: 512", "memoryMb: 99999999");
    p.signal(Signal::SIGHUP);
    wait_for("the refusal in the log", || async {
        log(dir.path())
            .lines()
            .any(|l| l.contains("config reload refused") && l.contains("presets.web.memoryMb"))
    })
    .await;
    assert_eq!(web_preset(&cfg).await["memoryMb"], 512);
    assert_eq!(web_agent(&cfg, "again").await["memoryMb"], 512);
    runs_as_made(&cfg, &before).await;

    // One process throughout, with every agent.
    assert_eq!(p.pid(), pid);
    assert!(p.is_running(), "the server exited");
    let agents = cfg.get_json("/api/v1/agents").await;
    assert_eq!(agents.as_array().map(Vec::len), Some(3), "{agents}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reload_route_answers_what_changed_and_what_needs_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, mut p) = server(dir.path()).await;
    let pid = p.pid();
    let before = web_agent(&cfg, "before").await;
    let reload = || cfg.call("POST", "/api/v1/admin/reload", None);

    assert_eq!(
        reload().await,
        (200, json!({"applied": [], "needsRestart": []}))
    );
    change_the_file(&cfg);
    assert_eq!(
        reload().await,
        (
            200,
            json!({"applied": APPLIED, "needsRestart": [NEEDS_RESTART]})
        )
    );
    // Read again: the rest is in force, the restart key still waits.
    assert_eq!(
        reload().await,
        (200, json!({"applied": [], "needsRestart": [NEEDS_RESTART]}))
    );
    let after = web_agent(&cfg, "after").await;
    assert_eq!(after["memoryMb"], 512, "{after}");
    assert_eq!(after["egress"]["allow"], json!(["two.example"]), "{after}");
    runs_as_made(&cfg, &before).await;

    // A value that cannot work, and a key that does not exist: 400 naming it, nothing changed.
    edit(&cfg, "memoryMb: 512", "memoryMb: 99999999");
    let r = cfg.post("/api/v1/admin/reload").send().await.unwrap();
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("presets.web.memoryMb"), "{msg}");
    edit(
        &cfg,
        "memoryMb: 99999999",
        "memoryMb: 1024\n    colour: red",
    );
    let r = cfg.post("/api/v1/admin/reload").send().await.unwrap();
    let msg = expect_error(r, 400, "invalid").await;
    assert!(
        msg.contains("presets.web") && msg.contains("colour"),
        "{msg}"
    );
    assert_eq!(web_preset(&cfg).await["memoryMb"], 512);

    // Only for the admin.
    let r = reqwest::Client::new()
        .post(cfg.url("/api/v1/admin/reload"))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "unauthorized").await;

    assert_eq!(p.pid(), pid);
    assert!(p.is_running(), "the server exited");
    runs_as_made(&cfg, &before).await;
}

#[tokio::test]
async fn a_server_without_a_config_file_has_nothing_to_reload() {
    let s = TestServer::start().await;
    let r = s.post("/api/v1/admin/reload").send().await.unwrap();
    let msg = expect_error(r, 409, "conflict").await;
    assert!(msg.contains("without a config file"), "{msg}");
}

/// `agenthold config check FILE`, in an environment that sets nothing of the config's.
fn config_check(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["config", "check"])
        .arg(file)
        .env_remove("AGENTHOLD_LOG")
        .env_remove("AGENTHOLD_ADMIN_TOKEN")
        .output()
        .expect("run agenthold config check")
}

#[test]
fn config_check_passes_a_good_file_and_names_the_key_of_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, "sandbox:\n  default_cpus: 1\n").unwrap();
    let out = config_check(&file);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}: ok\n", file.display())
    );

    for (yaml, key) in [
        ("sandbox:\n  default_cpus: 99\n", "sandbox.default_cpus"),
        ("sandbox:\n  docker:\n    colour: red\n", "colour"),
        ("server:\n  log_level: agenthold=loud\n", "server.log_level"),
    ] {
        std::fs::write(&file, yaml).unwrap();
        let out = config_check(&file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{yaml}: {stderr}");
        assert!(stderr.contains(key), "{yaml}: {stderr}");
        assert!(out.stdout.is_empty(), "{yaml}");
    }

    let out = config_check(&dir.path().join("missing.yaml"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.yaml"));
}
