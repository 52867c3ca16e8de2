//! Light sleep on the fake driver (docs/api.md, "Light sleep"): an idle agent is paused, then
//! stopped after its `deepSleepMinutes` (0: stopped straight away); `POST …/pause` pauses one
//! now; every use (and a start) thaws a paused agent; a stop and a destroy take a paused one;
//! `deepSleepMinutes` is checked on create, `PATCH` and presets; a restart settles a paused agent
//! whose sandbox is gone. `sandbox.idle_minute` is shortened, so a minute lasts a moment. What
//! a pause keeps (processes, terminals) and an outside `docker pause` are in `docker::pause`.

use std::time::Duration;

use agenthold::agents::preset::Preset;
use serde_json::{json, Value};

use crate::common::sse::{states, Events};
use crate::common::{expect_error, TestServer};

/// A server whose `idleMinutes` unit lasts half a second, checked often.
async fn quick_server() -> TestServer {
    TestServer::start_with(|c| {
        c.sandbox.idle_minute = Duration::from_millis(500);
        c.sandbox.idle_check_interval = Duration::from_millis(100);
    })
    .await
}

fn time(agent: &Value, key: &str) -> chrono::DateTime<chrono::Utc> {
    agent[key]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("{key} is not a time: {agent}"))
        .to_utc()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_is_paused_then_stopped_after_its_deep_sleep() {
    let s = quick_server().await;
    let mut events = Events::open(&s).await;
    // Paused after 0.5 s unused, stopped 2 s after that.
    let id = s
        .running_agent(json!({"name": "dozy", "idleMinutes": 1, "deepSleepMinutes": 4}))
        .await;
    assert_eq!(s.agent(&id).await["deepSleepMinutes"], 4);
    let paused = s.wait_state(&id, "paused").await;
    // While paused, sleepsAt is when the deep sleep begins.
    let left = time(&paused, "sleepsAt") - chrono::Utc::now();
    assert!(
        left <= chrono::Duration::seconds(2) && left > chrono::Duration::seconds(-1),
        "{paused}"
    );
    s.wait_state(&id, "sleeping").await;
    let seen = events
        .about_until(&id, |kind, data| {
            kind == "agent" && data["state"] == "sleeping"
        })
        .await;
    let moves: Vec<String> = states(&seen)
        .into_iter()
        .skip_while(|st| st != "running")
        .collect();
    let mut moves = moves;
    moves.dedup();
    assert_eq!(
        moves,
        ["running", "paused", "stopping", "sleeping"],
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deep_sleep_zero_an_idle_agent_is_stopped_straight_away() {
    let s = quick_server().await;
    let mut events = Events::open(&s).await;
    let id = s
        .running_agent(json!({"name": "light", "idleMinutes": 1, "deepSleepMinutes": 0}))
        .await;
    let seen = events
        .about_until(&id, |kind, data| {
            kind == "agent" && data["state"] == "sleeping"
        })
        .await;
    assert!(
        !states(&seen).iter().any(|st| st == "paused"),
        "an agent with deepSleepMinutes 0 was paused: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_route_pauses_and_every_use_thaws() {
    let s = TestServer::start().await;
    let id = s.running_agent("frozen").await;
    s.write_tree(&id, &[("note.txt", "kept")]).await;
    let pause = format!("/api/v1/agents/{id}/pause");

    let (st, body) = s.call("POST", &pause, None).await;
    assert_eq!(
        (st, body["state"].as_str()),
        (202, Some("paused")),
        "{body}"
    );
    // Paused is settled: pausing again is a conflict that names the state.
    let (st, body) = s.call("POST", &pause, None).await;
    assert_eq!(st, 409, "{body}");
    assert!(body.to_string().contains("paused"), "{body}");

    // An exec thaws it and answers at once.
    assert_eq!(s.exec_ok(&id, &["echo", "thawed"]).await.trim(), "thawed");
    assert_eq!(s.state(&id).await, "running");

    // So does a file read.
    s.call("POST", &pause, None).await;
    assert_eq!(s.state(&id).await, "paused");
    let text = s
        .get_text(&format!("/api/v1/agents/{id}/fs/read?path=note.txt"))
        .await;
    assert_eq!(text, "kept");
    assert_eq!(s.state(&id).await, "running");

    // A listing does not: the processes are as last heard, and the agent stays paused.
    s.call("POST", &pause, None).await;
    let (st, _) = s
        .call("GET", &format!("/api/v1/agents/{id}/processes"), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.state(&id).await, "paused");

    // A start thaws it.
    let (st, body) = s
        .call("POST", &format!("/api/v1/agents/{id}/start"), None)
        .await;
    assert_eq!(
        (st, body["state"].as_str()),
        (202, Some("running")),
        "{body}"
    );

    // A stop takes a paused agent to sleep, and a sleeping one cannot be paused.
    s.call("POST", &pause, None).await;
    s.stop_sleeping(&id).await;
    let r = s.post(&pause).send().await.unwrap();
    expect_error(r, 409, "conflict").await;

    // A destroy takes a paused one too.
    s.start_running(&id).await;
    s.call("POST", &pause, None).await;
    s.destroy(&id).await;
    let r = s.post(&pause).send().await.unwrap();
    expect_error(r, 404, "not_found").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_sleep_minutes_is_checked_and_follows_request_then_preset_then_server() {
    let s = TestServer::start_with(|c| {
        c.sandbox.default_deep_sleep_minutes = 30;
        c.presets.insert(
            "nap".to_string(),
            Preset {
                deep_sleep_minutes: Some(5),
                ..Default::default()
            },
        );
    })
    .await;
    let plain = s.created_agent(json!({"name": "plain"})).await;
    assert_eq!(plain["deepSleepMinutes"], 30, "{plain}");
    let napper = s
        .created_agent(json!({"name": "napper", "preset": "nap"}))
        .await;
    assert_eq!(napper["deepSleepMinutes"], 5, "{napper}");
    let own = s
        .created_agent(json!({"name": "own", "preset": "nap", "deepSleepMinutes": 0}))
        .await;
    assert_eq!(own["deepSleepMinutes"], 0, "{own}");
    let presets = s.get_json("/api/v1/presets").await;
    let nap = presets
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == "nap"))
        .unwrap_or_else(|| panic!("no preset nap: {presets}"));
    assert_eq!(nap["deepSleepMinutes"], 5);

    for bad in [json!(10081), json!(-1), json!("soon"), json!(1.5)] {
        let r = s
            .send(
                "POST",
                "/api/v1/agents",
                &json!({"name": "bad", "deepSleepMinutes": bad}),
            )
            .await;
        let msg = expect_error(r, 400, "invalid").await;
        assert!(msg.contains("deepSleepMinutes"), "{bad}: {msg}");
    }
    let id = plain["id"].as_str().unwrap();
    let r = s.patch_agent(id, json!({"deepSleepMinutes": 10081})).await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("deepSleepMinutes"), "{msg}");
    let r = s.patch_agent(id, json!({"deepSleepMinutes": 7})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(s.agent(id).await["deepSleepMinutes"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_agent_whose_sandbox_ended_with_the_server_sleeps_after_a_restart() {
    let s = TestServer::start().await;
    let id = s.running_agent("restarted").await;
    let (st, body) = s
        .call("POST", &format!("/api/v1/agents/{id}/pause"), None)
        .await;
    assert_eq!(st, 202, "{body}");
    // The fake driver's sandboxes end with the server: the new one finds it stopped.
    let s = s.restart_with(|_| {}).await;
    s.settles_to(&id, "sleeping", "a paused agent without its sandbox")
        .await;
    // And it wakes as any sleeping agent does.
    assert_eq!(s.exec_ok(&id, &["echo", "back"]).await.trim(), "back");
}

/// A use that begins while the sandbox is being frozen finds the agent still running and goes on
/// to it; the pause must not leave it waiting on a frozen sandbox: once frozen, the sandbox is
/// thawed at once and the pause says it did not happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_use_that_begins_while_a_pause_is_under_way_undoes_the_pause() {
    use agenthold::driver::fake::{PAUSE_HOLD, PAUSE_WAITING};
    let s = TestServer::start().await;
    let id = s.running_agent("racer").await;
    let folder = s.dir.path().join("fake").join(&id);
    std::fs::write(folder.join(PAUSE_HOLD), b"").expect("hold the pause");
    let pause = {
        let api = s.api.clone();
        let path = format!("/api/v1/agents/{id}/pause");
        tokio::spawn(async move { api.call("POST", &path, None).await })
    };
    crate::common::wait_for("the pause to be under way", || async {
        folder.join(PAUSE_WAITING).exists()
    })
    .await;
    // The agent is still running as far as anyone can see: the exec goes on to the sandbox.
    assert_eq!(s.state(&id).await, "running");
    assert_eq!(s.exec_ok(&id, &["echo", "went-on"]).await.trim(), "went-on");
    std::fs::remove_file(folder.join(PAUSE_HOLD)).expect("let the pause go on");

    let (st, body) = pause.await.expect("join");
    assert_eq!(st, 409, "the pause should have been undone: {body}");
    assert!(body.to_string().contains("was not paused"), "{body}");
    assert_eq!(s.state(&id).await, "running");
    assert_eq!(s.exec_ok(&id, &["echo", "still"]).await.trim(), "still");
}

/// Under memory pressure (here: more free memory asked for than any host has) a paused agent is
/// stopped, while a running one is left alone (which paused agents go first is
/// `lifecycle::pressure`'s unit tests').
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_memory_pressure_a_paused_agent_is_stopped_and_a_running_one_is_not() {
    let s = TestServer::start_with(|c| {
        c.sandbox.idle_check_interval = Duration::from_millis(100);
        c.sandbox.min_free_memory_mb = u64::MAX / 2;
    })
    .await;
    let busy = s.running_agent("busy").await;
    let id = s.running_agent("frozen").await;
    let (st, body) = s
        .call("POST", &format!("/api/v1/agents/{id}/pause"), None)
        .await;
    assert_eq!(st, 202, "{body}");
    s.wait_state(&id, "sleeping").await;
    assert_eq!(s.state(&busy).await, "running");
}
