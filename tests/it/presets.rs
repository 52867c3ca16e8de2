//! Presets, an agent's env and the setup script, against a real server with the fake driver.

use std::collections::BTreeMap;

use crate::common::{expect_error, read_until, TestServer};
use agenthold::agents::preset::Preset;
use agenthold::config::Config;
use serde_json::{json, Value};

fn presets(c: &mut Config) {
    c.presets.insert(
        "dev".into(),
        Preset {
            description: Some("with tools".into()),
            image: Some("example/dev:1".into()),
            cpus: Some(1.5),
            memory_mb: Some(512),
            idle_minutes: Some(30),
            env: BTreeMap::from([
                ("FROM_PRESET".into(), "p".into()),
                ("SHARED".into(), "preset".into()),
            ]),
            ..Default::default()
        },
    );
    c.presets.insert("plain".into(), Preset::default());
    c.sandbox.default_preset = Some("dev".into());
}

#[tokio::test]
async fn the_presets_list_matches_the_config() {
    let s = TestServer::start_with(presets).await;
    let list = s.get_json("/api/v1/presets").await;
    assert_eq!(
        list,
        json!([
            {"name": "dev", "description": "with tools", "image": "example/dev:1", "cpus": 1.5,
             "memoryMb": 512, "diskMb": 10240, "idleMinutes": 30, "deepSleepMinutes": 60,
             "env": {"FROM_PRESET": "p", "SHARED": "preset"}, "secrets": [], "egress": null, "setup": null,
             "setupOnRebuild": false, "runtime": null, "harness": null, "ttlMinutes": null,
             "labels": {}, "allowRoot": false, "approvals": {"commands": "never"}, "access": "private", "default": true},
            {"name": "plain", "description": null, "image": "debian:bookworm-slim", "cpus": 2.0,
             "memoryMb": 4096, "diskMb": 10240, "idleMinutes": 15, "deepSleepMinutes": 60, "env": {},
             "secrets": [], "egress": null,
             "setup": null, "setupOnRebuild": false, "runtime": null, "harness": null, "ttlMinutes": null,
             "labels": {}, "allowRoot": false, "approvals": {"commands": "never"}, "access": "private", "default": false},
        ])
    );
    s.stop().await;
}

#[tokio::test]
async fn a_create_takes_the_preset_and_its_own_fields_win() {
    let s = TestServer::start_with(presets).await;
    // No preset named: the default one.
    let a = s.created_agent(json!({"name": "a"})).await;
    assert_eq!(a["preset"], "dev");
    assert_eq!(a["image"], "example/dev:1");
    assert_eq!(
        (a["cpus"].as_f64(), a["memoryMb"].as_u64()),
        (Some(1.5), Some(512))
    );
    assert_eq!(a["idleMinutes"], 30);
    assert_eq!(a["env"], json!({"FROM_PRESET": "p", "SHARED": "preset"}));
    assert_eq!(a["setup"], Value::Null);
    // Fields of the request override the preset's; env is merged, the request winning.
    let b = s
        .created_agent(
            json!({"name": "b", "preset": "dev", "cpus": 1, "image": "example/other:2",
               "env": {"SHARED": "request", "OWN": "o"}}),
        )
        .await;
    assert_eq!(
        (b["cpus"].as_f64(), b["image"].as_str()),
        (Some(1.0), Some("example/other:2"))
    );
    assert_eq!(b["memoryMb"], 512);
    assert_eq!(
        b["env"],
        json!({"FROM_PRESET": "p", "SHARED": "request", "OWN": "o"})
    );
    let c = s
        .created_agent(json!({"name": "c", "preset": "plain"}))
        .await;
    assert_eq!(
        (c["preset"].as_str(), c["image"].as_str()),
        (Some("plain"), Some("debian:bookworm-slim"))
    );
    assert_eq!(c["env"], json!({}));
    s.stop().await;
}

