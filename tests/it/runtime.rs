//! Per-agent container runtimes (issue #17) on the fake driver, whose engine has `runc` and
//! `runsc` and records each sandbox's runtime in its folder: choosing one, the allowed list,
//! changing it through a rebuild, and a runtime the engine lacks.

use crate::common::{expect_error, test_config, wait_for, TestServer};
use agenthold::driver::fake::RUNTIME_FILE;
use serde_json::{json, Value};

/// The runtime the fake driver made `id`'s sandbox with.
fn sandbox_runtime(s: &TestServer, id: &str) -> String {
    std::fs::read_to_string(s.dir.path().join("fake").join(id).join(RUNTIME_FILE))
        .unwrap_or_default()
}

/// Asks for an agent that may be refused: the response, whatever its status.
async fn create(s: &TestServer, body: Value) -> reqwest::Response {
    s.send("POST", "/api/v1/agents", &body).await
}

async fn limits(s: &TestServer) -> Value {
    s.get_json("/api/v1/limits").await
}

#[tokio::test]
async fn each_agent_runs_on_the_runtime_it_asked_for() {
    let s = TestServer::start().await;
    assert_eq!(limits(&s).await["runtimes"], json!(["runc", "runsc"]));

    let plain = s.created_agent(json!({"name": "plain"})).await;
    assert_eq!(plain["runtime"], "runc", "the engine's default");
    let gvisor = s
        .created_agent(json!({"name": "gvisor", "runtime": "runsc"}))
        .await;
    assert_eq!(gvisor["runtime"], "runsc");
    let (plain, gvisor) = (
        plain["id"].as_str().unwrap(),
        gvisor["id"].as_str().unwrap(),
    );
    s.wait_state(plain, "running").await;
    s.wait_state(gvisor, "running").await;
    assert_eq!(sandbox_runtime(&s, plain), "runc");
    assert_eq!(sandbox_runtime(&s, gvisor), "runsc");
    assert_eq!(s.agent(gvisor).await["runtime"], "runsc");
    let listed = s.get_json("/api/v1/agents").await;
    let runtimes: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["runtime"].as_str().unwrap())
        .collect();
    assert_eq!(runtimes, ["runc", "runsc"]);
}

#[tokio::test]
async fn a_runtime_not_allowed_is_400_naming_the_allowed_ones() {
    let s = TestServer::start().await;
    for bad in ["kata", "", "RUNC", "runc "] {
        let r = create(&s, json!({"name": "x", "runtime": bad})).await;
        assert_eq!(r.status(), 400, "{bad:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["field"], "runtime", "{body}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("allowed: runc, runsc"), "{msg}");
    }
    let r = create(&s, json!({"name": "x", "runtime": 7})).await;
    expect_error(r, 400, "invalid").await;
    let id = s.running_agent("ok").await;
    let r = s.patch_agent(&id, json!({"runtime": "kata"})).await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("allowed: runc, runsc"), "{msg}");
    assert_eq!(s.agent(&id).await["needsRebuild"], false);

    // The served document states them as the field's values.
    let doc = s.get_json("/api/v1/openapi.json").await;
    for schema in ["CreateAgent", "UpdateAgent"] {
        assert_eq!(
            doc["components"]["schemas"][schema]["properties"]["runtime"]["enum"],
            json!(["runc", "runsc"]),
            "{schema}"
        );
    }
}

#[tokio::test]
async fn changing_the_runtime_needs_a_rebuild_which_keeps_the_home() {
    let s = TestServer::start().await;
    let id = s.running_agent("switch").await;
    let home = s.dir.path().join("fake").join(&id).join("home");
    std::fs::write(home.join("kept.txt"), "still here").unwrap();

    let r = s.patch_agent(&id, json!({"runtime": "runc"})).await;
    let a: Value = r.json().await.unwrap();
    assert_eq!(a["needsRebuild"], false, "the same runtime is no change");
    let r = s.patch_agent(&id, json!({"runtime": "runsc"})).await;
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    assert_eq!(
        (&a["runtime"], &a["needsRebuild"]),
        (&json!("runsc"), &json!(true))
    );
    assert_eq!(
        sandbox_runtime(&s, &id),
        "runc",
        "applied only by a rebuild"
    );

    s.act(&id, "rebuild").await;
    s.wait_state(&id, "running").await;
    wait_for("needsRebuild cleared", || async {
        s.agent(&id).await["needsRebuild"] == json!(false)
    })
    .await;
    assert_eq!(sandbox_runtime(&s, &id), "runsc");
    assert_eq!(
        std::fs::read_to_string(home.join("kept.txt")).unwrap(),
        "still here"
    );
}

