//! Lifetimes and finding agents: `ttlMinutes` destroys an agent at its `expiresAt` whatever its
//! state (after an `expiring` event), a keep-alive or a `PATCH` moves the deadline, a restart
//! keeps it; labels select agents with `state` and `preset` in `GET /api/v1/agents`, and
//! `/api/v1/events?agent=ID` keeps to one agent. `sandbox.idle_minute` is shortened, so a
//! `ttlMinutes` unit lasts a moment.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::common::{expect_error, sse::Events, wait_for, TestServer, DEADLINE};

/// One `ttlMinutes` unit, and the keeper's longest wait.
fn quick(minute: Duration) -> impl FnOnce(&mut agenthold::config::Config) {
    move |c| {
        c.sandbox.idle_minute = minute;
        c.sandbox.idle_check_interval = Duration::from_millis(200);
        c.sandbox.default_deep_sleep_minutes = 0;
    }
}

fn expires_at(agent: &Value) -> DateTime<Utc> {
    agent["expiresAt"]
        .as_str()
        .unwrap_or_else(|| panic!("no expiresAt: {agent}"))
        .parse()
        .expect("expiresAt is a time")
}

async fn gone(s: &TestServer, id: &str) {
    wait_for(&format!("agent {id} destroyed"), || async {
        s.get(&format!("/api/v1/agents/{id}"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 404)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_is_destroyed_at_its_deadline_after_an_expiring_event_whatever_its_state() {
    let s = TestServer::start_with(quick(Duration::from_millis(500))).await;
    let id = s
        .running_agent(json!({"name": "short", "ttlMinutes": 3}))
        .await;
    let mut events = Events::open_at(&s, &format!("/api/v1/events?agent={id}")).await;
    let agent = s.agent(&id).await;
    assert_eq!(agent["ttlMinutes"], 3);
    let deadline = expires_at(&agent);
    let created: DateTime<Utc> = agent["createdAt"].as_str().unwrap().parse().unwrap();
    let lifetime = deadline - created;
    assert!(
        (chrono::Duration::milliseconds(1400)..=chrono::Duration::milliseconds(1600))
            .contains(&lifetime),
        "3 units of 500 ms from its creation: {lifetime}"
    );
    // A sleeping agent goes too.
    s.stop_sleeping(&id).await;
    let seen = events.about_until(&id, |kind, _| kind == "deleted").await;
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    let warned = kinds
        .iter()
        .position(|k| *k == "expiring")
        .expect("an expiring event");
    assert_eq!(
        expires_at(&seen[warned].1),
        deadline,
        "{:?}",
        seen[warned].1
    );
    // It comes one unit (500 ms here) before the deadline, not after it.
    let destroying = seen
        .iter()
        .position(|(k, d)| k == "agent" && d["state"] == "destroying")
        .expect("destroyed through the lifecycle");
    assert!(warned < destroying, "{kinds:?}");
    assert!(Utc::now() >= deadline);
    gone(&s, &id).await;
    // An agent without a TTL stays.
    let other = s.running_agent("stays").await;
    assert_eq!(s.agent(&other).await["expiresAt"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_and_patch_move_the_deadline_and_zero_or_null_removes_it() {
    let s = TestServer::start_with(quick(Duration::from_secs(60))).await;
    let id = s
        .running_agent(json!({"name": "kept", "ttlMinutes": 5}))
        .await;
    let first = expires_at(&s.agent(&id).await);
    let (status, agent) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/keep-alive"),
            Some(json!({"ttlMinutes": 30})),
        )
        .await;
    assert_eq!(status, 200, "{agent}");
    assert_eq!(agent["ttlMinutes"], 30);
    let moved = expires_at(&agent);
    assert!(
        moved - first >= chrono::Duration::minutes(24),
        "{first} → {moved}"
    );
    assert_eq!(expires_at(&s.agent(&id).await), moved, "stored");
    // Without ttlMinutes: its own again, from now.
    let (status, agent) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{id}/keep-alive"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{agent}");
    assert!(expires_at(&agent) >= moved);
    // PATCH: a new lifetime from now, and 0 or null takes it away.
    let r = s.patch_agent(&id, json!({"ttlMinutes": 2})).await;
    assert_eq!(r.status(), 200);
    let agent: Value = r.json().await.unwrap();
    assert!(expires_at(&agent) < moved);
    for none in [json!(0), Value::Null] {
        s.patch_agent(&id, json!({"ttlMinutes": 2})).await;
        let r = s.patch_agent(&id, json!({ "ttlMinutes": none })).await;
        assert_eq!(r.status(), 200);
        let agent: Value = r.json().await.unwrap();
        assert_eq!(
            (&agent["ttlMinutes"], &agent["expiresAt"]),
            (&Value::Null, &Value::Null)
        );
    }
    // A PATCH that does not name it leaves it.
    s.patch_agent(&id, json!({"ttlMinutes": 7})).await;
    let before = s.agent(&id).await["expiresAt"].clone();
    s.patch_agent(&id, json!({"idleMinutes": 3})).await;
    assert_eq!(s.agent(&id).await["expiresAt"], before);
    // Keep-alive's bounds, and nothing to keep alive.
    let path = format!("/api/v1/agents/{id}/keep-alive");
    for bad in [
        json!({"ttlMinutes": 0}),
        json!({"ttlMinutes": 525601}),
        json!({"ttlMinutes": "x"}),
    ] {
        let r = s.send("POST", &path, &bad).await;
        expect_error(r, 400, "invalid").await;
    }
    s.patch_agent(&id, json!({"ttlMinutes": null})).await;
    let r = s.send("POST", &path, &json!({})).await;
    expect_error(r, 409, "conflict").await;
    let r = s
        .send(
            "POST",
            "/api/v1/agents/nosuchagent0/keep-alive",
            &json!({"ttlMinutes": 1}),
        )
        .await;
    expect_error(r, 404, "not_found").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_bounds_and_presets() {
    let s = TestServer::start_with(|c| {
        c.presets.insert(
            "ci".into(),
            agenthold::agents::preset::Preset {
                ttl_minutes: Some(60),
                labels: [
                    ("team".to_string(), "ci".to_string()),
                    ("tier".into(), "low".into()),
                ]
                .into(),
                ..Default::default()
            },
        );
    })
    .await;
    for bad in [json!(0), json!(525601), json!(-1), json!(1.5)] {
        let r = s
            .send(
                "POST",
                "/api/v1/agents",
                &json!({"name": "x", "ttlMinutes": bad}),
            )
            .await;
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "x", "ttlMinutes": 0}),
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "ttlMinutes");
    let a = s
        .created_agent(json!({"name": "year", "ttlMinutes": 525600}))
        .await;
    assert_eq!(a["ttlMinutes"], 525600);
    // The preset's lifetime and labels, under the request's.
    let a = s
        .created_agent(json!({"name": "from-ci", "preset": "ci", "labels": {"tier": "high"}}))
        .await;
    assert_eq!(a["ttlMinutes"], 60);
    assert_eq!(a["labels"], json!({"team": "ci", "tier": "high"}));
    let a = s
        .created_agent(json!({"name": "no-ttl", "preset": "ci", "ttlMinutes": null}))
        .await;
    assert_eq!(
        (&a["ttlMinutes"], &a["expiresAt"]),
        (&Value::Null, &Value::Null)
    );
    let presets = s.get_json("/api/v1/presets").await;
    let ci = presets
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "ci")
        .unwrap();
    assert_eq!(
        (&ci["ttlMinutes"], &ci["labels"]["team"]),
        (&json!(60), &json!("ci"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_deadline_and_enforces_it() {
    let s = TestServer::start_with(quick(Duration::from_secs(60))).await;
    let id = s
        .running_agent(json!({"name": "survivor", "ttlMinutes": 10}))
        .await;
    let deadline = expires_at(&s.agent(&id).await);
    let s = s.restart_with(quick(Duration::from_secs(60))).await;
    let agent = s.agent(&id).await;
    assert_eq!(
        expires_at(&agent),
        deadline,
        "the stored deadline, not a new one"
    );
    assert_eq!(agent["ttlMinutes"], 10);
    // With a shorter unit the same lifetime is already up: the stored deadline is what counts,
    // so bring it near through the store and restart again.
    let s = s.restart_with(quick(Duration::from_millis(100))).await;
    assert_eq!(expires_at(&s.agent(&id).await), deadline);
    s.store
        .set_ttl(&id, 10, Utc::now() + chrono::Duration::milliseconds(300))
        .await
        .unwrap();
    let s = s.restart_with(quick(Duration::from_millis(100))).await;
    gone(&s, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_and_filters_select_exactly_the_right_agents() {
    let s = TestServer::start_with(|c| {
        for name in ["dev", "minimal"] {
            c.presets.insert(name.into(), Default::default());
        }
        c.sandbox.default_preset = Some("dev".into());
    })
    .await;
    let a = s
        .running_agent(json!({"name": "a", "labels": {"team": "ml", "env": "prod"}}))
        .await;
    let b = s
        .running_agent(json!({"name": "b", "preset": "minimal", "labels": {"team": "ml"}}))
        .await;
    let c = s
        .sleeping_agent(json!({"name": "c", "labels": {"team": "web", "env": "prod"}}))
        .await;
    let d = s.running_agent(json!({"name": "d"})).await;
    let names = |ids: &[&String]| -> Vec<String> { ids.iter().map(|s| s.to_string()).collect() };
    for (query, want) in [
        ("", names(&[&a, &b, &c, &d])),
        ("?label=team=ml", names(&[&a, &b])),
        ("?label=team", names(&[&a, &b, &c])),
        ("?label=env=prod&label=team=ml", names(&[&a])),
        ("?label=env", names(&[&a, &c])),
        ("?label=team=nobody", vec![]),
        ("?state=sleeping", names(&[&c])),
        ("?state=running&label=env", names(&[&a])),
        ("?preset=minimal", names(&[&b])),
        ("?preset=minimal&label=team=ml&state=running", names(&[&b])),
        ("?preset=dev&label=team=ml", names(&[&a])),
        ("?label=team%3Dweb", names(&[&c])),
        ("?name=b", names(&[&b])),
        ("?name=b&label=env", vec![]),
    ] {
        let listed = s.get_json(&format!("/api/v1/agents{query}")).await;
        let ids: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, want, "{query}");
    }
    for (query, field) in [
        ("?label=Team=ml", "label"),
        ("?label==x", "label"),
        ("?state=asleep", "state"),
        ("?colour=red", "query"),
        ("?state=running&state=error", "state"),
    ] {
        let r = s
            .get(&format!("/api/v1/agents{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{query}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    // PATCH replaces the whole map.
    let r = s.patch_agent(&a, json!({"labels": {"team": "web"}})).await;
    assert_eq!(r.status(), 200);
    let agent: Value = r.json().await.unwrap();
    assert_eq!(agent["labels"], json!({"team": "web"}));
    let listed = s.get_json("/api/v1/agents?label=env").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let r = s.patch_agent(&a, json!({"labels": {}})).await;
    let agent: Value = r.json().await.unwrap();
    assert_eq!(agent["labels"], json!({}));
}

#[tokio::test]
async fn bad_labels_are_400_naming_labels() {
    let s = TestServer::start().await;
    let many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    for labels in [
        json!({"Team": "x"}),
        json!({"": "x"}),
        json!({"a b": "x"}),
        json!({"k".repeat(64): "x"}),
        json!({"k": "v".repeat(257)}),
        Value::Object(many),
    ] {
        let r = s
            .send(
                "POST",
                "/api/v1/agents",
                &json!({"name": "x", "labels": labels}),
            )
            .await;
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["field"], "labels", "{body}");
    }
    let r = s
        .send(
            "POST",
            "/api/v1/agents",
            &json!({"name": "x", "labels": {"k": 1}}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let id = s.create_agent("ok").await;
    let r = s.patch_agent(&id, json!({"labels": {"BAD": "x"}})).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "labels");
    let a = s
        .created_agent(
            json!({"name": "edge", "labels": {"k".repeat(63): "é".repeat(256), "a.b/c-d_e": ""}}),
        )
        .await;
    assert_eq!(a["labels"].as_object().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_one_agent_only() {
    let s = TestServer::start().await;
    let mine = s.running_agent("mine").await;
    let theirs = s.running_agent("theirs").await;
    let mut events = Events::open_at(&s, &format!("/api/v1/events?agent={mine}")).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    // The snapshot holds only it.
    let (kind, data) = events.next(deadline).await;
    assert_eq!(
        (kind.as_str(), data["id"].as_str()),
        ("agent", Some(mine.as_str()))
    );
    s.act(&theirs, "stop").await;
    s.wait_state(&theirs, "sleeping").await;
    s.act(&mine, "stop").await;
    loop {
        let (kind, data) = events.next(deadline).await;
        assert_eq!(data["id"], mine.as_str(), "{kind}: {data}");
        if data["state"] == "sleeping" {
            break;
        }
    }
    let r = s
        .get("/api/v1/events?agent=nosuchagent0")
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "not_found").await;
    let r = s.get("/api/v1/events?colour=red").send().await.unwrap();
    assert_eq!(r.status(), 400);
}