#[tokio::test]
async fn without_presets_an_agent_has_none() {
    let s = TestServer::start().await;
    let a = s.created_agent(json!({"name": "a"})).await;
    assert_eq!(
        (&a["preset"], &a["env"], &a["setup"]),
        (&Value::Null, &json!({}), &Value::Null)
    );
    let r = s.get("/api/v1/presets").send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap(), json!([]));
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_preset_or_a_bad_env_is_refused_by_name() {
    let s = TestServer::start_with(presets).await;
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "a", "preset": "gpu"}),
        )
        .await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(
        msg.contains("gpu") && msg.contains("dev") && msg.contains("plain"),
        "{msg}"
    );
    for (env, why) in [
        (json!({"HTTP_PROXY": "x"}), "reserved"),
        (json!({"AGENTHOLD_TOKEN": "x"}), "reserved"),
        (json!({"1X": "x"}), "not a variable name"),
        (json!({"X": "a".repeat(4097)}), "4096"),
        (json!({"X": "a\u{0}b"}), "NUL"),
    ] {
        let r = s
            .send("POST", "/api/v1/agents", &json!({"name": "b", "env": env}))
            .await;
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["field"], "env", "{body}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{msg}");
    }
    let many: serde_json::Map<String, Value> =
        (0..129).map(|i| (format!("V{i}"), json!(""))).collect();
    let r = s
        .send("POST", "/api/v1/agents", &json!({"name": "b", "env": many}))
        .await;
    expect_error(r, 400, "invalid").await;
    s.stop().await;
}