#[tokio::test]
async fn a_runtime_the_engine_lacks_fails_the_start_saying_so_and_can_be_changed() {
    let s = TestServer::start_with(|c| {
        c.sandbox.allowed_runtimes = Some(vec!["runc".into(), "kata".into()]);
    })
    .await;
    assert_eq!(limits(&s).await["runtimes"], json!(["runc", "kata"]));
    let r = create(&s, json!({"name": "x", "runtime": "runsc"})).await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("allowed: runc, kata"), "{msg}");

    let a = s
        .created_agent(json!({"name": "k", "runtime": "kata"}))
        .await;
    let id = a["id"].as_str().unwrap();
    wait_for("the create to fail", || async {
        s.state(id).await == "error"
    })
    .await;
    let error = s.agent(id).await["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("no runtime \"kata\"") && error.contains("runc, runsc"),
        "{error}"
    );
    // `error` stays recoverable: another runtime, then a start.
    let r = s.patch_agent(id, json!({"runtime": "runc"})).await;
    assert_eq!(r.status(), 200);
    s.start_running(id).await;
    assert_eq!(sandbox_runtime(&s, id), "runc");
}

#[tokio::test]
async fn the_configured_default_runtime_comes_first_and_applies_to_agents_asking_for_none() {
    let s = TestServer::start_with(|c| c.sandbox.runtime = "runsc".into()).await;
    assert_eq!(limits(&s).await["runtimes"], json!(["runsc", "runc"]));
    let a = s.created_agent(json!({"name": "d"})).await;
    assert_eq!(a["runtime"], "runsc");
    let id = a["id"].as_str().unwrap();
    s.wait_state(id, "running").await;
    assert_eq!(sandbox_runtime(&s, id), "runsc");
}

#[tokio::test]
async fn an_allowed_list_without_the_default_stops_the_server_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.sandbox.allowed_runtimes = Some(vec!["runsc".into()]);
    let err = match agenthold::server::Server::bind(config).await {
        Ok(_) => panic!("a server without its default runtime allowed started"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("sandbox.allowed_runtimes (runsc) does not hold runc"),
        "{err}"
    );
}

#[tokio::test]
async fn a_preset_s_runtime_applies_unless_the_request_names_one() {
    let s = TestServer::start_with(|c| {
        let gvisor = agenthold::agents::preset::Preset {
            runtime: Some("runsc".into()),
            ..Default::default()
        };
        c.presets.insert("isolated".into(), gvisor);
        let unknown = agenthold::agents::preset::Preset {
            runtime: Some("kata".into()),
            ..Default::default()
        };
        c.presets.insert("elsewhere".into(), unknown);
    })
    .await;
    let from_preset = s
        .created_agent(json!({"name": "iso", "preset": "isolated"}))
        .await;
    assert_eq!(from_preset["runtime"], "runsc");
    let id = from_preset["id"].as_str().unwrap();
    s.wait_state(id, "running").await;
    assert_eq!(sandbox_runtime(&s, id), "runsc");

    let overridden = s
        .created_agent(json!({"name": "iso-runc", "preset": "isolated", "runtime": "runc"}))
        .await;
    assert_eq!(overridden["runtime"], "runc");

    // A preset naming a runtime this server does not allow is refused like a request would be.
    let r = create(&s, json!({"name": "kata", "preset": "elsewhere"})).await;
    let message = expect_error(r, 400, "invalid").await;
    assert!(
        message.contains("runsc"),
        "names the allowed ones: {message}"
    );
    s.stop().await;
}