async fn exec_out(s: &TestServer, id: &str, script: &str) -> String {
    let r = s.exec(id, &["sh", "-c", script]).await;
    assert_eq!(r["exitCode"], 0, "{r}");
    r["stdout"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn env_reaches_exec_processes_and_terminals_and_a_patch_applies_to_new_ones() {
    let s = TestServer::start_with(presets).await;
    let id = s
        .running_agent(json!({"name": "e", "env": {"OWN": "one"}}))
        .await;
    assert_eq!(
        exec_out(&s, &id, "echo $FROM_PRESET-$OWN-$SHARED").await,
        "p-one-preset\n"
    );
    // A request's own variable wins over the agent's.
    let r = s
        .send(
            "POST",
            &format!("/api/v1/agents/{id}/exec"),
            &json!({"command": ["sh", "-c", "echo $OWN"], "env": {"OWN": "mine"}}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["stdout"], "mine\n");
    // The egress proxy's variables are still the server's.
    let proxy = exec_out(&s, &id, "echo ${HTTP_PROXY:-unset}").await;

    let r = s.patch_agent(&id, json!({"env": {"OWN": "two"}})).await;
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["env"], json!({"OWN": "two"}));
    assert_eq!(patched["needsRebuild"], false);
    assert_eq!(
        exec_out(&s, &id, "echo ${FROM_PRESET:-gone}-$OWN").await,
        "gone-two\n"
    );
    assert_eq!(exec_out(&s, &id, "echo ${HTTP_PROXY:-unset}").await, proxy);

    let r = s
        .send(
            "POST",
            &format!("/api/v1/agents/{id}/processes"),
            &json!({"command": ["sh", "-c", "echo proc-$OWN"], "tag": "envtest"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let out = s
        .get_text(&format!(
            "/api/v1/agents/{id}/processes/envtest/output?follow=true"
        ))
        .await;
    assert!(out.contains("proc-two"), "{out}");

    let mut ws = s.terminal(&id, 80, 24).await;
    crate::common::send_keys(&mut ws, "echo term-$OWN-end\r").await;
    read_until(&mut ws, "term-two-end").await;

    let r = s.patch_agent(&id, json!({"env": {"NO_PROXY": "x"}})).await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("NO_PROXY"), "{msg}");
    s.stop().await;
}

fn with_setup(c: &mut Config) {
    presets(c);
    c.presets.insert(
        "scripted".into(),
        Preset {
            env: BTreeMap::from([("GREETING".into(), "hello".into())]),
            setup: Some("echo \"$GREETING from $(pwd)\" >> setup-ran; echo setting up".into()),
            ..Default::default()
        },
    );
    c.presets.insert(
        "broken".into(),
        Preset {
            setup: Some("echo oops >&2; exit 3".into()),
            ..Default::default()
        },
    );
}

/// What the setup script has written so far: the `setup` process's output.
async fn setup_log(s: &TestServer, id: &str) -> String {
    s.get_text(&format!("/api/v1/agents/{id}/processes/setup/output"))
        .await
}

/// Waits until the agent's `setup` is in `state`, returning it.
async fn wait_setup(s: &TestServer, id: &str, state: &str) -> Value {
    let mut last = Value::Null;
    let deadline = std::time::Instant::now() + crate::common::DEADLINE;
    while std::time::Instant::now() < deadline {
        last = s.agent(id).await["setup"].clone();
        if last["state"] == state {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("agent {id}'s setup did not become {state}: {last}");
}

#[tokio::test]
async fn setup_runs_once_at_the_first_start_and_again_on_request() {
    let s = TestServer::start_with(with_setup).await;
    let id = s
        .create_agent(json!({"name": "s", "preset": "scripted"}))
        .await;
    let done = wait_setup(&s, &id, "done").await;
    assert_eq!(done["exitCode"], 0);
    let pid = done["processId"].as_str().unwrap().to_string();
    assert_eq!(s.state(&id).await, "running");
    let out = exec_out(&s, &id, "cat setup-ran").await;
    assert!(out.starts_with("hello from "), "env and cwd: {out}");
    assert_eq!(out.lines().count(), 1);
    // Its log is the `setup` process's output.
    let log = setup_log(&s, &id).await;
    assert!(log.contains("setting up"), "{log}");

    // A stop and start does not run it again.
    s.stop_sleeping(&id).await;
    s.start_running(&id).await;
    assert_eq!(s.agent(&id).await["setup"]["processId"], pid.as_str());

    // On request it runs again; had the start run it too, there would be three lines.
    s.act(&id, "setup").await;
    crate::common::wait_for("the rerun is recorded", || async {
        let setup = s.agent(&id).await["setup"].clone();
        setup["state"] == "done" && setup["processId"] != pid.as_str()
    })
    .await;
    assert_eq!(exec_out(&s, &id, "wc -l < setup-ran").await.trim(), "2");
    s.stop().await;
}

#[tokio::test]
async fn a_failed_setup_is_recorded_and_the_agent_stays_usable() {
    let s = TestServer::start_with(with_setup).await;
    let id = s
        .create_agent(json!({"name": "f", "preset": "broken"}))
        .await;
    let failed = wait_setup(&s, &id, "failed").await;
    assert_eq!(failed["exitCode"], 3);
    assert_eq!(s.state(&id).await, "running");
    assert_eq!(exec_out(&s, &id, "echo usable").await, "usable\n");
    let log = setup_log(&s, &id).await;
    assert!(log.contains("oops"), "{log}");

    // An agent without a setup script cannot rerun one.
    let plain = s
        .created_agent(json!({"name": "p", "preset": "plain"}))
        .await;
    let r = s
        .post(&format!(
            "/api/v1/agents/{}/setup",
            plain["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    let msg = expect_error(r, 409, "conflict").await;
    assert!(msg.contains("no setup script"), "{msg}");
    let r = s
        .post("/api/v1/agents/nosuchagent0/setup")
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "not_found").await;
    s.stop().await;
}

#[tokio::test]
async fn setup_on_rebuild_runs_the_script_again_after_a_rebuild() {
    let s = TestServer::start_with(|c| {
        c.presets.insert(
            "again".into(),
            Preset {
                setup: Some("echo ran >> setup-ran".into()),
                setup_on_rebuild: true,
                ..Default::default()
            },
        );
    })
    .await;
    let id = s
        .create_agent(json!({"name": "r", "preset": "again"}))
        .await;
    let first = wait_setup(&s, &id, "done").await;
    s.act(&id, "rebuild").await;
    s.wait_state(&id, "running").await;
    crate::common::wait_for("setup ran again after the rebuild", || async {
        let setup = s.agent(&id).await["setup"].clone();
        setup["state"] == "done" && setup["processId"] != first["processId"]
    })
    .await;
    assert_eq!(exec_out(&s, &id, "wc -l < setup-ran").await.trim(), "2");
    s.stop().await;
}

#[tokio::test]
async fn setup_requests_at_the_same_moment_start_one_run() {
    // The script holds until the test lets it end, so every request below meets a run that
    // is still going, however slowly they arrive.
    let s = TestServer::start_with(|c| {
        with_setup(c);
        c.presets.insert(
            "held".into(),
            Preset {
                setup: Some(
                    "echo run >> setup-ran; until [ -e release ]; do sleep 0.05; done; rm release"
                        .into(),
                ),
                ..Default::default()
            },
        );
    })
    .await;
    let id = s
        .create_agent(json!({"name": "racy", "preset": "held"}))
        .await;
    wait_setup(&s, &id, "running").await;
    exec_out(&s, &id, "touch release").await;
    let first = wait_setup(&s, &id, "done").await;
    let first_pid = first["processId"].as_str().unwrap().to_string();

    // Eight reruns at once: each starts the run or finds it started (202), or is refused as
    // running (409); one run comes of them.
    let path = format!("/api/v1/agents/{id}/setup");
    let answers = futures::future::join_all((0..8).map(|_| s.post(&path).send())).await;
    for r in answers {
        let status = r.unwrap().status().as_u16();
        assert!(status == 202 || status == 409, "answered {status}");
    }
    let second = wait_setup(&s, &id, "running").await;
    assert_ne!(second["processId"], first_pid.as_str());
    exec_out(&s, &id, "touch release").await;
    wait_setup(&s, &id, "done").await;
    assert_eq!(exec_out(&s, &id, "wc -l < setup-ran").await.trim(), "2");
    s.stop().await;
}

/// A setup script still running when the server restarts is never left `running` for good: the
/// new server follows it to its end where the sandbox kept it, or records it as cut short (with
/// how to run it again) where the sandbox lost it; a rerun then completes.
#[tokio::test]
async fn a_setup_running_across_a_server_restart_settles_and_can_run_again() {
    fn slow(c: &mut Config) {
        presets(c);
        c.presets.insert(
            "slow".into(),
            Preset {
                // Holds until the test lets it go (a file in the home), then ends well.
                setup: Some("until [ -e release ]; do sleep 0.05; done; echo released".into()),
                ..Default::default()
            },
        );
    }
    let s = TestServer::start_with(slow).await;
    let id = s.create_agent(json!({"name": "r", "preset": "slow"})).await;
    wait_setup(&s, &id, "running").await;

    let s = s.restart_with(slow).await;
    // A sandbox of the fake driver ends with its server (the agent sleeps); Docker's runs on.
    let a = s.wait_state(&id, &["running", "sleeping"][..]).await;
    if a["state"] == "sleeping" {
        s.start_running(&id).await;
    }
    // The sandbox may still run the script (then the release ends it well) or have lost it.
    exec_out(&s, &id, "touch release").await;
    crate::common::wait_for("the setup settles after the restart", || async {
        let setup = s.agent(&id).await["setup"].clone();
        setup["state"] == "done" || setup["state"] == "failed"
    })
    .await;
    let last = s.agent(&id).await["setup"].clone();
    if last["state"] == "failed" {
        let why = last["error"].as_str().unwrap_or_default();
        assert!(why.contains("stopped while the setup script ran"), "{last}");
        assert!(
            why.contains(&format!("/api/v1/agents/{id}/setup")),
            "{last}"
        );
        s.act(&id, "setup").await;
        wait_setup(&s, &id, "done").await;
    }
    assert!(setup_log(&s, &id).await.contains("released"));
    s.stop().await;
}
